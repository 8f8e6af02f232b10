"""Scenario "collective desync" with real torch.distributed (gloo backend, CPU).

Two ranks join a gloo process group and complete one all_reduce together; then rank 0 enters
``dist.all_reduce`` while rank 1 enters ``dist.barrier``. Neither returns: both block in
``torch/distributed/distributed_c10d.py`` (state S, wchan futex), the shape of an NCCL desync
without a GPU. Needs torch (imported only in the workers, so this module imports without it).

Run: ``python3 -m hangdoctor.scenarios.gloo_desync --log /tmp/x.log
--ready-file /tmp/ready.json``.

With ``--fr-dump PREFIX`` the ranks keep PyTorch's Flight Recorder (``TORCH_FR_BUFFER_SIZE``) and,
once inside the mismatched collective, each writes its dump to ``PREFIX<rank>`` as NCCL's
watchdog does on a timeout with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` (gloo has no such watchdog):
real Flight Recorder records of real ranks, ``TORCH_FR_DUMP_TEMP_FILE`` set in their environment.

Layer: scenarios; may import: the standard library, torch and hangdoctor.scenarios (each runs as
its own program).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from hangdoctor.scenarios._plumbing import (
    LogWriter,
    add_common_args,
    become_launcher,
    become_worker,
    collect_status,
    find_free_port,
    start_worker,
    write_ready_file,
)

MODULE = "hangdoctor.scenarios.gloo_desync"
WORLD_SIZE = 2
# Importing torch and joining the group take a few seconds on a 2-core machine.
READY_TIMEOUT_S = 120.0


def build_parser() -> argparse.ArgumentParser:
    """Options of the launcher and its ranks."""
    p = argparse.ArgumentParser(prog=f"python3 -m {MODULE}", description=__doc__.split("\n")[0])
    add_common_args(p)
    p.add_argument("--master-port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--api-key", default=None, help="accepted and ignored (redaction tests)")
    p.add_argument("--fr-dump", default=None, metavar="PREFIX",
                   help="keep the Flight Recorder and write each rank's dump to PREFIX<rank>")
    return p


def run_worker(args: argparse.Namespace) -> int:
    """Join the group, do one good all_reduce, then enter a mismatched collective."""
    become_worker(args.launcher_pid, args.max_lifetime)
    import torch  # lazily: the module must import without torch
    import torch.distributed as dist

    rank = int(args.rank)
    log = LogWriter(args.log)
    status = Connection(args.status_fd, readable=False)
    dist.init_process_group(
        "gloo",
        rank=rank,
        world_size=WORLD_SIZE,
        init_method=f"tcp://127.0.0.1:{args.master_port}",
        # The collective gives up only when the scenario would end anyway.
        timeout=timedelta(seconds=args.max_lifetime),
    )
    log.line(f"[rank{rank}] INFO process group ready: backend=gloo world_size={WORLD_SIZE}")
    t = torch.ones(16)
    dist.all_reduce(t)  # both ranks agree once: the group works
    log.line(f"[rank{rank}] INFO step 1: all_reduce done (sum={float(t[0]):.0f})")
    op = "all_reduce" if rank == 0 else "barrier"
    log.line(f"[rank{rank}] INFO step 2: entering {op}")
    if args.fr_dump:
        _dump_flight_recorder_soon(args.fr_dump + str(rank))
    status.send({"status": "reached", "rank": rank, "pid": os.getpid(), "state": op})
    if rank == 0:
        dist.all_reduce(t)
    else:
        dist.barrier()
    log.line(f"[rank{rank}] ERROR {op} returned; the desync did not hold")
    return 1


def _dump_flight_recorder_soon(path: str, delay_s: float = 0.5) -> None:
    """Write this rank's Flight Recorder to ``path`` once it is inside its collective."""
    import threading

    def dump() -> None:
        time.sleep(delay_s)
        from torch._C._distributed_c10d import _dump_fr_trace

        data = _dump_fr_trace(True, True, False)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    threading.Thread(target=dump, name="fr-dump", daemon=True).start()


def run_launcher(args: argparse.Namespace) -> int:
    """Start both ranks, write the ready file once both are about to block, wait on them."""
    become_launcher(args.max_lifetime)
    log = LogWriter(args.log)
    master_port = args.master_port or find_free_port()
    if args.fr_dump:
        # inherited by the ranks: what a job that wants Flight Recorder dumps sets at launch
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
        os.environ["TORCH_FR_DUMP_TEMP_FILE"] = args.fr_dump
    log.line(f"INFO launching {WORLD_SIZE} ranks (gloo, tcp://127.0.0.1:{master_port})")
    status_readers: list[Connection] = []
    procs = []
    for rank in range(WORLD_SIZE):
        status_r, status_w = Pipe(duplex=False)
        worker_args = [
            "--master-port",
            str(master_port),
            "--max-lifetime",
            str(args.max_lifetime),
            "--status-fd",
            str(status_w.fileno()),
        ]
        if args.log:
            worker_args += ["--log", args.log]
        if args.fr_dump:
            worker_args += ["--fr-dump", args.fr_dump]
        procs.append(
            start_worker(MODULE, rank, WORLD_SIZE, master_port, worker_args, (status_w.fileno(),))
        )
        status_w.close()
        status_readers.append(status_r)
    try:
        collect_status(status_readers, "reached", WORLD_SIZE, timeout_s=READY_TIMEOUT_S)
    except (TimeoutError, RuntimeError) as e:
        print(f"gloo_desync: ranks did not reach their collectives: {e}", file=sys.stderr)
        return 1
    # "reached" is sent just before the collective call: let both get inside it.
    time.sleep(0.5)
    if args.fr_dump:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and not all(
                os.path.exists(args.fr_dump + str(r)) for r in range(WORLD_SIZE)):
            time.sleep(0.1)
    write_ready_file(
        args.ready_file,
        {
            "scenario": "gloo_desync",
            "launcher_pid": os.getpid(),
            "worker_pids": [p.pid for p in procs],
            "ranks": {str(p.pid): rank for rank, p in enumerate(procs)},
            "collectives": {"0": "all_reduce", "1": "barrier"},
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
    """Entry point: launcher by default, rank with ``--worker --rank R``."""
    args = build_parser().parse_args(argv)
    return run_worker(args) if args.worker else run_launcher(args)


if __name__ == "__main__":
    sys.exit(main())
