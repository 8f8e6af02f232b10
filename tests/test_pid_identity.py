"""Identity of the target over the window (red-team round 2, class 5: R11): a pid is the same
process only while its start time is.

Real pid reuse, made on purpose: the server is killed mid-window and, as root, the kernel's
``/proc/sys/kernel/ns_last_pid`` is set so that the next process started gets the same pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.helpers import REPO_ROOT

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
SERVER = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"
NEWCOMER = "import time\ntime.sleep(600)  # UNRELATED_NEWCOMER\n"


def _spawn_with_pid(pid: int, code: str, tries: int = 50) -> subprocess.Popen | None:
    """A process with exactly ``pid`` (None if another process took it first)."""
    for _ in range(tries):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(NS_LAST_PID, os.W_OK),
                    reason="reusing a pid on purpose needs root (ns_last_pid)")
def test_r11_a_pid_reused_during_the_window_is_reported_dead(tmp_path: Path) -> None:
    """Before: the dead server was reported alive (and HUNG), the newcomer dumped with py-spy
    and merged in. After: the record ends dead with 'pid now names another process', and no
    stack of the newcomer is kept."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL)
    assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
    pid = server.pid
    snap = tmp_path / "s.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cli = subprocess.Popen([sys.executable, "-m", "hangdoctor", "diagnose", "localhost", "--pid",
                            str(pid), "--window", "6", "--deadline", "40", "--no-gpu",
                            "--save-snapshot", str(snap), "-o", str(tmp_path / "r.json")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    newcomer = None
    try:
        time.sleep(2.5)  # the window's first sample is taken
        server.kill()
        server.wait()
        newcomer = _spawn_with_pid(pid, NEWCOMER)
        if newcomer is None:
            pytest.skip("another process took the pid first")
        out, err = cli.communicate(timeout=90)
        assert "Traceback" not in err, err
        doc = json.loads(snap.read_text())
        rec = next(p for p in doc["processes"] if p["pid"] == pid)
        assert rec["alive"] is False and rec.get("pid_reused") is True, rec
        assert "another process" in rec["exit_info"]
        assert "UNRELATED_NEWCOMER" not in snap.read_text()
        # no sample of the pid shows the newcomer: the server sleeps on line 3 of its code,
        # the newcomer on line 2
        stacks = doc.get("stacks", {}).get(str(pid), {})
        lines = {f.get("line") for s in stacks.get("samples") or [] for t in s.get("threads") or []
                 for f in t.get("frames") or [] if f.get("name") == "<module>"}
        assert lines <= {3}, (lines, stacks)
        assert not [c for c in rec.get("window_samples") or [] if c.get("t", 0) > 3.5], rec
    finally:
        if cli.poll() is None:
            cli.kill()
        if newcomer is not None:
            newcomer.kill()
            newcomer.wait()
