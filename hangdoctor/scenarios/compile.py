"""Scenario "compile in progress" (not a hang).

``--workers`` compile worker processes burn CPU in pure-Python loops (niced, about one core
each) and keep appending torch.compile / inductor / Triton style progress lines to the log every
~0.3 s. Nothing is deadlocked: CPU time and the log grow, which is what tells a long compile from
a hang.

Run: ``python3 -m hangdoctor.scenarios.compile --workers 2 --log /tmp/x.log
--ready-file /tmp/ready.json``.

Layer: scenarios; may import: the standard library, torch and hangdoctor.scenarios (each runs as
its own program).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from hangdoctor.scenarios._plumbing import (
    LogWriter,
    add_common_args,
    become_launcher,
    become_worker,
    collect_status,
    find_free_port,
    log_time,
    start_worker,
    write_ready_file,
)

MODULE = "hangdoctor.scenarios.compile"
TOTAL_GRAPHS = 80
LINE_INTERVAL_S = 0.3
NICE_INCREMENT = 10


def build_parser() -> argparse.ArgumentParser:
    """Options of the launcher and its compile workers."""
    p = argparse.ArgumentParser(prog=f"python3 -m {MODULE}", description=__doc__.split("\n")[0])
    add_common_args(p)
    p.add_argument("--workers", dest="workers", type=int, default=2)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--role", default="compile_worker", help="shown in the workers' command line")
    return p


def _lower_fx_graph(seconds: float) -> int:
    """Burn CPU for ``seconds`` the way code generation does: a tight pure-Python loop."""
    x = 1
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(5000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def _progress_line(rank: int, step: int) -> str:
    """One inductor / Triton progress line; the kind cycles with ``step``."""
    graph = step % TOTAL_GRAPHS + 1
    prefix = f"[rank{rank}]:I{log_time()} {os.getpid()}"
    kind = step % 3
    if kind == 0:
        return (
            f"{prefix} torch/_inductor/compile_fx.py:835] [0/0] torch._inductor: "
            f"Compiling FX graph {graph}/{TOTAL_GRAPHS}"
        )
    if kind == 1:
        return (
            f"{prefix} torch/_inductor/select_algorithm.py:1840] Triton autotuning for kernel "
            f"triton_mm_{graph} with 12 configs (BLOCK_M=64, BLOCK_N=128, num_warps=4)"
        )
    return (
        f"INFO {log_time()} [backends.py:215] Compiling a graph for dynamic shape takes "
        f"{12.31 + 0.37 * graph:.2f} s"
    )


def run_worker(args: argparse.Namespace) -> int:
    """Compile forever: burn CPU, log a progress line every ~0.3 s."""
    become_worker(args.launcher_pid, args.max_lifetime)
    # Be polite to whatever else runs on the machine (CI has two cores).
    os.nice(NICE_INCREMENT)
    status = Connection(args.status_fd, readable=False)
    log = LogWriter(args.log)
    rank = int(args.rank)
    log.line(_progress_line(rank, 0))
    status.send({"status": "reached", "rank": rank, "pid": os.getpid(), "state": "compiling"})
    status.close()
    step = 1
    while True:
        _lower_fx_graph(LINE_INTERVAL_S)
        log.line(_progress_line(rank, step))
        step += 1


def run_launcher(args: argparse.Namespace) -> int:
    """Start the compile workers, write the ready file once each logged, wait on them."""
    become_launcher(args.max_lifetime)
    log = LogWriter(args.log)
    log.line(
        f"INFO {log_time()} [backends.py:541] Compiling model with torch.compile "
        f"(backend={args.backend}, workers={args.workers}); this may take a while"
    )
    master_port = find_free_port()
    status_readers: list[Connection] = []
    procs = []
    for rank in range(args.workers):
        status_r, status_w = Pipe(duplex=False)
        worker_args = [
            "--role",
            args.role,
            "--backend",
            args.backend,
            "--max-lifetime",
            str(args.max_lifetime),
            "--status-fd",
            str(status_w.fileno()),
        ]
        if args.log:
            worker_args += ["--log", args.log]
        procs.append(
            start_worker(MODULE, rank, args.workers, master_port, worker_args, (status_w.fileno(),))
        )
        status_w.close()
        status_readers.append(status_r)
    try:
        collect_status(status_readers, "reached", args.workers, timeout_s=60.0)
    except (TimeoutError, RuntimeError) as e:
        print(f"compile: workers did not start: {e}", file=sys.stderr)
        return 1
    write_ready_file(
        args.ready_file,
        {
            "scenario": "compile",
            "launcher_pid": os.getpid(),
            "worker_pids": [p.pid for p in procs],
            "ranks": {str(p.pid): rank for rank, p in enumerate(procs)},
            "log": os.path.abspath(args.log) if args.log else None,
            "port": None,
            "master_port": master_port,
            "max_lifetime_s": args.max_lifetime,
        },
    )
    for proc in procs:
        proc.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: launcher by default, compile worker with ``--worker``."""
    args = build_parser().parse_args(argv)
    return run_worker(args) if args.worker else run_launcher(args)


if __name__ == "__main__":
    sys.exit(main())
