"""A real OpenSSH server on 127.0.0.1 for the SSH tests, plus helpers they share.

Import the fixtures into a test module (``from tests.sshd_fixture import sshd  # noqa: F401``);
this is a plain module because tests/conftest.py belongs to the whole suite.

Nothing here touches the real ``~/.ssh``: the server has its own host key, the client its own
key pair, ``known_hosts`` and ``ssh_config`` file, and tests pass those paths explicitly.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"  # sshd refuses to start unless run by its absolute path
ALIAS = "hd-test"


@dataclass
class SshdServer:
    """One running sshd and the client-side files that reach it."""

    host: str
    port: int
    user: str
    key_path: str  # the client's private key (ed25519, no passphrase)
    known_hosts: str  # holds the server's host key as "[127.0.0.1]:PORT ssh-ed25519 ..."
    ssh_config: str  # has "Host hd-test" -> this server
    alias: str
    host_key_pub: str  # the server's public host key line
    workdir: str
    pid: int

    @property
    def spec(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        timeout=20,
        capture_output=True,
    )


def _wait_for_banner(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
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


def start_sshd(workdir: Path) -> tuple[subprocess.Popen, SshdServer]:
    """Start ``sshd -D -e`` on a free loopback port with keys made in ``workdir``."""
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation dir, absent in containers
    host_key = workdir / "ssh_host_ed25519_key"
    user_key = workdir / "id_ed25519"
    _keygen(host_key, "hangdoctor-test-host")
    _keygen(user_key, "hangdoctor-test-user")
    authorized = workdir / "authorized_keys"
    shutil.copyfile(str(user_key) + ".pub", authorized)
    os.chmod(authorized, 0o600)
    port = free_port()
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {workdir / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                # The multi-host tests open 16 connections at once; the default 10:30:100
                # drops unauthenticated connections at random beyond 10.
                "MaxStartups 200",
                "MaxSessions 64",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    log = open(workdir / "sshd.log", "wb")  # sshd keeps its own copy of the fd
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        _wait_for_banner(port, proc, timeout_s=15.0)
    except Exception:
        stop_sshd(proc)
        raise RuntimeError(
            "sshd did not start: " + (workdir / "sshd.log").read_text(errors="replace")[-2000:]
        ) from None
    host_pub = (Path(str(host_key) + ".pub")).read_text().split()
    host_key_pub = f"{host_pub[0]} {host_pub[1]}"
    known_hosts = workdir / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key_pub}\n")
    ssh_config = workdir / "ssh_config"
    ssh_config.write_text(
        f"Host {ALIAS}\n"
        f"    HostName 127.0.0.1\n"
        f"    Port {port}\n"
        f"    User {user}\n"
        f"    IdentityFile {user_key}\n"
        f"    UserKnownHostsFile {known_hosts}\n"
        # The same server again, reached through itself as the jump host.
        f"Host {ALIAS}-jump\n"
        f"    HostName 127.0.0.1\n"
        f"    Port {port}\n"
        f"    User {user}\n"
        f"    IdentityFile {user_key}\n"
        f"    UserKnownHostsFile {known_hosts}\n"
        f"    ProxyJump {ALIAS}\n"
    )
    server = SshdServer(
        host="127.0.0.1",
        port=port,
        user=user,
        key_path=str(user_key),
        known_hosts=str(known_hosts),
        ssh_config=str(ssh_config),
        alias=ALIAS,
        host_key_pub=host_key_pub,
        workdir=str(workdir),
        pid=proc.pid,
    )
    return proc, server


def stop_sshd(proc: subprocess.Popen) -> None:
    """Stop the listener we started (by its own pid); sessions end with their connections."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _sshd_unavailable() -> str | None:
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (apt-get install openssh-server)"
    if not shutil.which("ssh-keygen"):
        return "ssh-keygen is missing (apt-get install openssh-client)"
    return None


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshdServer]:
    """A real sshd on 127.0.0.1 for the whole session; skipped (failed under CI=true) if absent."""
    why = _sshd_unavailable()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    workdir = Path(tempfile.mkdtemp(prefix="hd-sshd-"))
    proc, server = start_sshd(workdir)
    try:
        yield server
    finally:
        stop_sshd(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --- a hung process to diagnose --------------------------------------------------------------

HUNG_CHILD = r"""
import os, sys, threading, time
from multiprocessing.connection import Connection
# Exit on our own even if the test runner dies: tests never leave processes behind.
threading.Thread(target=lambda: (time.sleep(float(sys.argv[2])), os._exit(0)), daemon=True).start()
conn = Connection(int(sys.argv[1]))
print("ready", flush=True)
conn.recv()  # blocks forever: nobody ever sends (the post-load deadlock shape)
"""


@dataclass
class HungProcess:
    pid: int
    proc: subprocess.Popen
    writer_fd: int


def start_hung_process(lifetime_s: float = 60.0) -> HungProcess:
    """A Python process parked in ``Connection.recv`` on a pipe nobody writes to."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", HUNG_CHILD, str(read_fd), str(lifetime_s)],
        pass_fds=(read_fd,),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    os.close(read_fd)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # bounded by the child's own lifetime
    if line.strip() != b"ready":
        stop_process(HungProcess(proc.pid, proc, write_fd))
        raise RuntimeError("hung test process did not start")
    return HungProcess(proc.pid, proc, write_fd)


def stop_process(hung: HungProcess) -> None:
    """Kill the test process we started ourselves, by its pid."""
    if hung.proc.poll() is None:
        hung.proc.kill()
    hung.proc.wait(timeout=5)
    if hung.proc.stdout:
        hung.proc.stdout.close()
    try:
        os.close(hung.writer_fd)
    except OSError:
        pass


@pytest.fixture
def hung_process() -> Iterator[HungProcess]:
    hung = start_hung_process()
    try:
        yield hung
    finally:
        stop_process(hung)
