"""The probe's other sources: HTTP probes of the server's API ports, the kernel log, and
reading a log file's tail without ever blocking.

Stdlib only, Python 3.8 compatible (ships with the probe).
"""

from __future__ import annotations

import os
import re
import subprocess
import time

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
    import socket  # here: most hung servers never opened their port, and the probe starts sooner

    host = "127.0.0.1" if ip in ("0.0.0.0", "::", "127.0.0.1") else ip
    if ip == "::":
        host = "127.0.0.1"
    result = {"port": port, "url": None, "ok": False, "code": None, "latency_s": None,
              "error": None, "body": None}  # type: Dict[str, Any]
    for path in ("/health", "/v1/models", "/"):
        url = "http://%s:%d%s" % (host if ":" not in host else "[%s]" % host, port, path)
        result["url"] = url
        t0 = time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            result["error"] = "connect failed: %s" % exc
            result["latency_s"] = round(time.monotonic() - t0, 4)
            return result
        try:
            sock.settimeout(timeout_s)
            req = "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: hangdoctor\r\n\r\n" % (path, host)
            sock.sendall(req.encode())
            data = b""
            while len(data) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data and len(data) > 512:
                    break
        except socket.timeout:
            result["error"] = "no answer within %.1f s" % timeout_s
            result["latency_s"] = round(time.monotonic() - t0, 4)
            return result
        except OSError as exc:
            result["error"] = "request failed: %s" % exc
            result["latency_s"] = round(time.monotonic() - t0, 4)
            return result
        finally:
            sock.close()
        result["latency_s"] = round(time.monotonic() - t0, 4)
        head, _, body = data.partition(b"\r\n\r\n")
        first = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        m = re.match(r"HTTP/\d(?:\.\d)?\s+(\d{3})", first)
        if not m:
            result["error"] = "not an HTTP answer: %r" % first[:60]
            return result
        result["code"] = int(m.group(1))
        result["body"] = body[:200].decode("utf-8", "replace")
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
