#!/usr/bin/env python3
"""GPU hang scenarios for the 2-GPU machine: two NCCL ranks with ~20 GiB of "weights" each.

    python3 tests/gpu/scenarios.py NAME --ready-file F --log L [--max-lifetime 240]

A launcher starts two rank processes (``--worker --rank R``, the same script), each loads
"weights" onto its own GPU while writing vLLM-like lines to the log, then hangs the way NAME
says. The launcher writes the ready file (same shape as the CPU scenarios:
``launcher_pid``, ``worker_pids``, ``log``, ``port`` and a few extras) once every rank reached its
state. Every process ends by itself after ``--max-lifetime`` seconds (SIGALRM's default action
ends a process even inside a CUDA synchronize); workers also die with the launcher
(PR_SET_PDEATHSIG). The launcher leads its own session: ``kill -- -LAUNCHER_PID`` ends all.

torch is imported by the ranks only, so ``--help`` works without it. NVLS/multicast are switched
off in the ranks' environment (required on the H200 machine).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection, wait
from typing import Any, Dict, List, Optional

SCENARIOS = {
    "peer-never-joins": "rank 0 in all_reduce + synchronize; rank 1 parked in Event.wait",
    "rank-exits": "rank 1 exits after loading; rank 0 enters all_reduce + synchronize",
    "pipe-deadlock": "weights loaded, both ranks wait on a pipe recv (post-load deadlock)",
    "init-never-joins": "rank 0 in init_process_group; rank 1 never calls it",
    "kernel-spin": "rank 0 synchronizes on a ~90 s spinning kernel (CPU group only, no NCCL); rank 1 parked in Event.wait",
    "healthy-busy": "both ranks loop matmul + all_reduce; the launcher answers /health with 200",
}
WORLD_SIZE = 2
DEFAULT_MAX_LIFETIME_S = 240.0
READY_TIMEOUT_S = 180.0  # torch import + CUDA context + NCCL init + 20 GiB fill
SPIN_S = 90.0
SPIN_MAX_CYCLES = 400_000_000_000  # hard cap: ~200 s even at 2 GHz
NO_NVLS_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
_PR_SET_PDEATHSIG = 1


def build_parser() -> argparse.ArgumentParser:
    """Options of the launcher (and, with --worker, of a rank)."""
    p = argparse.ArgumentParser(
        prog="python3 tests/gpu/scenarios.py",
        description="Two NCCL ranks on two GPUs that hang in a chosen way.",
        epilog="scenarios:\n" + "\n".join(f"  {k:18} {v}" for k, v in SCENARIOS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", choices=sorted(SCENARIOS), metavar="NAME", help="scenario (below)")
    p.add_argument("--ready-file", default=None, help="JSON written once the hang is reached")
    p.add_argument("--log", default=None, help="server log (appended; ranks' stderr goes there)")
    p.add_argument("--max-lifetime", type=float, default=DEFAULT_MAX_LIFETIME_S)
    p.add_argument("--weights-gib", type=float, default=20.0, help="GiB allocated per rank")
    p.add_argument("--port", type=int, default=0, help="healthy-busy HTTP port (0: a free one)")
    p.add_argument("--spin-s", type=float, default=SPIN_S, help="kernel-spin duration")
    p.add_argument("--nccl-debug", default=None, help="NCCL_DEBUG for the ranks (e.g. INFO)")
    # rank plumbing, set by the launcher
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--launcher-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--master-port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--status-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--wait-fd", type=int, default=None, help=argparse.SUPPRESS)
    return p


# ---- shared plumbing -------------------------------------------------------------------------


def arm_lifetime(max_lifetime_s: float) -> None:
    """End this process with SIGALRM's default action after ``max_lifetime_s``."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(max_lifetime_s + 0.999)))


