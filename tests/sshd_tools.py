"""Loopback OpenSSH servers: the primitives the SSH tests (tests/sshd_fixture.py) and the
benchmark (benchmarks/sshd_pool.py) share. Plain stdlib, no pytest, so the benchmark can
import it without the test tools.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"  # sshd refuses to start unless run by its absolute path


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        timeout=20,
        capture_output=True,
    )


def sshd_config(port: int, host_key: Path, pid_file: Path, authorized: Path, *extra: str) -> str:
    """An sshd_config for a root-capable, key-only listener on 127.0.0.1:port."""
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {host_key}",
            f"PidFile {pid_file}",
            f"AuthorizedKeysFile {authorized}",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            # Multi-host runs open 16+ connections at once; the default 10:30:100 drops
            # unauthenticated connections at random beyond 10.
            "MaxStartups 200",
            "MaxSessions 64",
            *extra,
            "LogLevel ERROR",
            "",
        ]
    )


def start_sshd_process(config: Path, log_path: Path) -> subprocess.Popen:
    """``sshd -D -e -f CONFIG`` with its output in ``log_path``."""
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation dir, absent in containers
    with open(log_path, "wb") as log:  # sshd keeps its own copy of the fd
        return subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_for_banner(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.settimeout(1.0)
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last_error = str(exc)
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer on port {port} in {timeout_s} s: {last_error}")


def stop_sshd(proc: subprocess.Popen) -> None:
    """Stop one listener we started (by its own pid); sessions end with their connections."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
