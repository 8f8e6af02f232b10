"""Issue 17 over a real OpenSSH on loopback: what can only be found out on the remote host.

A pid with no process there is refused as on localhost (one line, exit 2, no report); a
``--log`` that is not there is a source that could not be collected: the summary says so, and
the exit code is 4, not the verdict's.
"""

from __future__ import annotations

import subprocess

import pytest

from tests import sshd_fixture

sshd = sshd_fixture.sshd
pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def test_remote_pid_with_no_process_is_exit_2_and_no_report(sshd, hangdoctor_cli, tmp_path):
    out = tmp_path / "r.html"
    proc = hangdoctor_cli("diagnose", sshd.alias, "--pid", "999999", "--window", "0.3",
                          "-o", str(out), "--ssh-config", sshd.ssh_config)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"hangdoctor: no process 999999 on {sshd.alias}" in proc.stderr
    assert not out.exists()


def test_remote_missing_log_is_shown_and_exit_4(sshd, hangdoctor_cli):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        proc = hangdoctor_cli("diagnose", sshd.alias, "--pid", str(sleeper.pid), "--window", "0.3",
                              "--log", "/nonexistent.log", "--ssh-config", sshd.ssh_config)  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "not collected: log: /nonexistent.log: No such file or directory" in proc.stdout
