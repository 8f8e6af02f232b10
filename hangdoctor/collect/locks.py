"""Who holds what: the file lock a server waits on, the FIFO it reads, the port it listens on.

``/proc/locks`` lists every flock / POSIX / OFD lock on the host, and each waiter as a ``->``
line after the lock it waits for. The lines give pid and ``MAJ:MIN:INODE``, not paths: the path
comes from the open files of the waiter and the holder. A FIFO read blocks in ``pipe_read``
like a multiprocessing pipe does; its open file (a path, not ``pipe:[N]``) tells them apart.

Stdlib only, Python 3.8 compatible (ships with the probe). Reads only.

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import os
import stat

from hangdoctor.collect import procfs, target_fs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

MAX_LOCK_LINES = 20000
# Wait channels of a thread blocked in a pipe or FIFO: open() with no writer yet, or a read.
PIPE_WCHANS = ("wait_for_partner", "fifo_open", "pipe_read", "anon_pipe_read", "pipe_wait")


def parse_proc_locks(text: str) -> List[Dict[str, Any]]:
    """Parse /proc/locks::

        1: FLOCK  ADVISORY  WRITE 4242 00:2f:1234 0 EOF
        1: -> FLOCK  ADVISORY  WRITE 4343 00:2f:1234 0 EOF
        2: POSIX  ADVISORY  READ 4444 08:01:99 0 0

    Returns one dict per line: id, waiting (a ``->`` line), kind, access, pid (None for OFD
    locks, pid -1), dev ("MAJ:MIN", hex as the kernel prints it) and inode (int).
    """
    out = []  # type: List[Dict[str, Any]]
    for line in text.splitlines()[:MAX_LOCK_LINES]:
        parts = line.split()
        if len(parts) < 6 or not parts[0].endswith(":"):
            continue
        waiting = parts[1] == "->"
        if waiting:
            parts = parts[:1] + parts[2:]
        try:
            lock_id = int(parts[0][:-1])
            kind, access = parts[1], parts[3]
            pid = int(parts[4])
            maj, mnr, ino = parts[5].split(":")
        except (ValueError, IndexError):
            continue
        out.append(
            {
                "id": lock_id,
                "waiting": waiting,
                "kind": kind,
                "access": access,
                "pid": pid if pid > 0 else None,
                "dev": "%s:%s" % (maj, mnr),
                "inode": int(ino),
            }
        )
    return out


def _dev_key(st_dev: int) -> str:
    return "%02x:%02x" % (os.major(st_dev), os.minor(st_dev))


STAT_TIMEOUT_S = 2.0  # for the stat of one process's open files (target_fs)


class _St:
    """The fields of a stat answer that the lock scan reads."""

    def __init__(self, ans: Dict[str, Any]) -> None:
        self.st_mode, self.st_dev, self.st_ino = ans["mode"], ans["dev"], ans["ino"]


def _open_files(pid: int, proc: str) -> List[Tuple[str, Any]]:
    """(path, stat) of the regular files and FIFOs that ``pid`` has open.

    Stat'ed in a disposable child (target_fs): a file the server holds on a wedged FUSE or
    NFS mount puts whoever stats it in D state, for good."""
    named = [(fd, target) for fd, target in procfs.fd_targets(pid, proc, 1024)
             if target.startswith("/")]
    answers = target_fs.run([{"op": "stat", "path": "%s/%d/fd/%d" % (proc, pid, fd)}
                             for fd, _t in named], STAT_TIMEOUT_S)
    out = []
    for (_fd, target), ans in zip(named, answers):
        if "mode" not in ans:
            continue
        st = _St(ans)
        if stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            out.append((target, st))
    return out


def _comm(pid: int, proc: str) -> Optional[str]:
    st = procfs.stat(pid, proc)
    return str(st["comm"]) if st else None


def collect(records: List[Dict[str, Any]], proc: str = "/proc", text: Optional[str] = None) -> Dict[str, Any]:
    """File locks that involve the processes of ``records``, and the FIFOs they read.

    Sets ``fifos`` (paths of open FIFOs) on each record with a thread in a pipe wait. Returns
    ``{"status", "locks": [...]}`` where each lock is a /proc/locks line that a process of the
    tree holds or waits on, or that holds what one of them waits on (that holder may be outside
    the tree), with ``path`` where an open file of the waiter or holder names it, and
    ``holder_name`` / ``name`` (the process's comm).

    ``text``: /proc/locks as read before the first py-spy dump. A dump attaches to the process,
    which interrupts a blocking flock()/fcntl() wait: while py-spy holds the waiter, its line is
    gone from /proc/locks (it comes back when the call restarts), so a read during the dumps
    can miss exactly the wait that matters.
    """
    for rec in records:
        threads = rec.get("threads") or []
        if (
            any((t.get("wchan") or "") in PIPE_WCHANS for t in threads)
            or (rec.get("wchan") or "") in PIPE_WCHANS
        ):
            pid = rec.get("pid")
            if isinstance(pid, int):
                rec["fifos"] = [p for p, st in _open_files(pid, proc) if stat.S_ISFIFO(st.st_mode)]
    if text is None:
        text = procfs.read_text("%s/locks" % proc, 1 << 22)
    if text is None:
        return {"status": "unavailable", "locks": []}
    ours = {r.get("pid") for r in records if isinstance(r.get("pid"), int)}
    lines = parse_proc_locks(text)
    files = {(x["dev"], x["inode"]) for x in lines if x["pid"] in ours}
    kept = [x for x in lines if (x["dev"], x["inode"]) in files]
    paths = {}  # type: Dict[Tuple[str, int], str]
    for pid in sorted({x["pid"] for x in kept if x["pid"]}):
        for path, st in _open_files(pid, proc):
            paths.setdefault((_dev_key(st.st_dev), st.st_ino), path)
    names = {}  # type: Dict[int, Optional[str]]
    for x in kept:
        x["path"] = paths.get((x["dev"], x["inode"]))
        if x["pid"]:
            if x["pid"] not in names:
                names[x["pid"]] = _comm(x["pid"], proc)
            x["name"] = names[x["pid"]]
            x["alive"] = names[x["pid"]] is not None
    return {"status": "ok", "locks": kept[:200]}


def listeners(ports: List[int], proc: str = "/proc", skip: Any = ()) -> Dict[int, List[int]]:
    """Map each of ``ports`` to the pids that listen on it (TCP, any address): ``--port``
    without ``--pid`` names the server by its port. One pass over /proc/*/fd, only when asked."""
    wanted = set(int(p) for p in ports)
    inodes = {}  # type: Dict[int, int]
    for inode, info in procfs.listening_sockets(proc).items():
        if info.get("port") in wanted:
            inodes[inode] = int(info["port"])  # type: ignore[arg-type]
    out = {}  # type: Dict[int, List[int]]
    if not inodes:
        return out
    for pid in procfs.list_pids(proc):
        if pid in skip:
            continue
        for inode in procfs.socket_inodes(pid, proc):
            port = inodes.get(inode)
            if port is not None and pid not in out.setdefault(port, []):
                out[port].append(pid)
    return out


def server_root(pid: int, roots: List[int], proc: str = "/proc") -> int:
    """The discovered server root above ``pid`` (its API process may be a child of the
    launcher), else ``pid`` itself."""
    anc, hops = pid, 0
    while anc > 1 and hops < 64:
        if anc in roots:
            return anc
        st = procfs.stat(anc, proc)
        anc = int(st["ppid"]) if st else 0
        hops += 1
    return pid