class Log:
    """Append whole lines to the log, one write(2) per line so ranks interleave cleanly."""

    def __init__(self, path: Optional[str], prefix: str = "") -> None:
        self.prefix = prefix
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None

    def line(self, level: str, where: str, text: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        msg = f"{self.prefix}{level} {stamp} [{where}] {text}\n"
        if self._fd is not None:
            os.write(self._fd, msg.encode("utf-8", "replace"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_ready_file(path: Optional[str], info: Dict[str, Any]) -> None:
    if not path:
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def park() -> None:
    """Wait forever in Python (threading.Event.wait): the lifetime alarm ends the process."""
    threading.Event().wait()


# ---- ranks -----------------------------------------------------------------------------------


def become_worker(args: argparse.Namespace) -> None:
    arm_lifetime(args.max_lifetime)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if args.launcher_pid is not None and os.getppid() != args.launcher_pid:
        os._exit(1)  # the launcher died before prctl took effect


def load_weights(torch: Any, rank: int, gib: float, log: Log) -> Any:
    """Allocate and fill ``gib`` GiB on this rank's GPU in shards, logging like vLLM does."""
    device = torch.device("cuda", rank)
    shards = 4
    per_shard = int(gib * (1 << 30)) // shards // 2  # fp16 elements
    log.line(
        "INFO", "gpu_model_runner.py:1595", "Starting to load model meta-llama/Llama-3.1-70B..."
    )
    t0 = time.monotonic()
    weights = []
    for i in range(shards):
        w = torch.empty(per_shard, dtype=torch.float16, device=device)
        w.fill_(0.01 * (i + 1))
        torch.cuda.synchronize(device)
        weights.append(w)
        pct = (i + 1) * 100 // shards
        elapsed = time.monotonic() - t0
        log.line(
            "INFO",
            "weight_utils.py:459",
            f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i + 1}/{shards} "
            f"[00:{int(elapsed):02d}<00:00, {elapsed / (i + 1):.2f}s/it]",
        )
    took = time.monotonic() - t0
    log.line("INFO", "default_loader.py:267", f"Loading weights took {took:.2f} seconds")
    log.line(
        "INFO",
        "gpu_model_runner.py:1624",
        f"Model loading took {gib:.4f} GiB and {took:.6f} seconds",
    )
    return weights


def init_group(torch: Any, dist: Any, args: argparse.Namespace, log: Log, backend: str = "nccl") -> None:
    """Join the group (NCCL eagerly, with device_id) and agree once so the communicator works.

    ``backend="gloo"``: a CPU-only group, so the rank has no NCCL communicator at all (a
    single-GPU server, or a job whose spinning kernel is not a collective)."""
    rank = args.rank
    if backend == "gloo":
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{args.master_port}",
            rank=rank,
            world_size=WORLD_SIZE,
            timeout=timedelta(seconds=args.max_lifetime + 120),
        )
        dist.all_reduce(torch.ones(16))
        log.line("INFO", "parallel_state.py:1064", f"rank {rank}: CPU group (gloo), no NCCL")
        return
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{args.master_port}",
        rank=rank,
        world_size=WORLD_SIZE,
        # never time out before the scenario ends by itself
        timeout=timedelta(seconds=args.max_lifetime + 120),
        device_id=torch.device("cuda", rank),
    )
    t = torch.ones(1024, device=torch.device("cuda", rank))
    dist.all_reduce(t)
    torch.cuda.synchronize()
    log.line(
        "INFO",
        "parallel_state.py:1064",
        f"rank {rank} in world size {WORLD_SIZE} is assigned as "
        f"DP rank 0, PP rank 0, TP rank {rank}",
    )
    log.line("INFO", "pynccl.py:70", f"vLLM is using nccl=={_nccl_version(torch)}")


def _nccl_version(torch: Any) -> str:
    with contextlib.suppress(Exception):
        v = torch.cuda.nccl.version()
        return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    return "unknown"


def spin_cycles(torch: Any, spin_s: float) -> int:
    """GPU clock cycles for a ``spin_s`` spin, measured on this GPU rather than assumed."""
    calib = 200_000_000
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(calib)
    end.record()
    end.synchronize()
    rate = calib / max(start.elapsed_time(end) / 1000.0, 1e-3)  # cycles per second
    return int(min(rate * spin_s, SPIN_MAX_CYCLES))


