"""``--via 'ssh -J bastion node'``: the exec pipe through the real OpenSSH client, hopping
through a jump host (the loopback sshd of tests/sshd_fixture.py, reached through itself).

After ``ssh`` the script travels as one quoted word (ssh joins its arguments into one command
line for the remote shell); the probe's snapshot comes back past whatever the login shell
prints.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import CLI_TIMEOUT_S, need

from tests.sshd_fixture import sshd  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.ssh]


def test_via_ssh_through_a_jump_host(sshd, run_scenario, tmp_path) -> None:  # noqa: F811
    need(shutil.which("ssh") is not None, "the OpenSSH client (apt-get install openssh-client)")
    info = run_scenario("postload", workers=2)
    via = f"ssh -F {sshd.ssh_config} -o BatchMode=yes {sshd.alias}-jump"
    snap_path = tmp_path / "snap.json"
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "diagnose", "--via", via,
         "--pid", str(info.launcher_pid), "--window", "1", "--json",
         "--save-snapshot", str(snap_path)],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 3, proc.stderr
    analysis = json.loads(proc.stdout)
    assert analysis["causes"][0]["id"] == "post-load-deadlock"
    snap = json.loads(snap_path.read_text())
    assert snap["host"]["name"] == f"via:{via}"
    exec_entry = next(m for m in snap["manifest"] if m["source"] == "exec")
    assert exec_entry["status"] == "ok" and exec_entry["detail"].startswith("ssh -F ")
    assert {p["pid"] for p in snap["processes"]} >= set(info.worker_pids)
