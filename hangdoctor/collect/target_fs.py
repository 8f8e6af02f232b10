"""Filesystem access to paths the target names, done only in a disposable child.

A path the target or its evidence names (a mapped library, a Flight Recorder dump folder, a
file it holds open, its container's /dev/shm) may sit on a network or FUSE mount that stopped
answering: ``stat``, ``realpath``, ``listdir`` or ``statvfs`` of it puts the caller in
uninterruptible sleep (D state), and a thread in D state holds its whole process at exit. So
the probe never touches such a path itself: it hands a list of operations to a child
(``python -S -I``), which answers one JSON line per operation as it completes. Past its
deadline the child is killed and never waited for (init reaps it); the answers that came are
kept, the rest are ``{"timeout": true}``.

The same child can drop to the target's uid and gids first (``as_ids``): what it then reads
is only what the target itself may read, however the path was planted.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

MAX_NAMES = 4096  # entries of one folder listed: a folder of a million files tells no more
MAX_ANSWER_BYTES = 8 << 20  # what the parent reads from the child, in all

_CHILD = r"""
import json, os, stat, sys
req = json.loads(sys.argv[1])
ids = req.get("as_ids")
if ids and os.geteuid() == 0 and ids[0] != 0:
    os.setgroups(ids[2] if len(ids) > 2 else [])
    os.setgid(ids[1])
    os.setuid(ids[0])
def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
for op in req["ops"]:
    kind, path = op["op"], op["path"]
    try:
        if kind == "stat" or kind == "lstat":
            st = os.stat(path) if kind == "stat" else os.lstat(path)
            say({"mode": st.st_mode, "size": st.st_size, "mtime": st.st_mtime, "dev": st.st_dev,
                 "ino": st.st_ino, "uid": st.st_uid, "reg": stat.S_ISREG(st.st_mode),
                 "fifo": stat.S_ISFIFO(st.st_mode), "dir": stat.S_ISDIR(st.st_mode)})
        elif kind == "realpath":
            say({"real": os.path.realpath(path)})
        elif kind == "listdir":
            every = os.listdir(path)
            names = sorted(every)[: req["max_names"]]
            sizes = None
            if op.get("sizes"):
                sizes = []
                for n in names:
                    try:
                        sizes.append(os.lstat(os.path.join(path, n)).st_size)
                    except OSError:
                        sizes.append(None)
            say({"names": names, "sizes": sizes, "count": len(every)})
        elif kind == "read":
            # a regular file's first max_bytes: a JSON header line, then exactly that many bytes
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                         | (getattr(os, "O_NOFOLLOW", 0) if op.get("nofollow") else 0))
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    say({"error": "not a regular file"})
                    continue
                chunks, got, cap = [], 0, op["max_bytes"]
                while got < cap:
                    b = os.read(fd, min(1 << 20, cap - got))
                    if not b:
                        break
                    chunks.append(b)
                    got += len(b)
            finally:
                os.close(fd)
            data = b"".join(chunks)
            say({"bytes": len(data), "size": st.st_size, "mtime": st.st_mtime, "dev": st.st_dev,
                 "ino": st.st_ino})
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        elif kind == "statvfs":
            st = os.statvfs(path)
            say({"blocks": st.f_blocks, "frsize": st.f_frsize, "bavail": st.f_bavail,
                 "bfree": st.f_bfree})
        else:
            say({"error": "unknown operation"})
    except OSError as exc:
        say({"error": exc.strerror or str(exc), "errno": exc.errno})
"""

_abandoned = []  # type: List[Any]  # children past their deadline, left for init to reap


def run(ops: List[Dict[str, Any]], timeout_s: float,
        as_ids: Optional[Tuple[int, int, List[int]]] = None) -> List[Dict[str, Any]]:
    """One answer per operation of ``ops`` (``{"op": "stat"|"lstat"|"realpath"|"listdir"|
    "statvfs"|"read", "path": ...}``; "read" takes ``max_bytes`` and ``nofollow`` and answers
    ``data``), in a child that has ``timeout_s`` in all. An operation that got
    no answer in time is ``{"timeout": True}``; the child is then killed and left behind."""
    if not ops:
        return []
    missing = [{"timeout": True} for _ in ops]
    req = {"ops": ops, "max_names": MAX_NAMES, "as_ids": list(as_ids) if as_ids else None}
    try:
        child = subprocess.Popen(
            [sys.executable or "python3", "-S", "-I", "-c", _CHILD, json.dumps(req)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True)
    except OSError as exc:
        return [{"error": "could not start a reader: %s" % exc} for _ in ops]
    deadline = time.monotonic() + max(0.05, timeout_s)
    buf = b""
    answers = []  # type: List[Dict[str, Any]]
    fd = child.stdout.fileno()
    done = False
    pending = None  # type: Optional[Dict[str, Any]]
    cap = MAX_ANSWER_BYTES + sum(int(op.get("max_bytes") or 0) for op in ops)
    while len(answers) < len(ops) and len(buf) < cap:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            done = True
            break
        buf += chunk
        while len(answers) < len(ops):
            if pending is not None:
                # the raw bytes after a "read" header
                if len(buf) < pending["bytes"]:
                    break
                pending["data"], buf = buf[: pending["bytes"]], buf[pending["bytes"]:]
                answers.append(pending)
                pending = None
                continue
            if b"\n" not in buf:
                break
            line, buf = buf.split(b"\n", 1)
            try:
                doc = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                doc = {"error": "unreadable answer"}
            if not isinstance(doc, dict):
                doc = {"error": "unreadable answer"}
            if isinstance(doc.get("bytes"), int) and ops[len(answers)]["op"] == "read":
                pending = doc
                continue
            answers.append(doc)
    if len(answers) == len(ops) or done:
        try:
            child.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _abandon(child)
        else:
            child.stdout.close()
    else:
        _abandon(child)
    if done and len(answers) < len(ops):
        # the child died (a crash, not a hang): what it did not answer is an error
        missing = [{"error": "the reader exited"} for _ in ops]
    return answers + missing[len(answers):]


def _abandon(child: Any) -> None:
    try:
        child.kill()
    except OSError:
        pass
    try:
        child.stdout.close()
    except Exception:
        pass
    _abandoned.append(child)


def ids_of(pid: int, proc: str = "/proc") -> Optional[Tuple[int, int, List[int]]]:
    """(uid, gid, supplementary gids) of ``pid`` from its status, or None."""
    uid = gid = None
    groups = []  # type: List[int]
    try:
        with open("%s/%d/status" % (proc, pid), "rb") as f:
            text = f.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        # the effective ids (the second field) are the ones its file access is checked with
        if key == "Uid" and len(parts) > 1 and parts[1].isdigit():
            uid = int(parts[1])
        elif key == "Gid" and len(parts) > 1 and parts[1].isdigit():
            gid = int(parts[1])
        elif key == "Groups":
            groups = [int(p) for p in parts if p.isdigit()][:64]
    if uid is None or gid is None:
        return None
    return uid, gid, groups
