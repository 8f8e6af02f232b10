"""Reading processes from /proc: the probe's process-side primitives.

Stdlib only, Python 3.8 compatible (ships with the probe). Every reader returns None or an
empty value for a process that vanished or a file that cannot be read; nothing here raises
for a target that changed under us.

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import os
import re

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_text(path: str, limit: int = 1 << 20) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def read_bytes(path: str, limit: int = 1 << 20) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except (OSError, ValueError):
        return None


def parse_stat(text: Optional[str]) -> Optional[Dict[str, object]]:
    """Parse /proc/PID/stat (or task/TID/stat). ``comm`` may hold spaces and parentheses."""
    if not text:
        return None
    lpar, rpar = text.find("("), text.rfind(")")
    if lpar < 0 or rpar < 0:
        return None
    rest = text[rpar + 2 :].split()
    if len(rest) < 22:
        return None
    return {
        "pid": int(text[:lpar].strip()),
        "comm": text[lpar + 1 : rpar],
        "state": rest[0],
        "ppid": int(rest[1]),
        "pgrp": int(rest[2]),
        "utime": int(rest[11]),
        "stime": int(rest[12]),
        "num_threads": int(rest[17]),
        "starttime": int(rest[19]),
        "vsize": int(rest[20]),
        "rss_pages": int(rest[21]),
    }


def stat(pid: int, proc: str = "/proc") -> Optional[Dict[str, object]]:
    return parse_stat(read_text("%s/%d/stat" % (proc, pid), 4096))


def thread_stat(pid: int, tid: int, proc: str = "/proc") -> Optional[Dict[str, object]]:
    return parse_stat(read_text("%s/%d/task/%d/stat" % (proc, pid, tid), 4096))


def list_pids(proc: str = "/proc") -> List[int]:
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


def list_tids(pid: int, proc: str = "/proc") -> List[int]:
    try:
        return sorted(int(n) for n in os.listdir("%s/%d/task" % (proc, pid)) if n.isdigit())
    except OSError:
        return []


def cmdline(pid: int, proc: str = "/proc") -> List[str]:
    raw = read_bytes("%s/%d/cmdline" % (proc, pid), 1 << 16)
    if not raw:
        return []
    return [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")]


def wchan(pid: int, tid: Optional[int] = None, proc: str = "/proc") -> Optional[str]:
    path = "%s/%d/wchan" % (proc, pid) if tid is None else "%s/%d/task/%d/wchan" % (proc, pid, tid)
    text = read_text(path, 256)
    if text is None:
        return None
    text = text.strip()
    return text if text and text != "0" else None


def comm(pid: int, tid: int, proc: str = "/proc") -> Optional[str]:
    text = read_text("%s/%d/task/%d/comm" % (proc, pid, tid), 256)
    return text.strip() if text is not None else None


def status_fields(pid: int, proc: str = "/proc") -> Dict[str, str]:
    text = read_text("%s/%d/status" % (proc, pid), 8192) or ""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def kib_field(fields: Dict[str, str], key: str) -> Optional[int]:
    value = fields.get(key)
    if not value:
        return None
    try:
        return int(value.split()[0]) * 1024
    except (ValueError, IndexError):
        return None


def io_counters(pid: int, proc: str = "/proc") -> Optional[Dict[str, int]]:
    text = read_text("%s/%d/io" % (proc, pid), 4096)
    if not text:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            pass
    return out


def environ(pid: int, proc: str = "/proc") -> Tuple[Optional[Dict[str, str]], str]:
    """Return (env, status). status is ok / denied / unavailable."""
    try:
        with open("%s/%d/environ" % (proc, pid), "rb") as f:
            raw = f.read(1 << 20)
    except PermissionError:
        return None, "denied"
    except OSError:
        return None, "unavailable"
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env, "ok"


def exe(pid: int, proc: str = "/proc") -> Optional[str]:
    try:
        return os.readlink("%s/%d/exe" % (proc, pid))
    except OSError:
        return None


def fd_targets(pid: int, proc: str = "/proc", limit: int = 4096) -> List[Tuple[int, str]]:
    out = []
    base = "%s/%d/fd" % (proc, pid)
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names[:limit]:
        try:
            out.append((int(name), os.readlink(base + "/" + name)))
        except (OSError, ValueError):
            pass
    return out


_SOCKET_RE = re.compile(r"socket:\[(\d+)\]")


def socket_inodes(pid: int, proc: str = "/proc") -> List[int]:
    out = []
    for _fd, target in fd_targets(pid, proc):
        m = _SOCKET_RE.match(target)
        if m:
            out.append(int(m.group(1)))
    return out


def _hex_ip(hexip: str) -> str:
    if len(hexip) == 8:
        b = bytes.fromhex(hexip)[::-1]
        return ".".join(str(x) for x in b)
    # IPv6: four little-endian 32-bit words
    words = [bytes.fromhex(hexip[i : i + 8])[::-1].hex() for i in range(0, 32, 8)]
    full = "".join(words)
    groups = [full[i : i + 4].lstrip("0") or "0" for i in range(0, 32, 4)]
    text = ":".join(groups)
    if text == "0:0:0:0:0:0:0:0":
        return "::"
    return text


def listening_sockets(proc: str = "/proc") -> Dict[int, Dict[str, object]]:
    """Map socket inode -> {ip, port, proto} for every TCP socket in LISTEN state."""
    out = {}  # type: Dict[int, Dict[str, object]]
    for name in ("tcp", "tcp6"):
        text = read_text("%s/net/%s" % (proc, name), 8 << 20) or ""
        for line in text.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":
                continue
            ip_hex, _, port_hex = parts[1].partition(":")
            try:
                out[int(parts[9])] = {
                    "ip": _hex_ip(ip_hex),
                    "port": int(port_hex, 16),
                    "proto": name,
                }
            except ValueError:
                continue
    return out


def meminfo(proc: str = "/proc") -> Dict[str, int]:
    text = read_text(proc + "/meminfo", 65536) or ""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        try:
            out[key] = int(value.split()[0]) * 1024
        except (ValueError, IndexError):
            pass
    return out


def vmstat(proc: str = "/proc") -> Dict[str, int]:
    text = read_text(proc + "/vmstat", 65536) or ""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def boot_time(proc: str = "/proc") -> Optional[float]:
    text = read_text(proc + "/stat", 65536) or ""
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def children_map(proc: str = "/proc") -> Dict[int, List[int]]:
    """ppid -> [pid] for every process on the host (one pass over /proc)."""
    out = {}  # type: Dict[int, List[int]]
    for pid in list_pids(proc):
        st = stat(pid, proc)
        if st is not None:
            out.setdefault(int(st["ppid"]), []).append(pid)
    return out


def children(pid: int, proc: str = "/proc") -> Optional[List[int]]:
    """The children of ``pid`` from /proc/PID/task/TID/children (one file per thread: a child
    is listed under the thread that started it). [] when ``pid`` is gone; None when this
    kernel or proc tree has no such files (CONFIG_PROC_CHILDREN) or one cannot be read."""
    task_dir = "%s/%d/task" % (proc, pid)
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return [] if not os.path.exists("%s/%d" % (proc, pid)) else None
    kids = []  # type: List[int]
    for tid in tids:
        try:
            with open("%s/%s/children" % (task_dir, tid), "rb") as f:
                kids.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if os.path.isdir("%s/%s" % (task_dir, tid)):
                return None  # the thread is there, its children file is not
        except ProcessLookupError:
            continue  # the thread ended while we read
        except (OSError, ValueError):
            return None
    return kids


def process_tree(root: int, proc: str = "/proc") -> Optional[List[int]]:
    """``root`` and its descendants, as ``descendants`` orders them, read through each
    process's children files: a few reads per process of the tree instead of one per process
    on the host (thousands on a GPU node, most of them kernel threads). None when the children
    files cannot answer: then use ``descendants(root, children_map())``."""
    return _depth_first(root, lambda pid: children(pid, proc))


def descendants(root: int, kids: Dict[int, List[int]]) -> List[int]:
    return _depth_first(root, lambda pid: kids.get(pid, [])) or [root]  # a dict never gives up


def _depth_first(root: int, children_of: Any) -> Optional[List[int]]:
    """``root`` first, then each child's subtree in pid order; None if ``children_of`` (pid ->
    list, or None: cannot tell) gives up on any of them."""
    out, stack, seen = [], [root], set()  # type: List[int], List[int], set
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        kids = children_of(pid)
        if kids is None:
            return None
        stack.extend(sorted(set(kids), reverse=True))
    return out
