"""Loopback OpenSSH servers for the benchmark: one ``sshd -D`` per simulated host.

Shares tests/sshd_tools.py with the SSH tests (same sshd_config, same readiness check), with three changes
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
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo: tests/sshd_tools.py
from tests.sshd_tools import (  # noqa: E402
    SSHD,
    free_port,
    keygen,
    sshd_config,
    start_sshd_process,
    stop_sshd,
    wait_for_banner,
)

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
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = workdir / "ssh_host_ed25519_key"
    user_key = workdir / "id_ed25519"
    keygen(host_key, "hangdoctor-bench-host")
    keygen(user_key, "hangdoctor-bench-user")
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
                sshd_config(
                    port, host_key, workdir / f"sshd-{index}.pid", authorized,
                    # HOME: a clean one, so the remote shell does not run this machine's
                    # ~/.bashrc (pyenv init costs ~0.3 s per command and puts shims first).
                    f"SetEnv PATH={path} HOME={home} HD_BENCH_RU={ru_file}",
                )
            )
            proc = start_sshd_process(config, workdir / f"sshd-{index}.log")
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
            wait_for_banner(host.port, host.proc, timeout_s=15.0)
    except Exception:
        pool.stop()
        raise
    Path(pool.known_hosts).write_text("\n".join(known_lines) + "\n")
    Path(pool.ssh_config).write_text("\n".join(config_lines))
    return pool


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