def run_worker(args: argparse.Namespace) -> int:
    become_worker(args)
    rank = args.rank
    log = Log(args.log, prefix=f"(VllmWorker TP{rank} pid={os.getpid()}) ")
    status = Connection(args.status_fd, readable=False)

    def reached(state: str, **extra: Any) -> None:
        status.send(
            {"status": "reached", "rank": rank, "pid": os.getpid(), "state": state, **extra}
        )

    import torch  # lazily: --help and the launcher work without torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    name = args.name
    if name == "init-never-joins":
        # vLLM joins the group before loading: only the CUDA context is on the GPU
        torch.ones(1, device="cuda")
        log.line("INFO", "parallel_state.py:1010", f"world_size=2 rank={rank} backend=nccl")
        if rank == 0:
            reached("init_process_group")
            dist.init_process_group(
                "nccl",
                init_method=f"tcp://127.0.0.1:{args.master_port}",
                rank=rank,
                world_size=WORLD_SIZE,
                timeout=timedelta(seconds=args.max_lifetime + 120),
            )
            log.line("ERROR", "parallel_state.py:1020", "init_process_group returned: no hang")
            return 1
        reached("parked")
        park()

    if name == "pipe-deadlock":
        init_group(torch, dist, args, log)
        weights = load_weights(torch, rank, args.weights_gib, log)
        wait_conn = Connection(args.wait_fd, writable=False)
        reached("pipe-recv")
        wait_conn.recv()  # the launcher never writes: Connection._recv, anon_pipe_read
        del weights
        return 1

    init_group(torch, dist, args, log, backend="gloo" if name == "kernel-spin" else "nccl")
    weights = load_weights(torch, rank, args.weights_gib, log)
    dev = torch.device("cuda", rank)

    if name == "healthy-busy":
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
        step, t_last = 0, time.monotonic()
        while True:
            c = a @ a
            dist.all_reduce(c)
            step += 1
            if step % 20 == 0:
                torch.cuda.synchronize()  # keep the queue short: the loop stays in step
            if step == 20:
                reached("compute-loop")
            if rank == 0 and time.monotonic() - t_last > 5.0:
                t_last = time.monotonic()
                log.line(
                    "INFO",
                    "loggers.py:123",
                    "Engine 000: Avg prompt throughput: 812.3 tokens/s, Avg generation throughput:"
                    " 1456.7 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.1%",
                )

    if name == "peer-never-joins" or name == "rank-exits":
        if rank == 1:
            if name == "rank-exits":
                reached("exiting")
                status.close()
                os._exit(0)  # gone without a word, like a rank killed from outside
            reached("parked")
            park()
        t = torch.ones(1 << 20, device=dev)
        time.sleep(1.0)  # let rank 1 go first (exit or park): the collective never completes
        reached("all_reduce")
        dist.all_reduce(t)  # returns at once; the NCCL kernel spins on the GPU
        torch.cuda.synchronize()
        log.line("ERROR", "scenario", "all_reduce completed: no hang")
        return 1

    if name == "kernel-spin":
        if rank == 1:
            reached("parked")
            park()
        cycles = spin_cycles(torch, args.spin_s)
        log.line(
            "INFO", "scenario", f"launching a {args.spin_s:.0f} s spin kernel ({cycles} cycles)"
        )
        torch.cuda._sleep(cycles)
        reached("synchronize", spin_s=args.spin_s)
        torch.cuda.synchronize()
        log.line("INFO", "scenario", "spin kernel finished")
        park()

    del weights
    return 2


# ---- launcher --------------------------------------------------------------------------------


def _health_server(host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith("/v1/models"):
                body = b'{"object":"list","data":[{"id":"meta-llama/Llama-3.1-70B"}]}'
            else:
                body = b""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def _rank_env(rank: int, master_port: int, nccl_debug: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(NO_NVLS_ENV)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD_SIZE),
        LOCAL_WORLD_SIZE=str(WORLD_SIZE),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(master_port),
        PYTHONUNBUFFERED="1",
    )
    if nccl_debug:
        env["NCCL_DEBUG"] = nccl_debug
    return env


