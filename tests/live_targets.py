"""Small live targets of known truth for the live verdict (tests/test_live_targets.py).

Each target is a short Python script started here in its own process group, its stdout and
stderr on a log file (the probe finds it as the server's log, as it would a real server's),
writing its pid to a ready file once it is in the state it stands for. Nothing here is a fake:
every target is a real process in a real state (threads in locks, workers in queues, ranks in
gloo collectives, an HTTP server with a request that never gets its answer).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 90.0
MAX_LIFETIME_S = 600.0  # every target ends on its own, even if the test run is killed hard

_PRE = r"""
import os, sys, time, threading, signal
READY = sys.argv[1]
signal.signal(signal.SIGALRM, lambda *a: os._exit(0))
signal.alarm(int(sys.argv[2]))
def ready(**extra):
    tmp = READY + ".tmp"
    with open(tmp, "w") as f:
        f.write(repr(dict(pid=os.getpid(), **extra)))
    os.replace(tmp, READY)
"""

SCRIPTS: dict[str, str] = {}

# A healthy 2-rank gloo job: each rank multiplies small matrices, then all_reduce; one rank is
# in the collective while its peer computes, which is the normal state of every TP job.
SCRIPTS["gloo_busy"] = r"""
import multiprocessing as mp
def rank_main(rank, port):
    import torch, torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=2)
    a = torch.randn(96, 96)
    t = torch.ones(4096)
    n = 0
    while True:
        for _ in range(8):
            a = torch.tanh(a @ a)
        dist.all_reduce(t)
        t.div_(2.0)
        n += 1
        if n == 20 and rank == 0:
            print("rank0: 20 steps done", flush=True)
        time.sleep(0.01)
if __name__ == "__main__":
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ctx = mp.get_context("spawn")
    ps = [ctx.Process(target=rank_main, args=(r, port)) for r in range(2)]
    for p in ps: p.start()
    time.sleep(1.0)
    while not os.path.exists(READY):
        time.sleep(0.5)
        if open(sys.argv[3]).read().count("20 steps done"):
            ready(workers=[p.pid for p in ps])
    for p in ps: p.join()
"""

# An idle job consumer: a dispatcher waiting on its socket for jobs, two workers in
# Queue.get() with nothing queued.
SCRIPTS["idle_consumer"] = r"""
import multiprocessing as mp, socket
def worker(q):
    while True:
        job = q.get()
        print("job", job, flush=True)
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ws = [ctx.Process(target=worker, args=(q,)) for _ in range(2)]
    for w in ws: w.start()
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0)); srv.listen(8)
    time.sleep(2.0)
    ready(workers=[w.pid for w in ws], port=srv.getsockname()[1])
    while True:
        conn, _ = srv.accept()
        msg = conn.recv(100)
        if msg.startswith(b"JOB "):  # anything else (a port scanner, an HTTP probe) is no job
            q.put(msg)
        conn.close()
"""

# A worker that does its work every 3 s and logs it.
SCRIPTS["periodic_logger"] = r"""
n = 0
ready()
while True:
    n += 1
    print(time.strftime("%H:%M:%S"), "INFO processed batch", n, flush=True)
    time.sleep(3)
"""

# A loader reading a 24 MiB file again and again (from the page cache: rchar moves,
# read_bytes does not), ~10 MB/s, logging nothing.
SCRIPTS["pagecache_loader"] = r"""
path = os.path.join(os.path.dirname(READY), "weights.bin")
with open(path, "wb") as f:
    f.write(os.urandom(24 << 20))
def load():
    while True:
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                time.sleep(0.1)
t = threading.Thread(target=load, name="loader"); t.start()
ready()
t.join()
"""

# A livelock: a thread spinning at 100 % on a flag nobody sets; the main thread joins it.
SCRIPTS["livelock"] = r"""
flag = False
def spin():
    while not flag:
        pass
t = threading.Thread(target=spin, name="spinner"); t.start()
time.sleep(0.5)
ready()
t.join()
"""

# ABBA: two threads take two locks in opposite orders; the main thread joins them.
SCRIPTS["abba_threads"] = r"""
lock_a, lock_b = threading.Lock(), threading.Lock()
def one():
    with lock_a:
        time.sleep(0.3)
        with lock_b:
            pass
def two():
    with lock_b:
        time.sleep(0.3)
        with lock_a:
            pass
