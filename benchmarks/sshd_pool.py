"""Loopback OpenSSH servers for the benchmark: one ``sshd -D`` per simulated host.

Follows tests/sshd_fixture.py (same sshd_config, same readiness check), with three changes
the benchmark needs: several instances share one host key and one client key (so 32 hosts
start in a second or two); each session gets ``SetEnv PATH=...`` so the remote side finds
this machine's Python (and py-spy, unless the instance is meant to have none, which makes
hangdoctor upload its own); and ``python3`` on that PATH is a wrapper that runs the real
interpreter under ``/usr/bin/time``, which is how the benchmark reads the remote probe's own
CPU time and peak memory.

Nothing touches the real ``~/.ssh``: every path is in the pool's work directory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"  # sshd refuses to start unless run by its absolute path
ALIAS_PREFIX = "hd-bench-"
TIME_FORMAT = "%e %U %S %M"  # wall s, user s, sys s, peak RSS KiB


@dataclass
class SshHost:
    """One running sshd and what reaches it."""

    index: int
    alias: str  # Host entry in the pool's ssh_config
    port: int
    user: str
    proc: subprocess.Popen
    ru_file: str  # /usr/bin/time appends one line per remote python run here
    has_pyspy: bool

    @property
    def spec(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"


@dataclass
class SshdPool:
    """Several sshd listeners on 127.0.0.1 with a shared key pair and client files."""

    workdir: Path
    key_path: str
    known_hosts: str
    ssh_config: str
    hosts: list[SshHost] = field(default_factory=list)

    def stop(self) -> None:
        """Stop every listener we started, by its own pid."""
        for host in self.hosts:
            stop_sshd(host.proc)


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _write_wrapper(bin_dir: Path, python: str) -> None:
    """``python3`` that runs ``python`` under /usr/bin/time, appending to $HD_BENCH_RU."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "python3"
    wrapper.write_text(
        f'#!/bin/sh\nexec /usr/bin/time -f "{TIME_FORMAT}" -a -o "$HD_BENCH_RU" {python} "$@"\n'
    )
    wrapper.chmod(0o755)


def start_pool(
    workdir: Path, count: int, python: str, pyspy_dir: str, without_pyspy: int = 0
) -> SshdPool:
    """Start ``count`` sshd instances with py-spy on PATH and ``without_pyspy`` more without.

    ``python`` is the interpreter the remote probe runs with; ``pyspy_dir`` the folder that
    holds py-spy (put on the session PATH of the instances that have it).
    """
    if not os.path.exists(SSHD):
        raise RuntimeError(f"{SSHD} is missing (apt-get install openssh-server)")
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation dir, absent in containers
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = workdir / "ssh_host_ed25519_key"
    user_key = workdir / "id_ed25519"
    _keygen(host_key, "hangdoctor-bench-host")
    _keygen(user_key, "hangdoctor-bench-user")
    authorized = workdir / "authorized_keys"
    shutil.copyfile(str(user_key) + ".pub", authorized)
    os.chmod(authorized, 0o600)
    bin_with = workdir / "bin-with-pyspy"
    bin_without = workdir / "bin-without-pyspy"
    _write_wrapper(bin_with, python)
    _write_wrapper(bin_without, python)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    host_pub = Path(str(host_key) + ".pub").read_text().split()
    pool = SshdPool(
        workdir=workdir,
        key_path=str(user_key),
        known_hosts=str(workdir / "known_hosts"),
        ssh_config=str(workdir / "ssh_config"),
    )
    known_lines: list[str] = []
    config_lines: list[str] = []
    try:
        for index in range(count + without_pyspy):
            has_pyspy = index < count
            port = free_port()
            ru_file = workdir / f"ru-{index}.txt"
            path = f"{bin_with}:{pyspy_dir}" if has_pyspy else str(bin_without)
            path += ":/usr/local/bin:/usr/bin:/bin"
            config = workdir / f"sshd_config-{index}"
            config.write_text(
                "\n".join(
                    [
                        f"Port {port}",
                        "ListenAddress 127.0.0.1",
                        f"HostKey {host_key}",
                        f"PidFile {workdir / f'sshd-{index}.pid'}",
                        f"AuthorizedKeysFile {authorized}",
                        "UsePAM no",
                        "StrictModes no",
                        "PermitRootLogin yes",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "PubkeyAuthentication yes",
                        "MaxStartups 200",
                        "MaxSessions 64",
                        # HOME: a clean one, so the remote shell does not run this machine's
                        # ~/.bashrc (pyenv init costs ~0.3 s per command and puts shims first).
                        f"SetEnv PATH={path} HOME={home} HD_BENCH_RU={ru_file}",
                        "LogLevel ERROR",
                        "",
                    ]
                )
            )
            log = open(workdir / f"sshd-{index}.log", "wb")  # noqa: SIM115 - closed below
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log.close()
            alias = f"{ALIAS_PREFIX}{index}"
            pool.hosts.append(SshHost(index, alias, port, user, proc, str(ru_file), has_pyspy))
            known_lines.append(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}")
            config_lines += [
                f"Host {alias}",
                "    HostName 127.0.0.1",
                f"    Port {port}",
                f"    User {user}",
                f"    IdentityFile {user_key}",
                "    IdentitiesOnly yes",
                f"    UserKnownHostsFile {pool.known_hosts}",
                "",
            ]
        for host in pool.hosts:
            _wait_for_banner(host.port, host.proc, timeout_s=15.0)
    except Exception:
        pool.stop()
        raise
    Path(pool.known_hosts).write_text("\n".join(known_lines) + "\n")
    Path(pool.ssh_config).write_text("\n".join(config_lines))
    return pool


def stop_sshd(proc: subprocess.Popen) -> None:
    """Stop one listener we started (by its own pid); sessions end with their connections."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def children_cpu_s(pid: int) -> float:
    """CPU seconds of the reaped descendants of ``pid`` (cutime + cstime in /proc/PID/stat).

    For an sshd listener this is everything its connections cost once they have ended: the
    per-connection sshd processes (key exchange, encryption), the shells, the probe's Python
    and its py-spy children.
    """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[13]) + int(fields[14])) / ticks  # fields 16 and 17 of stat(5)


def read_remote_runs(ru_file: str) -> list[tuple[float, float, float, int]]:
    """(wall s, user s, sys s, peak RSS KiB) of each remote python run logged so far; clears it."""
    try:
        text = Path(ru_file).read_text()
    except OSError:
        return []
    Path(ru_file).write_text("")
    runs = []
    for line in text.splitlines():
        parts = line.split()
        # /usr/bin/time also writes "Command exited with non-zero status N" lines
        if len(parts) == 4:
            try:
                runs.append((float(parts[0]), float(parts[1]), float(parts[2]), int(parts[3])))
            except ValueError:
                continue
    return runs
