"""Issue 15, the SSH findings: a real loopback sshd whose forced command is hostile.

The server (its own keys, known_hosts, port) runs tests/faults/hostile_remote.py for every
session, whatever hangdoctor asked to run; the test picks its behaviour through a mode file.
hangdoctor runs as a real CLI process, so its wall time, exit code and peak RSS are measured as
a user would see them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faults import hostile_remote
from tests.faults.helpers import FAULTS_DIR, REPO_ROOT
from tests.sshd_tools import (
    SSHD,
    free_port,
    keygen,
    sshd_config,
    start_sshd_process,
    stop_sshd,
    wait_for_banner,
)


@dataclass
class HostileSshd:
    port: int
    user: str
    key_path: str
    known_hosts: str
    mode_file: Path

    @property
    def spec(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    def set_mode(self, mode: str, **params: object) -> None:
        self.mode_file.write_text(json.dumps({"mode": mode, **params}))


@pytest.fixture(scope="module")
def hostile_sshd() -> Iterator[HostileSshd]:
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        pytest.skip("openssh-server is not installed")
    workdir = Path(tempfile.mkdtemp(prefix="hd-hostile-sshd-"))
    host_key, user_key = workdir / "host_key", workdir / "id_ed25519"
    keygen(host_key, "hd-hostile-host")
    keygen(user_key, "hd-hostile-user")
    mode_file = workdir / "mode.json"
    forced = f"{sys.executable} {FAULTS_DIR / 'hostile_remote.py'} {mode_file}"
    pub = (Path(str(user_key) + ".pub")).read_text().strip()
    authorized = workdir / "authorized_keys"
    authorized.write_text(f'command="{forced}" {pub}\n')
    os.chmod(authorized, 0o600)
    port = free_port()
    config = workdir / "sshd_config"
    config.write_text(sshd_config(port, host_key, workdir / "sshd.pid", authorized))
    proc = start_sshd_process(config, workdir / "sshd.log")
    try:
        wait_for_banner(port, proc, timeout_s=15.0)
        host_pub = (Path(str(host_key) + ".pub")).read_text().split()
        known = workdir / "known_hosts"
        known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
        user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
        server = HostileSshd(port, user, str(user_key), str(known), mode_file)
        server.set_mode("real")
        yield server
    finally:
        stop_sshd(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def _hangdoctor(server: HostileSshd, *args: str, timeout_s: float = 120.0):
    """Run the CLI against the hostile server; (rc, stdout, stderr, wall_s, peak RSS MiB)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "hangdoctor", *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"hangdoctor still running after {timeout_s} s")
    wall_s = time.monotonic() - t0
    # the peak RSS of the CLI process: communicate() reaped it, so ask /proc before? no:
    # use the rusage of the finished child, collected through os.wait4 by a wrapper instead
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), wall_s


def _peak_rss_mib(server: HostileSshd, *args: str, timeout_s: float = 120.0):
    """Like _hangdoctor, with the CLI process's peak RSS in MiB: its VmHWM, read while it runs
    (ru_maxrss would count the memory of the forking test runner too)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hangdoctor", *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        peak_kib = 0
        end = time.monotonic() + timeout_s
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak_kib = max(peak_kib, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            if time.monotonic() > end:
                proc.kill()
                proc.wait()
                pytest.fail(f"hangdoctor still running after {timeout_s} s")
            time.sleep(0.01)
        wall_s = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        return (
            proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            wall_s,
            peak_kib / 1024,
        )


def _ssh_args(server: HostileSshd, deadline_s: float = 6.0) -> list[str]:
    return [
        "diagnose",
        server.spec,
        "--pid",
        "1",
        "--known-hosts",
        server.known_hosts,
        "--identity",
        server.key_path,
        "--ssh-config",
        "/dev/null",
        "--window",
        "0",
        "--deadline",
        str(deadline_s),
        "--ssh-option",
        "ConnectTimeout=5",
    ]


def test_hostile_sshd_runs_the_real_probe_in_real_mode(
    hostile_sshd: HostileSshd, tmp_path: Path
) -> None:
    """The yardstick: through the forced command, a normal host gives a normal snapshot."""
    hostile_sshd.set_mode("real")
    rc, _out, err, _wall = _hangdoctor(
        hostile_sshd, *_ssh_args(hostile_sshd), "--save-snapshot", str(tmp_path / "s.json")
    )
    assert rc != 4, err
    snap = json.loads((tmp_path / "s.json").read_text())
    assert snap["host"]["name"] == hostile_sshd.spec


def test_f5_brace_lines_from_a_login_script_cost_no_memory(hostile_sshd: HostileSshd) -> None:
    """120 KB of "{" lines: before, 3.5 GB of RSS (every "{" re-sliced the output and kept
    the slice); after, the client's peak RSS stays that of a normal run."""
    hostile_sshd.set_mode("braces", lines=60000)
    rc, _out, err, wall_s, rss_mib = _peak_rss_mib(hostile_sshd, *_ssh_args(hostile_sshd))
    print(f"WALL f5-braces {wall_s:.2f} s deadline 6 s; peak RSS {rss_mib:.0f} MiB")
    assert rc == 4, err
    assert "printed no snapshot" in err, err
    assert rss_mib < 250, f"peak RSS {rss_mib:.0f} MiB"
    assert wall_s < 6 + 5 + 5 + 10