ts = [threading.Thread(target=one, name="worker-ab"), threading.Thread(target=two, name="worker-ba")]
for t in ts: t.start()
time.sleep(1.0)
ready()
for t in ts: t.join()
"""

# A plain HTTP server (not a known engine): /health answers 200; /generate waits for a
# backend event that never comes. The test sends one /generate and keeps the connection open.
SCRIPTS["http_server"] = r"""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
backend = threading.Event()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def _send(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/work"):
            time.sleep(0.05)
        self._send(b"ok\n")
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        backend.wait()
        self._send(b"done\n")
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
ready(port=srv.server_address[1])
srv.serve_forever()
"""

# A process waiting for a file lock (flock) that another process, outside the tree, holds.
SCRIPTS["flock_waiter"] = r"""
import fcntl
path = sys.argv[4]
f = open(path, "a")
ready()
fcntl.flock(f, fcntl.LOCK_EX)
print("got the lock", flush=True)
"""

SCRIPTS["flock_holder"] = r"""
import fcntl
f = open(sys.argv[4], "a")
fcntl.flock(f, fcntl.LOCK_EX)
ready()
while True:
    time.sleep(60)
"""

# A launcher with two ranks: rank 1 raises and exits, rank 0 waits on a pipe for its result,
# the launcher joins them. A multiprocessing queue starts the resource tracker (a helper).
SCRIPTS["rank_died"] = r"""
import multiprocessing as mp
def rank_main(rank, conn, q):
    print("[rank%d] started, world_size=2" % rank, flush=True)
    if rank == 1:
        time.sleep(0.5)
        print("[rank1]: RuntimeError: shape mismatch in all_gather at step 12", flush=True)
        raise SystemExit(1)
    conn.recv()
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    a, b = ctx.Pipe()
    ps = [ctx.Process(target=rank_main, args=(r, a if r == 0 else b, q)) for r in range(2)]
    for p in ps: p.start()
    ps[1].join()
    time.sleep(1.0)
    ready(workers=[ps[0].pid], dead=[ps[1].pid])
    for p in ps: p.join()
"""

# A launcher with two ranks that exchange a token in a loop; the test stops rank 1 (SIGSTOP):
# rank 0 then waits for it in recv().
SCRIPTS["pingpong"] = r"""
import multiprocessing as mp
def rank_main(rank, conn):
    n = 0
    while True:
        if rank == 0:
            conn.send(n); n = conn.recv() + 1
        else:
            n = conn.recv(); conn.send(n)
        time.sleep(0.02)
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    ps = [ctx.Process(target=rank_main, args=(0, a)), ctx.Process(target=rank_main, args=(1, b))]
    for p in ps: p.start()
    time.sleep(2.0)
    ready(workers=[p.pid for p in ps])
    for p in ps: p.join()
"""

# Pure-Python computation across varying frames (sorting, hashing, recursion).
SCRIPTS["busy_compute"] = r"""
import hashlib, random
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def sort_some():
    xs = [random.random() for _ in range(20000)]
    xs.sort()
    return xs[0]
def hash_some():
    h = hashlib.sha256()
    for i in range(2000):
        h.update(str(i).encode())
    return h.hexdigest()
ready()
while True:
    fib(18); sort_some(); hash_some()
    time.sleep(0.005)
"""

# A writer producing output files continuously (wchar moves), logging nothing.
SCRIPTS["file_writer"] = r"""
path = os.path.join(os.path.dirname(READY), "out.bin")
chunk = os.urandom(1 << 20)
def write():
    while True:
        with open(path, "wb") as f:
            for _ in range(8):
                f.write(chunk); time.sleep(0.1)
t = threading.Thread(target=write, name="writer"); t.start()
ready()
t.join()
"""

# An idle multiprocessing pool: the main thread waits for commands on a socket.
SCRIPTS["idle_pool"] = r"""
import multiprocessing as mp, socket
if __name__ == "__main__":
    pool = mp.get_context("spawn").Pool(2)
    pool.map(abs, range(4))
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    ready(port=srv.getsockname()[1])
    while True:
        c, _ = srv.accept(); c.close()
"""

# A consumer whose producer died: the main thread waits on a queue item that will never come
# while the log says a batch was submitted (work pending).
SCRIPTS["lost_batch"] = r"""
import queue
q = queue.Queue()
def producer():
    print("INFO loading weights", flush=True)
    time.sleep(0.2)
    print("INFO submitted batch 1 (32 requests); waiting for results", flush=True)
threading.Thread(target=producer, name="producer").start()
time.sleep(0.5)
ready()
q.get()
"""


@dataclass
class Target:
    name: str
    proc: subprocess.Popen[bytes]
    workdir: Path
    log: Path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def start(name: str, workdir: Path, *args: str, python: str | None = None) -> Target:
    """Start target ``name`` in ``workdir`` and wait for its ready file."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / f"{name}.py"
    script.write_text(_PRE + SCRIPTS[name])
    ready = workdir / "ready"
    log = workdir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [python or sys.executable, str(script), str(ready), str(int(MAX_LIFETIME_S)), str(log), *args],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=str(workdir),
        )
    t = Target(name, proc, workdir, log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            t.stop()
            raise RuntimeError(f"target {name} never got ready: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    import ast

    t.info = ast.literal_eval(ready.read_text())
    return t


def send_stuck_request(port: int) -> socket.socket:
    """A POST whose answer never comes; the caller keeps the socket open (and closes it)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    body = b'{"prompt": "hello", "max_tokens": 8}'
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return s


def keepalive_answered(port: int) -> socket.socket:
    """A keep-alive connection whose one request was answered: nothing pending on it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"ok\n" not in got:
        got += s.recv(1000)
    return s


def fake_dmesg(folder: Path, lines: list[str]) -> dict[str, str]:
    """An environment whose ``dmesg`` prints ``lines`` (the kernel log cannot be written here
    without touching every other program's view of it)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "dmesg.txt"
    data.write_text("".join(line + "\n" for line in lines))
    exe = folder / "dmesg"
    exe.write_text(f"#!/bin/sh\ncat {data}\n")
    exe.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
    return env
