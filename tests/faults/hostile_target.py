"""A target whose names and data carry HTML/JS payloads, parked in a function with a hostile name.

Payloads arrive as JSON in ``--payloads`` (the test puts its canary port in them). They end up
in: the process name (prctl PR_SET_NAME, 15 bytes), a thread's Python name and its OS name, the
command line (this script's own argv), a function name and file name in the waiting stack
(code objects renamed with ``code.replace``), a local variable (``--locals``) and log lines.
Prints ``{"pid": ...}`` when ready; exits on its own after ``--lifetime`` seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import threading
import time
import types

PR_SET_NAME = 15


def _set_os_name(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _park(lifetime_s: float, payload: str) -> None:
    hostile_local = payload  # shown by py-spy --locals
    read_fd, _write_fd = os.pipe()
    deadline = time.monotonic() + lifetime_s
    while time.monotonic() < deadline:
        select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
    del hostile_local


def hostile_function(name: str, filename: str) -> types.FunctionType:
    """``_park`` under another name and file name: what py-spy reports for the frame."""
    code = _park.__code__.replace(co_name=name, co_filename=filename)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    return types.FunctionType(code, globals(), name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--payloads", required=True)
    parser.add_argument("--log", default=None)
    parser.add_argument("--lifetime", type=float, default=60.0)
    args, _hostile_argv = parser.parse_known_args()
    p = json.loads(args.payloads)
    _set_os_name(p["comm"])
    fn = hostile_function(p["function"], p["filename"])

    def thread_main() -> None:
        _set_os_name(p["thread_comm"])
        fn(args.lifetime, p["local"])

    threading.Thread(target=thread_main, name=p["thread"], daemon=True).start()
    if args.log:
        with open(args.log, "a", encoding="utf-8") as f:
            for line in p["log"]:
                f.write(line + "\n")
    time.sleep(0.05)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    fn(args.lifetime, p["local"])
    os._exit(0)


if __name__ == "__main__":
    main()