def test_f5_endless_remote_stdout_is_capped(hostile_sshd: HostileSshd) -> None:
    """A remote that never stops printing: before, 4.6 GB of RSS in 10 s and past the
    deadline; after, reading stops at the cap with one line, within the deadline."""
    from hangdoctor.reach.ssh import MAX_STDOUT_BYTES

    hostile_sshd.set_mode("endless")
    deadline_s = 6.0
    rc, _out, err, wall_s, rss_mib = _peak_rss_mib(
        hostile_sshd, *_ssh_args(hostile_sshd, deadline_s)
    )
    print(f"WALL f5-endless {wall_s:.2f} s deadline {deadline_s:g} s; peak RSS {rss_mib:.0f} MiB")
    assert rc == 4, err
    assert "Traceback" not in err
    assert re.search(r"more than \d+ MiB on stdout|stopped answering", err), err
    # connect timeout + deadline + margin bound it, whatever the remote does
    assert wall_s < 5 + deadline_s + 5 + 5, wall_s
    assert rss_mib < (MAX_STDOUT_BYTES >> 20) * 2 + 200, f"peak RSS {rss_mib:.0f} MiB"


def test_f19_remedy_quotes_user_and_host(hostile_sshd: HostileSshd, tmp_path: Path) -> None:
    """A user name that is shell code: the printed remedy must run it as a name, never as
    code (it was `ssh -p PORT $(touch /tmp/pwned)@127.0.0.1 true`)."""
    marker = tmp_path / "pwned"
    user = f"$(touch {marker})"
    args = [
        "diagnose",
        f"127.0.0.1:{hostile_sshd.port}",
        "--pid",
        "1",
        "--ssh-option",
        f"User={user}",
        "--known-hosts",
        hostile_sshd.known_hosts,
        "--identity",
        hostile_sshd.key_path,
        "--ssh-config",
        "/dev/null",
        "--window",
        "0",
        "--deadline",
        "5",
    ]
    rc, _out, err, _wall = _hangdoctor(hostile_sshd, *args)
    assert rc == 4, err
    line = next((ln for ln in err.splitlines() if "ssh -p" in ln), None)
    assert line is not None, err
    command = line[line.index("ssh -p") :].split(";")[0]
    words = shlex.split(command)
    assert f"{user}@127.0.0.1" in words, words
    subprocess.run(["sh", "-n", "-c", command], check=True, timeout=10)  # valid sh
    assert not marker.exists()
    # run the remedy's user@host word through sh the way a user pasting it would: it must stay
    # a literal word
    word = command.split(" ", 3)[3].rsplit(" true", 1)[0]
    echoed = subprocess.run(
        ["sh", "-c", "printf '%s\\n' " + word], capture_output=True, text=True, timeout=10
    ).stdout.strip()
    assert echoed == f"{user}@127.0.0.1" and not marker.exists()


def test_f10_terminal_escapes_from_the_remote_never_reach_the_terminal(
    hostile_sshd: HostileSshd, tmp_path: Path
) -> None:
    """The remote's stderr, its snapshot's host name and discovery records carry escape
    sequences; no byte of ESC/BEL/C1 may reach the operator's terminal."""
    hostile_sshd.set_mode("escapes")
    args = _ssh_args(hostile_sshd)
    args.remove("--pid")
    args.remove("1")
    rc, out, err, _wall = _hangdoctor(hostile_sshd, *args, "-o", str(tmp_path / "r.md"))
    assert rc in (0, 3, 4, 5, 6, 7), err
    assert "pwned-title" in err or "node" in err, err  # the hostile strings were printed...
    for stream in (out, err):
        assert "\x1b" not in stream and "\x07" not in stream, repr(stream[-800:])
        assert not re.search("[\x80-\x9f]", stream)
    assert "\x1b" not in (tmp_path / "r.md").read_text()
    assert hostile_remote.ESC_PAYLOAD  # the payload is the one the remote sent
