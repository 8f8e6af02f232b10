"""The probe's other sources: HTTP probes of the server's API ports, the kernel log, and
reading a log file's tail without ever blocking.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import os
import re
import subprocess
import time

from hangdoctor.collect import http_exchange

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

KERNEL_RE = re.compile(
    r"NVRM: Xid|Xid \(|Out of memory|oom-kill|oom_reaper|invoked oom-killer|"
    r"AER:|PCIe Bus Error|fallen off the bus|segfault at|blocked for more than|"
    r"Bus error|NVRM:|nvidia-peermem|GPU has fallen|ECC error",
    re.IGNORECASE,
)

def ports_to_probe(readers: List[Any], extra: List[int]) -> Tuple[Dict[int, str], List[str]]:
    """Which listening ports get an HTTP GET, and which are left alone, and why.

    Only the server's API ports are probed. Sockets of workers (NCCL bootstrap and proxy
    listeners, gloo pairs) and the c10d store on MASTER_PORT are never touched: a stray
    connection to an NCCL listener was measured to leave its service threads spinning at
    100 % CPU in the target, and a store may log or drop a bad client.
    """
    master_ports = set()
    ras_ports = {28028}  # NCCL RAS: it speaks its own protocol, and only that is sent to it
    for r in readers:
        env = r.record.get("env") or {}
        mp = env.get("MASTER_PORT")
        if mp and mp.isdigit():
            master_ports.add(int(mp))
        ras = env.get("NCCL_RAS_ADDR", "").rpartition(":")[2]
        if ras.isdigit():
            ras_ports.add(int(ras))
    low, high = _ephemeral_range()
    nccl_pids = {}  # type: Dict[int, bool]
    ports = {}  # type: Dict[int, str]
    skipped = []  # type: List[str]
    worker_ports = []  # type: List[int]
    for r in readers:
        role = r.record.get("role")
        for s in r.record.get("listen", []):
            port = int(s["port"])
            if port in master_ports:
                skipped.append("port %d (c10d store, MASTER_PORT)" % port)
            elif port in ras_ports:
                skipped.append("port %d (NCCL RAS)" % port)
            elif (low <= port <= high and not _names_port(r.record.get("cmdline") or [], port)
                  and _maps_nccl(r.pid, getattr(r, "proc", "/proc"), nccl_pids)):
                # bound to port 0 by a process that loaded NCCL: a bootstrap/proxy/gloo socket
                skipped.append("port %d (ephemeral, in a process that loaded NCCL)" % port)
            elif role in ("worker", "engine", "compiler"):
                worker_ports.append(port)
            else:
                ports.setdefault(port, str(s["ip"]))
    if worker_ports:
        skipped.append("%d port(s) of worker processes (NCCL/gloo/IPC sockets)" % len(worker_ports))
    for p in extra:
        ports[int(p)] = "127.0.0.1"  # asked for explicitly
    return ports, skipped


def _ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> Tuple[int, int]:
    try:
        with open(path) as f:
            a, b = f.read().split()[:2]
        return int(a), int(b)
    except (OSError, ValueError):
        return 32768, 60999


def _names_port(argv: List[str], port: int) -> bool:
    """Whether the command line names this port (``--port 50000``, ``--port=50000``, a URL)."""
    want = str(port)
    return any(tok == want or tok.endswith(("=" + want, ":" + want)) for tok in argv)


def _maps_nccl(pid: int, proc: str, cache: Dict[int, bool]) -> bool:
    if pid not in cache:
        try:
            with open("%s/%d/maps" % (proc, pid), "rb") as f:
                cache[pid] = b"libnccl" in f.read(8 << 20)
        except OSError:
            cache[pid] = False
    return cache[pid]


def http_probe(port: int, ip: str, timeout_s: float) -> Dict[str, Any]:
    host = "127.0.0.1" if ip in ("0.0.0.0", "::", "127.0.0.1") else ip
    result = {"port": port, "url": None, "ok": False, "code": None, "latency_s": None,
              "error": None, "body": None}  # type: Dict[str, Any]
    for path in ("/health", "/v1/models", "/"):
        url = "http://%s:%d%s" % (host if ":" not in host else "[%s]" % host, port, path)
        result["url"] = url
        t0 = time.monotonic()
        data, err, _ = http_exchange.exchange(
            host, port, http_exchange.request("GET", path, host), timeout_s, 4096,
            enough=lambda d: b"\r\n\r\n" in d and len(d) > 512)
        result["latency_s"] = round(time.monotonic() - t0, 4)
        if err:
            result["error"] = err
            return result
        code, head, body = http_exchange.status(data)
        if code is None:
            first = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
            result["error"] = "not an HTTP answer: %r" % first[:60]
            return result
        result["code"] = code
        text = body[:400].decode("utf-8", "replace")
        if len(text) > 200:
            # cut at a word's end: half a token would escape redaction
            cut = max(text.rfind(c, 0, 200) for c in " \t\r\n,;&\"'")
            text = text[: cut if cut > 0 else 0] + " [...]"
        result["body"] = text
        result["error"] = None
        if result["code"] == 404 and path != "/":
            continue
        result["ok"] = 200 <= result["code"] < 300
        return result
    return result


def kernel_log(timeout_s: float) -> Tuple[Optional[List[str]], str, Optional[str], Optional[str]]:
    """(relevant lines, status, detail, remedy) from dmesg."""
    try:
        out = subprocess.run(["dmesg", "-T"], capture_output=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            out = subprocess.run(["dmesg"], capture_output=True, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return None, "unavailable", "dmesg not found", None
    except subprocess.TimeoutExpired:
        return None, "timeout", "dmesg did not answer within %.1f s" % timeout_s, None
    except OSError as exc:
        return None, "failed", str(exc), None
    if out.returncode != 0:
        err = out.stderr.decode("utf-8", "replace").strip().splitlines()
        msg = err[0] if err else "dmesg exited %d" % out.returncode
        if "ermission" in msg or "not permitted" in msg:
            return None, "denied", msg, ("run as root, or allow it once with "
                                         "`sudo sysctl kernel.dmesg_restrict=0`")
        return None, "failed", msg, None
    lines = out.stdout.decode("utf-8", "replace").splitlines()
    keep = [ln for ln in lines if KERNEL_RE.search(ln)]
    return keep[-300:], "ok", "%d of %d lines relevant" % (len(keep), len(lines)), None


# Paths that are never a server's log, however regular they look: /proc/PID/environ is a
# "regular file" holding every variable of a process, and gets no key-name redaction as a log.
_NOT_A_LOG = ("/proc/", "/sys/", "/dev/")
MAX_LINE_CHARS = 16384  # a longer log line is cut here, before redaction (see redact.py)

# The log is read by a child process: a log on a hung FUSE or NFS mount puts whoever calls
# stat() or read() on it in uninterruptible sleep (D state), and a thread in D state holds its
# whole process at exit. The child is disposable: past its timeout it is killed and never
# waited for, and the probe carries on with what the other sources collected.
_LOG_CHILD = r"""
import json, os, stat, sys, time
req = json.loads(sys.argv[1])
out = {"skipped": []}
def finish():
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)
ids = req.get("as_ids")
if ids and os.geteuid() == 0 and ids[0] != 0:
    # a path the server's user could have planted is read with that user's rights only
    os.setgroups(ids[2] if len(ids) > 2 else [])
    os.setgid(ids[1])
    os.setuid(ids[0])
