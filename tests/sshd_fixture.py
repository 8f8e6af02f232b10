"""A real OpenSSH server on 127.0.0.1 for the SSH tests, plus helpers they share.

Import the fixtures into a test module (``from tests.sshd_fixture import sshd  # noqa: F401``);
this is a plain module because tests/conftest.py belongs to the whole suite.

Nothing here touches the real ``~/.ssh``: the server has its own host key, the client its own
key pair, ``known_hosts`` and ``ssh_config`` file, and tests pass those paths explicitly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sshd_tools import (  # noqa: F401 (free_port, stop_sshd: re-exported for the tests)
    SSHD,
    free_port,
    keygen,
    sshd_config,
    start_sshd_process,
    stop_sshd,
    wait_for_banner,
)

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


def start_sshd(workdir: Path) -> tuple[subprocess.Popen, SshdServer]:
    """Start ``sshd -D -e`` on a free loopback port with keys made in ``workdir``."""
    host_key = workdir / "ssh_host_ed25519_key"
    user_key = workdir / "id_ed25519"
    keygen(host_key, "hangdoctor-test-host")
    keygen(user_key, "hangdoctor-test-user")
    authorized = workdir / "authorized_keys"
    shutil.copyfile(str(user_key) + ".pub", authorized)
    os.chmod(authorized, 0o600)
    port = free_port()
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    config = workdir / "sshd_config"
    config.write_text(
        sshd_config(port, host_key, workdir / "sshd.pid", authorized, "Subsystem sftp internal-sftp",
                    # Sessions find the test environment's python and py-spy first, as on a host
                    # where they are installed; without it a fresh machine has no py-spy on the
                    # default PATH and every run takes the upload path.
                    f"SetEnv PATH={os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin")
    )
    proc = start_sshd_process(config, workdir / "sshd.log")
    try:
        wait_for_banner(port, proc, timeout_s=15.0)
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
