"""Regenerate the *recorded* samples in this folder from real processes dumped with py-spy.

Run by hand (not by pytest): ``python3 tests/samples/make_samples.py [--zmq-path DIR]``.
Needs py-spy and torch (CPU); pyzmq is optional (``pip install --target DIR pyzmq``). Every
process started here exits on its own within ~90 s and is killed at the end anyway.
The hand-written samples (logs, dmesg, nvidia-smi) are not touched; README.md lists them all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
PYSPY = shutil.which("py-spy") or "py-spy"

# ranks 0-2 wait in broadcast(src=3); rank 3 sits in all_reduce: a real gloo desync.
DESYNC = r"""
import argparse, os, sys, time, threading
from datetime import timedelta
import torch, torch.distributed as dist

def sync_metadata(t, rank):
    if rank == 3:
        dist.all_reduce(t)          # the odd rank out
    else:
        dist.broadcast(t, src=3)

def execute_model_step(rank):
    t = torch.ones(1024)
    sync_metadata(t, rank)

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int); p.add_argument("--world-size", type=int)
    p.add_argument("--port", type=int)
    a = p.parse_args()
    threading.Timer(90, lambda: os._exit(3)).start()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank,
                            world_size=a.world_size, timeout=timedelta(seconds=80))
    print("ready", flush=True)
    execute_model_step(a.rank)

if __name__ == "__main__":
    main()
"""

# Post-load idle workers: 4 workers park in Connection.recv (and zmq recv when available).
IDLE = r"""
import os, sys, threading, time
from multiprocessing import Pipe

def wait_for_rpc(conn):
    return conn.recv()

def worker_busy_loop(conn, sock):
    while True:
        if sock is not None:
            sock.recv_multipart()
        else:
            wait_for_rpc(conn)

def worker_main(rank):
    threading.Timer(90, lambda: os._exit(3)).start()
    parent, child = Pipe()
    sock = None
    if rank % 2 == 1:
        try:
            import zmq
            ctx = zmq.Context()
            sock = ctx.socket(zmq.PULL)
            sock.bind("ipc:///tmp/hd_sample_%d_%d" % (os.getpid(), rank))
        except ImportError:
            sock = None
    print("ready", flush=True)
    worker_busy_loop(child, sock)

if __name__ == "__main__":
    worker_main(int(sys.argv[sys.argv.index("--rank") + 1]))
"""

# Threads parked in Event.wait / Queue.get, then faulthandler dumps all threads.
FAULT = r"""
import faulthandler, os, queue, sys, threading, time
threading.Timer(60, lambda: os._exit(3)).start()
q = queue.Queue()
ev = threading.Event()
def output_handler():
    q.get()
def heartbeat():
    ev.wait()
threading.Thread(target=output_handler, name="output_handler", daemon=True).start()
threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
time.sleep(0.3)
def run_engine_loop():
    if sys.argv[1:] == ["abort"]:
        faulthandler.enable()
        os.abort()
    faulthandler.dump_traceback(all_threads=True)
run_engine_loop()
os._exit(0)
"""

# A hung server stopped with Ctrl-C: the KeyboardInterrupt traceback shows where it sat.
CTRL_C = r"""
import os, signal
from multiprocessing import Pipe
# a shell that starts jobs in the background ignores SIGINT; restore Python's Ctrl-C handling
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.alarm(60)  # exit on our own; a timer thread could swallow the SIGINT
def wait_until_ready(conn):
    return conn.recv()
def run_server():
    parent, child = Pipe()
    print("ready", flush=True)
    wait_until_ready(child)
run_server()
"""


def _start(code_path: Path, args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [PY, str(code_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        start_new_session=True,
    )


def _wait_ready(p: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    line = p.stdout.readline()
    if "ready" not in line or time.monotonic() > deadline:
        raise RuntimeError(f"child did not get ready: {line!r} {p.stderr.read()}")


def _dump(pid: int, *extra: str) -> str:
    env = dict(os.environ, RUST_BACKTRACE="0")
    r = subprocess.run(
        [PYSPY, "dump", "--pid", str(pid), *extra],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--zmq-path", default="")
    opts = ap.parse_args()
    env = dict(os.environ)
    if opts.zmq_path:
        env["PYTHONPATH"] = opts.zmq_path
    procs: list[subprocess.Popen] = []
    work = Path(tempfile.mkdtemp(prefix="hd_samples_"))
    try:
        # (a) gloo desync
        src = work / "serve_tp.py"
        src.write_text(DESYNC)
        port = 29500 + os.getpid() % 1000
        ranks = [
            _start(src, ["--rank", str(r), "--world-size", "4", "--port", str(port)], env)
            for r in range(4)
        ]
        procs += ranks
        for p in ranks:
            _wait_ready(p)
        time.sleep(1.0)
        text = ""
        for p in ranks:
            text += f"root@gpu-node-3:~# py-spy dump --pid {p.pid}\n" + _dump(p.pid) + "\n"
        (HERE / "pyspy_desync_4ranks.txt").write_text(text)
        (HERE / "pyspy_desync_rank3.json").write_text(_dump(ranks[3].pid, "--json"))
        (HERE / "pyspy_native_locals.txt").write_text(_dump(ranks[0].pid, "--native", "--locals"))

        # (b) idle workers after load
        src = work / "multiproc_executor.py"
        src.write_text(IDLE)
        idle = [_start(src, ["--rank", str(r)], env) for r in range(4)]
        procs += idle
        for p in idle:
            _wait_ready(p)
        time.sleep(0.5)
        text = "".join(f"$ py-spy dump --pid {p.pid}\n" + _dump(p.pid) for p in idle)
        (HERE / "pyspy_idle_workers.txt").write_text(text)

        # faulthandler: a plain dump and a fatal abort
        src = work / "engine.py"
        src.write_text(FAULT)
        r = subprocess.run([PY, str(src)], capture_output=True, text=True, timeout=30)
        (HERE / "faulthandler_threads.txt").write_text(r.stderr)
        r = subprocess.run([PY, str(src), "abort"], capture_output=True, text=True, timeout=30)
        (HERE / "faulthandler_fatal.txt").write_text(r.stderr)

        # Ctrl-C traceback of a hung server
        src = work / "api_server.py"
        src.write_text(CTRL_C)
        p = _start(src, [], env)
        procs.append(p)
        _wait_ready(p)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        (HERE / "traceback_ctrl_c.txt").write_text(err)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