NB = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
for entry in req["paths"]:
    given = req["given"]
    path, name, via_fd = entry["open"], entry["name"], entry.get("fd")
    fd = None
    try:
        if via_fd:
            # the file the server holds, opened through its descriptor: never by the name
            # the link shows, which the server can point anywhere
            for top in req["not_a_log"]:
                if name.startswith(top):
                    raise ValueError("%s is in %s, not a server log; not read"
                                     % (name, top.rstrip("/")))
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("%s is not a regular file; not read" % name)
        else:
            st = os.lstat(path)
            # as root for a server of another (unknown) user: no link is followed; once the
            # child runs with the server's own rights (or the server is root) a link leads
            # nowhere the server could not read itself
            if stat.S_ISLNK(st.st_mode) and (os.geteuid() != 0 or ids):
                st = os.stat(path)
            elif stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(path)
                for top in req["not_a_log"]:
                    if real.startswith(top):
                        raise ValueError("%s is in %s, not a server log; not read"
                                         % (path, top.rstrip("/")))
                raise ValueError("%s is a symbolic link (to %s); not followed, give the file "
                                 "itself" % (path, real))
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("%s is not a regular file; not read" % path)
            real = os.path.realpath(path)
            for top in req["not_a_log"]:
                if real.startswith(top):
                    raise ValueError("%s is in %s, not a server log; not read"
                                     % (path, top.rstrip("/")))
        nofollow = not via_fd and os.geteuid() == 0 and not ids
        fd = os.open(path, NB | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0))
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("%s is not a regular file; not read" % name)
    except (OSError, ValueError) as exc:
        if fd is not None:
            os.close(fd)
        msg = str(exc) if isinstance(exc, ValueError) else "%s: %s" % (name, exc.strerror or exc)
        if isinstance(exc, OSError) and exc.errno in (1, 13) and ids and ids[0] != 0:
            msg += " (read as the server's user, uid %d)" % ids[0]
        if given:
            out["error"] = msg
            finish()
        out["skipped"].append(msg)
        continue
    out.update(path=name, open=entry, size=st.st_size, size_start=st.st_size, mtime=st.st_mtime)
    if req["tail"]:
        size = st.st_size
        os.lseek(fd, max(0, size - req["max_bytes"]), 0)
        chunks, got = [], 0
        while got < req["max_bytes"]:
            b = os.read(fd, min(1 << 20, req["max_bytes"] - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        text = b"".join(chunks).decode("utf-8", "replace").replace("\x00", "")
        lines = text.splitlines()
        if size > req["max_bytes"] and lines:
            lines = lines[1:]  # the first line is cut
        cap = req["max_line"]

        def cut(ln):
            # never inside a word: half a token is too short for its pattern and would be kept
            head = ln[:cap]
            space = max(head.rfind(" "), head.rfind("\t"))
            head = head[:space] if space >= cap - 512 else head[:cap - 512]
            return head + " [... %d characters cut]" % (len(ln) - len(head))

        out["tail"] = [ln if len(ln) <= cap else cut(ln) for ln in lines[-req["max_lines"]:]]
        st2 = os.fstat(fd)
        out.update(size=st2.st_size, mtime=st2.st_mtime)
    os.close(fd)
    finish()
out["error"] = None
finish()
"""
_abandoned = []  # type: List[Any]  # children past their timeout, left for init to reap


def log_entry(path: Any) -> Dict[str, Any]:
    """``{"open", "name", "fd"}``: a name given by the user (opened without following a final
    symbolic link), or a descriptor of the server (``fd_entry``) read through /proc."""
    if isinstance(path, dict):
        return path
    return {"open": str(path), "name": str(path), "fd": False}


def fd_entry(proc: str, pid: int, fd: int, name: str) -> Dict[str, Any]:
    """The file ``pid`` holds as ``fd``, opened through ``/proc/PID/fd/N``; ``name`` (what the
    link reads) only labels it."""
    return {"open": "%s/%d/fd/%d" % (proc, pid, fd), "name": name, "fd": True}


class LogRead:
    """One read of the log (its size, and its tail when ``tail``) in a disposable child.

    ``paths``: the ``--log`` path (``given``), or the candidates found on the server's stdout and
    stderr, of which the first regular file is used. Started at once; :meth:`result` waits at
    most ``timeout_s``."""

    def __init__(self, paths: List[Any], given: bool, tail: bool, max_bytes: int = 256 * 1024,
                 max_lines: int = 400, as_ids: Optional[Any] = None) -> None:
        import sys

        self.started = time.monotonic()
        req = {"paths": [log_entry(p) for p in paths], "given": given, "tail": tail,
               "max_bytes": max_bytes, "max_lines": max_lines, "max_line": MAX_LINE_CHARS,
               "not_a_log": list(_NOT_A_LOG), "as_ids": list(as_ids) if as_ids else None}
        self.error = None  # type: Optional[str]
        self.proc = None  # type: Any
        python = sys.executable
        if not python:
            self.error = "no interpreter to read the log with (sys.executable is empty)"
            return
        try:
            self.proc = subprocess.Popen(
                [python, "-S", "-I", "-c", _LOG_CHILD, json_dumps(req)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                close_fds=True, start_new_session=True)
        except OSError as exc:
            self.error = "could not start the log reader: %s" % exc

    def result(self, timeout_s: float) -> Dict[str, Any]:
        """``{"path", "size", "mtime", "tail", "skipped", "error"}``, or ``{"timeout": True}``."""
        if self.proc is None:
            return {"error": self.error or "log reader not started", "skipped": []}
        try:
            out, _ = self.proc.communicate(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            try:
                self.proc.kill()
            except OSError:
                pass
            for stream in (self.proc.stdout,):
                try:
                    stream.close()
                except Exception:
                    pass
            _abandoned.append(self.proc)
            return {"timeout": True, "skipped": [],
                    "waited_s": round(time.monotonic() - self.started, 3)}
        try:
            import json

            doc = json.loads(out.decode("utf-8", "replace"))
        except ValueError:
            return {"error": "the log reader failed (exit %s)" % self.proc.returncode,
                    "skipped": []}
        return doc if isinstance(doc, dict) else {"error": "the log reader failed", "skipped": []}


def json_dumps(value: Any) -> str:
    import json

    return json.dumps(value)


def open_regular(path: str) -> Tuple[int, os.stat_result]:
    """Open without blocking (a FIFO swapped in for the log must not hang the probe) and
    insist on a regular file."""
    import stat as stat_mod

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    st = os.fstat(fd)
    if not stat_mod.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError("%s is not a regular file; not read" % path)
    return fd, st


def read_tail(path: str, max_bytes: int = 256 * 1024, max_lines: int = 400) -> List[str]:
    fd, st = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = st.st_size
        f.seek(max(0, size - max_bytes))
        data = f.read(max_bytes)
    text = data.decode("utf-8", "replace").replace("\x00", "")
    lines = text.splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # first line is cut
    return lines[-max_lines:]
