"""Plumbing shared by the scenario programs: options, lifetime, ready file, worker start.

Every scenario is a launcher process that starts its workers as ``python -m`` of the same
module with ``--worker --rank R``, so each worker's command line shows its rank the way real
inference servers' workers do. The launcher and every worker end on their own:

* ``signal.alarm(max_lifetime)``: SIGALRM's default action ends the process even while it is
  blocked in a system call, and it needs no extra thread that would show up in py-spy dumps;
* workers set ``PR_SET_PDEATHSIG`` = SIGKILL, so a killed launcher takes them along;
* the pipes the workers wait on are written by the launcher only, so its death also turns
  their wait into EOF.

Layer: scenarios; may import: the standard library, torch and hangdoctor.scenarios (each runs as
its own program).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any

DEFAULT_MAX_LIFETIME_S = 900.0
_PR_SET_PDEATHSIG = 1
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value


def allow_any_tracer() -> None:
    """Let py-spy read this demo process under Yama ptrace_scope=1 (Ubuntu's default), where
    only ancestors may trace: `hangdoctor demo` run by a normal user starts py-spy as a sibling
    of the demo server, not as its ancestor. A real server is never changed; this is ours."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Add the options every scenario accepts (launcher and worker alike)."""
    parser.add_argument("--ready-file", default=None, help="JSON written once the state is reached")
    parser.add_argument("--log", default=None, help="server log to write (appended)")
    parser.add_argument(
        "--max-lifetime",
        type=float,
        default=DEFAULT_MAX_LIFETIME_S,
        help="seconds after which every process of the scenario exits on its own",
    )
    # Worker-only plumbing, set by the launcher.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--launcher-pid", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--status-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--wait-fd", type=int, default=None, help=argparse.SUPPRESS)


def become_launcher(max_lifetime_s: float) -> None:
    """Start a new session (so the whole scenario can be killed as one group) and arm the alarm."""
    # Already a session leader (e.g. started with start_new_session=True) raises EPERM: fine.
    with contextlib.suppress(OSError):
        os.setsid()
    arm_lifetime(max_lifetime_s)
    allow_any_tracer()


def arm_lifetime(max_lifetime_s: float) -> None:
    """End this process with SIGALRM after ``max_lifetime_s`` (rounded up to whole seconds)."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(max_lifetime_s + 0.999)))


def become_worker(launcher_pid: int | None, max_lifetime_s: float) -> None:
    """Die with the launcher (PR_SET_PDEATHSIG) and after ``max_lifetime_s`` at the latest."""
    arm_lifetime(max_lifetime_s)
    allow_any_tracer()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # The launcher may have died before prctl took effect: then nobody would signal us.
    if launcher_pid is not None and os.getppid() != launcher_pid:
        os._exit(1)


def write_ready_file(path: str | None, info: dict[str, Any]) -> None:
    """Write ``info`` as JSON to ``path`` atomically (temp file + rename)."""
    if not path:
        return
    tmp_path = f"{path}.tmp.{os.getpid()}"
    with open(tmp_path, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp_path, path)


class LogWriter:
    """Append whole lines to the scenario's log (one write per line, so workers interleave)."""

    def __init__(self, path: str | None) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None

    def line(self, text: str) -> None:
        """Append ``text`` plus a newline; a no-op without a log."""
        if self._fd is not None:
            os.write(self._fd, (text.rstrip("\n") + "\n").encode("utf-8", "replace"))


def log_time() -> str:
    """Timestamp in vLLM's log style (``11-29 19:30:05``)."""
    return time.strftime("%m-%d %H:%M:%S")


def _package_root() -> str:
    """Directory that holds the ``hangdoctor`` package (so workers can import it too)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker_env(rank: int, world_size: int, master_port: int) -> dict[str, str]:
    """Environment of a worker: torch.distributed's variables plus a PYTHONPATH that finds us."""
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(master_port),
    )
    root = _package_root()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


def start_worker(
    module: str,
    rank: int,
    world_size: int,
    master_port: int,
    args: list[str],
    pass_fds: tuple[int, ...],
) -> subprocess.Popen[bytes]:
    """Start ``python -m module --worker --rank R ARGS`` with ``pass_fds`` inherited."""
    argv = [
        sys.executable,
        "-m",
        module,
        "--worker",
        "--rank",
        str(rank),
        "--launcher-pid",
        str(os.getpid()),
        *args,
    ]
    # No start_new_session: workers stay in the launcher's process group, so one killpg ends all.
    return subprocess.Popen(
        argv,
        env=worker_env(rank, world_size, master_port),
        pass_fds=pass_fds,
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )


def collect_status(
    conns: list[Connection], expected: str, count: int, timeout_s: float
) -> list[Any]:
    """Read messages from ``conns`` until ``count`` of them equal/start with ``expected``.

    Raises TimeoutError when they do not arrive in ``timeout_s`` and RuntimeError when a worker
    closes its status pipe first (it died before reaching its state).
    """
    deadline = time.monotonic() + timeout_s
    got: list[Any] = []
    open_conns = list(conns)
    while len(got) < count:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise TimeoutError(f"only {len(got)} of {count} workers reported {expected!r}")
        for conn in wait(open_conns, timeout=remaining_s):
            try:
                msg = conn.recv()  # type: ignore[union-attr]
            except EOFError:
                open_conns.remove(conn)  # type: ignore[arg-type]
                if not open_conns and len(got) < count:
                    raise RuntimeError(
                        f"workers exited before reporting {expected!r} ({len(got)} of {count})"
                    ) from None
                continue
            if isinstance(msg, dict) and msg.get("status") == expected:
                got.append(msg)
    return got


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exited_without_reaping(pid: int) -> bool:
    """True if child ``pid`` has exited; it stays a zombie (WNOWAIT) so it can be seen as one."""
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return result is not None