def _collect(conns: List[Connection], timeout_s: float) -> List[Dict[str, Any]]:
    """One "reached" message per rank; raises when a rank dies first or time runs out."""
    deadline = time.monotonic() + timeout_s
    got: Dict[int, Dict[str, Any]] = {}
    pending = list(conns)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(got)} of {len(conns)} ranks reached their state")
        for conn in wait(pending, timeout=left):
            pending.remove(conn)  # type: ignore[arg-type]
            try:
                msg = conn.recv()  # type: ignore[union-attr]
            except EOFError:
                raise RuntimeError(f"rank {conns.index(conn)} exited before its state") from None
            got[msg["rank"]] = msg
    return [got[r] for r in sorted(got)]


def run_launcher(args: argparse.Namespace) -> int:
    with contextlib.suppress(OSError):
        os.setsid()  # one process group for the whole scenario
    arm_lifetime(args.max_lifetime)
    os.environ.update(NO_NVLS_ENV)
    log = Log(args.log)
    master_port = free_port()
    log.line("INFO", "api_server.py:1880", f"vLLM API server version 0.11.0 (scenario {args.name})")
    log.line(
        "INFO",
        "api_server.py:1881",
        "args: model='meta-llama/Llama-3.1-70B', tensor_parallel_size=2, api_key=None",
    )
    out = open(args.log, "ab") if args.log else subprocess.DEVNULL  # noqa: SIM115
    status_readers: List[Connection] = []
    wait_writers: List[int] = []
    procs: List[subprocess.Popen] = []
    for rank in range(WORLD_SIZE):
        status_r, status_w = os.pipe()
        wait_r, wait_w = os.pipe()
        argv = [
            sys.executable,
            os.path.abspath(__file__),
            args.name,
            "--worker",
            "--rank",
            str(rank),
            "--launcher-pid",
            str(os.getpid()),
            "--master-port",
            str(master_port),
            "--status-fd",
            str(status_w),
            "--wait-fd",
            str(wait_r),
            "--max-lifetime",
            str(args.max_lifetime),
            "--weights-gib",
            str(args.weights_gib),
            "--spin-s",
            str(args.spin_s),
        ]
        if args.log:
            argv += ["--log", args.log]
        procs.append(
            subprocess.Popen(
                argv,
                env=_rank_env(rank, master_port, args.nccl_debug),
                pass_fds=(status_w, wait_r),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        )
        os.close(status_w)
        os.close(wait_r)
        status_readers.append(Connection(status_r, writable=False))
        wait_writers.append(wait_w)  # held open and never written: pipe-deadlock's recv blocks

    try:
        states = _collect(status_readers, READY_TIMEOUT_S)
    except (TimeoutError, RuntimeError) as exc:
        print(f"scenarios: {args.name}: ranks did not reach their state: {exc}", file=sys.stderr)
        for p in procs:
            with contextlib.suppress(OSError):
                p.kill()
        return 1

    server = None
    port = None
    if args.name == "healthy-busy":
        server = _health_server("127.0.0.1", args.port)
        port = int(server.server_address[1])
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True
        ).start()
        log.line("INFO", "launcher.py:29", f"Starting vLLM API server on http://127.0.0.1:{port}")
    time.sleep(1.0)  # "reached" is sent just before the blocking call: let each rank get inside
    write_ready_file(
        args.ready_file,
        {
            "scenario": args.name,
            "launcher_pid": os.getpid(),
            "worker_pids": [p.pid for p in procs],
            "ranks": {str(p.pid): rank for rank, p in enumerate(procs)},
            "states": {str(s["rank"]): s["state"] for s in states},
            "log": os.path.abspath(args.log) if args.log else None,
            "port": port,
            "master_port": master_port,
            "max_lifetime_s": args.max_lifetime,
            "spin_s": args.spin_s if args.name == "kernel-spin" else None,
        },
    )
    # reap ranks as they exit (rank-exits: rank 1 is gone, not a zombie); the alarm ends us
    with contextlib.suppress(ChildProcessError):
        while True:
            os.wait()
    if server is not None:
        while True:
            time.sleep(3600)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return run_worker(args) if args.worker else run_launcher(args)


if __name__ == "__main__":
    sys.exit(main())
