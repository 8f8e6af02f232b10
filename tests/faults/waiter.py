"""A target process for the fault tests: parks in a pipe wait, like a post-load deadlock.

Prints one JSON line on stdout once ready: ``{"pid", "children", "tids", "log"}``. Exits on its
own after ``--lifetime`` seconds (the wait itself is bounded), even when the test runner dies.

Options shape what the tests look at:
  --threads N        extra threads, each parked in its own bounded pipe wait
  --children N       child processes (copies of this script) it starts and reaps
  --block-signals    block every blockable signal, so a signal sent by anyone stays pending
                     and shows in /proc/PID/status SigPnd/ShdPnd
  --log PATH         append a few log lines to PATH before waiting
  --lifetime S       exit after S seconds
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time


def park_in_pipe(lifetime_s: float) -> None:
    """Wait on a pipe that nobody writes to, for at most ``lifetime_s``."""
    read_fd, write_fd = os.pipe()
    deadline = time.monotonic() + lifetime_s
    while True:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return
        select.select([read_fd], [], [], left_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--children", type=int, default=0)
    parser.add_argument("--block-signals", action="store_true")
    parser.add_argument("--log", default=None)
    parser.add_argument("--lifetime", type=float, default=60.0)
    args = parser.parse_args()
    end = time.monotonic() + args.lifetime

    if args.block_signals:
        # threads started below inherit the mask
        signal.pthread_sigmask(
            signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP}
        )
    # children are reaped by the kernel: a killed child vanishes instead of lingering as a zombie
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    children = []
    for _ in range(args.children):
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--lifetime", str(args.lifetime)]
            + (["--block-signals"] if args.block_signals else []),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert child.stdout is not None
        json.loads(child.stdout.readline())  # its own ready line: bounded by its lifetime
        children.append(child.pid)
    for i in range(args.threads):
        threading.Thread(
            target=park_in_pipe,
            args=(max(0.0, end - time.monotonic()),),
            name=f"waiter-{i}",
            daemon=True,
        ).start()
    if args.log:
        with open(args.log, "a", encoding="utf-8") as f:
            f.write("INFO waiter: loaded weights\nINFO waiter: waiting for peers\n")
    time.sleep(0.05)  # let the threads reach their wait
    tids = sorted(int(t) for t in os.listdir(f"/proc/{os.getpid()}/task"))
    print(
        json.dumps({"pid": os.getpid(), "children": children, "tids": tids, "log": args.log}),
        flush=True,
    )
    park_in_pipe(max(0.0, end - time.monotonic()))
    os._exit(0)


if __name__ == "__main__":
    main()
