"""Scenario "post-load deadlock" (and, with ``--die-rank``, "dead rank").

A launcher that looks like an inference server launcher starts ``--tensor-parallel-size`` /
``--workers`` worker processes. Each worker logs vLLM-style shard loading progress, holds its
"weights" resident in memory, then waits forever on a multiprocessing pipe that nobody writes.
The launcher waits on a startup handshake pipe that never comes. No port is opened.

With ``--die-rank R`` that worker logs an error and exits with code 1 after loading; the launcher
does not reap it (it stays a zombie) and the others keep waiting.

Run: ``python3 -m hangdoctor.scenarios.postload --tensor-parallel-size 4 --log /tmp/x.log
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
    exited_without_reaping,
    find_free_port,
    log_time,
    start_worker,
    write_ready_file,
)

MODULE = "hangdoctor.scenarios.postload"
NUM_SHARDS = 4
PAGE_BYTES = 4096


def build_parser() -> argparse.ArgumentParser:
    """Options of the launcher and its workers."""
    p = argparse.ArgumentParser(prog=f"python3 -m {MODULE}", description=__doc__.split("\n")[0])
    add_common_args(p)
    p.add_argument("--workers", "--tensor-parallel-size", dest="workers", type=int, default=4)
    p.add_argument("--die-rank", type=int, default=None, help="this rank exits after loading")
    p.add_argument("--weights-mib", type=int, default=64, help="resident 'weights' per worker")
    p.add_argument("--model", default="demo-org/tiny-llama-1b")
    p.add_argument("--api-key", default=None, help="accepted and ignored (redaction tests)")
    return p


def _load_weights(size_mib: int) -> bytearray:
    """Allocate ``size_mib`` and touch every page so the memory is resident (RSS), not reserved."""
    weights = bytearray(size_mib * 1024 * 1024)
    for offset in range(0, len(weights), PAGE_BYTES):
        weights[offset] = 1
    return weights


def run_worker(args: argparse.Namespace) -> int:
    """Load, report to the launcher, then wait forever on a pipe (or die, for --die-rank)."""
    become_worker(args.launcher_pid, args.max_lifetime)
    rank = int(args.rank)
    pid = os.getpid()
    status = Connection(args.status_fd, readable=False)
    handshake = Connection(args.wait_fd, writable=False)
    log = LogWriter(args.log)
    prefix = f"(VllmWorker rank={rank} pid={pid})"
    log.line(
        f"{prefix} INFO {log_time()} [parallel_state.py:1064] rank {rank} in world size "
        f"{args.workers} is assigned as DP rank 0, PP rank 0, TP rank {rank}, EP rank {rank}"
    )
    started = time.monotonic()
    weights = []
    if rank == 0:
        log.line("Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]")
    for shard in range(1, NUM_SHARDS + 1):
        weights.append(_load_weights(max(1, args.weights_mib // NUM_SHARDS)))
        if rank == 0:
            elapsed_s = time.monotonic() - started
            rate = shard / max(elapsed_s, 1e-3)
            log.line(
                f"Loading safetensors checkpoint shards: {100 * shard // NUM_SHARDS:3d}% "
                f"Completed | {shard}/{NUM_SHARDS} [00:00<00:00, {rate:.2f}it/s]"
            )
    took_s = time.monotonic() - started
    log.line(
        f"{prefix} INFO {log_time()} [default_loader.py:262] Loading weights took {took_s:.2f} seconds"
    )
    gib = sum(len(w) for w in weights) / 2**30
    log.line(
        f"{prefix} INFO {log_time()} [gpu_model_runner.py:1892] Model loading took {gib:.4f} GiB "
        f"and {took_s + 0.05:.2f} seconds"
    )
    if rank == args.die_rank:
        log.line(
            f"{prefix} ERROR {log_time()} [multiproc_executor.py:527] WorkerProc hit an exception."
        )
        log.line(
            f"{prefix} ERROR {log_time()} [multiproc_executor.py:527] Traceback (most recent call last):"
        )
        log.line(
            f"{prefix} ERROR {log_time()} [multiproc_executor.py:527] RuntimeError: "
            f"worker rank {rank} failed after loading weights"
        )
        status.send({"status": "reached", "rank": rank, "pid": pid, "state": "exiting"})
        return 1
    status.send({"status": "reached", "rank": rank, "pid": pid, "state": "waiting"})
    try:
        # Nobody ever writes this pipe: the post-load deadlock. EOF means the launcher is gone.
        handshake.recv()
    except EOFError:
        return 0
    return 0


def run_launcher(args: argparse.Namespace) -> int:
    """Start the workers, wait until all of them are in their final state, write the ready file."""
    become_launcher(args.max_lifetime)
    log = LogWriter(args.log)
    log.line(f"INFO {log_time()} [api_server.py:1395] vLLM API server version 0.9.2-demo")
    log.line(
        f"INFO {log_time()} [config.py:1604] Using max model len 4096; model={args.model!r} "
        f"tensor_parallel_size={args.workers}"
    )
    log.line(
        f"INFO {log_time()} [multiproc_executor.py:135] Starting {args.workers} workers "
        f"(multiproc executor)"
    )
    master_port = find_free_port()
    status_readers: list[Connection] = []
    wait_writers: list[Connection] = []
    procs = []
    for rank in range(args.workers):
        status_r, status_w = Pipe(duplex=False)
        wait_r, wait_w = Pipe(duplex=False)
        worker_args = [
            "--tensor-parallel-size",
            str(args.workers),
            "--max-lifetime",
            str(args.max_lifetime),
            "--weights-mib",
            str(args.weights_mib),
            "--status-fd",
            str(status_w.fileno()),
            "--wait-fd",
            str(wait_r.fileno()),
        ]
        if args.log:
            worker_args += ["--log", args.log]
        if args.die_rank is not None:
            worker_args += ["--die-rank", str(args.die_rank)]
        procs.append(
            start_worker(
                MODULE,
                rank,
                args.workers,
                master_port,
                worker_args,
                (status_w.fileno(), wait_r.fileno()),
            )
        )
        # Only the worker may hold these ends, so its exit shows up as EOF here.
        status_w.close()
        wait_r.close()
        status_readers.append(status_r)
        wait_writers.append(wait_w)

    try:
        collect_status(status_readers, "reached", args.workers, timeout_s=60.0)
    except (TimeoutError, RuntimeError) as e:
        print(f"postload: workers did not reach their state: {e}", file=sys.stderr)
        return 1
    dead_pids = []
    if args.die_rank is not None and 0 <= args.die_rank < args.workers:
        dying = procs[args.die_rank]
        deadline = time.monotonic() + 20.0
        while not exited_without_reaping(dying.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        dead_pids.append(dying.pid)
    # "reached" is sent right before recv(): give the workers a moment to be inside it.
    time.sleep(0.5)
    log.line(
        f"INFO {log_time()} [core_client.py:412] Waiting for READY from {args.workers} workers "
        "(startup handshake)"
    )
    write_ready_file(
        args.ready_file,
        {
            "scenario": "postload",
            "launcher_pid": os.getpid(),
            "worker_pids": [p.pid for p in procs],
            "ranks": {str(p.pid): rank for rank, p in enumerate(procs)},
            "die_rank": args.die_rank,
            "dead_pids": dead_pids,
            "log": os.path.abspath(args.log) if args.log else None,
            "port": None,
            "master_port": master_port,
            "max_lifetime_s": args.max_lifetime,
        },
    )
    # The launcher's half of the deadlock: a handshake that nobody sends. It holds the writing
    # end itself, so this never sees EOF; SIGALRM (max lifetime) ends it.
    handshake_r, handshake_w = Pipe(duplex=False)
    try:
        handshake_r.recv()
    except EOFError:
        pass
    del handshake_w, wait_writers, procs
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: launcher by default, worker with ``--worker``."""
    args = build_parser().parse_args(argv)
    return run_worker(args) if args.worker else run_launcher(args)


if __name__ == "__main__":
    sys.exit(main())
