"""One cheap look at a serving process, for ``hangdoctor probe`` and the progress watch.

No ptrace, no py-spy, nothing that stops the server: one ``GET`` of the health path and one of
``/metrics`` (read-only, as the snapshot's own probes), the client connections established on
the API port (``/proc/net/tcp``), and, when pids are given, each process's state and CPU time
from ``/proc/PID/stat``, and the growth of a log file. Every read has a time budget; a part
that cannot be read is recorded as such, never raised.

Our own requests are not counted as work: they are closed before ``/proc/net/tcp`` is read.
Log lines that only record a health or metrics request (ours, a load balancer's) are not
counted as log growth either.

Stdlib only, Python 3.8 compatible, like the rest of collect.

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import os
import re
import time

from hangdoctor.collect import http_exchange, metrics

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence

HEALTH_MAX_BYTES = 4096
LOG_READ_MAX_BYTES = 256 << 10  # a log that grew more than this since the last look grew
MAX_PROCESSES = 64
_ESTABLISHED = "01"
# access-log lines of requests that are no work: health checks, scrapes, readiness
_PROBE_LINE = re.compile(r'"?(GET|HEAD) /(health\w*|metrics|ping|ready\w*|live\w*|v1/models)\b')
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def connect_host(ip: str) -> str:
    """The address to connect to for a server bound to ``ip``."""
    return "127.0.0.1" if ip in ("", "0.0.0.0", "::", "localhost") else ip


def health(host: str, port: int, path: str, timeout_s: float) -> Dict[str, Any]:
    """``GET path`` -> {"path", "code", "latency_s", "error", "connected"}."""
    t0 = time.monotonic()
    data, err, connected = http_exchange.exchange(
        host, port, http_exchange.request("GET", path, host), timeout_s, HEALTH_MAX_BYTES)
    out = {"path": path, "code": None, "latency_s": round(time.monotonic() - t0, 4),
           "error": err, "connected": connected}  # type: Dict[str, Any]
    if err is None:
        code, _head, _body = http_exchange.status(data)
        out["code"] = code
        if code is None:
            out["error"] = "not an HTTP answer"
    return out


def client_connections(port: int, proc_root: str = "/proc") -> Optional[int]:
    """Connections ESTABLISHED to local ``port`` (the server's side of each client), from
    ``/proc/net/tcp`` and ``tcp6`` of this network namespace; None when neither is readable."""
    want = ":%04X" % port
    count, readable = 0, False
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc_root, "net", name)) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _ESTABLISHED and fields[1].endswith(want):
                count += 1
    return count if readable else None


def _children(pid: int, proc_root: str) -> List[int]:
    out = []  # type: List[int]
    try:
        tids = os.listdir(os.path.join(proc_root, str(pid), "task"))
    except OSError:
        return out
    for tid in tids:
        try:
            with open(os.path.join(proc_root, str(pid), "task", tid, "children")) as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def process_state(pid: int, proc_root: str = "/proc") -> Dict[str, Any]:
    """{"pid", "alive", "state", "name", "cpu_s"} from ``/proc/PID/stat`` (a zombie is not
    alive)."""
    out = {"pid": pid, "alive": False, "state": None, "name": None, "cpu_s": None}  # type: Dict[str, Any]
    try:
        with open(os.path.join(proc_root, str(pid), "stat")) as f:
            text = f.read()
    except OSError:
        return out
    name = text[text.find("(") + 1 : text.rfind(")")]
    rest = text[text.rfind(")") + 2 :].split()
    try:
        out["state"] = rest[0]
        out["cpu_s"] = round((int(rest[11]) + int(rest[12])) / float(_CLK_TCK), 2)
    except (IndexError, ValueError):
        pass
    out["name"] = name
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as f:
            title = f.read().split(b"\0")[0].decode("utf-8", "replace")
        if title.startswith(("VLLM::", "sglang::")):  # a set process title names the rank
            out["name"] = title
    except OSError:
        pass
    out["alive"] = out["state"] not in (None, "Z", "X")
    return out


def processes(pids: Sequence[int], proc_root: str = "/proc") -> List[Dict[str, Any]]:
    """The given processes and their descendants (a rank started later is found on the next
    look), each :func:`process_state`; at most :data:`MAX_PROCESSES`."""
    seen = []  # type: List[int]
    todo = list(pids)
    while todo and len(seen) < MAX_PROCESSES:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(_children(pid, proc_root))
    return [process_state(p, proc_root) for p in seen]


def log_growth(path: str, offset: Optional[int]) -> Dict[str, Any]:
    """{"path", "size", "work_lines", "error"}: lines written since ``offset`` that are not
    health checks or scrapes (None on the first look, or when the file was rotated)."""
    out = {"path": path, "size": None, "work_lines": None, "error": None}  # type: Dict[str, Any]
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            out["size"] = size
            if offset is None or offset > size:
                return out
            start = max(offset, size - LOG_READ_MAX_BYTES)
            f.seek(start)
            text = f.read(size - start).decode("utf-8", "replace")
    except OSError as exc:
        out["error"] = "%s: %s" % (path, exc.strerror or exc)
        return out
    out["work_lines"] = sum(1 for line in text.splitlines() if line.strip() and not _PROBE_LINE.search(line))
    return out


def sample(
    port: int,
    ip: str = "127.0.0.1",
    health_path: str = "/health",
    timeout_s: float = 2.0,
    pids: Sequence[int] = (),
    log_path: Optional[str] = None,
    log_offset: Optional[int] = None,
    read_metrics: bool = True,
    proc_root: str = "/proc",
) -> Dict[str, Any]:
    """One look: health, metrics, connections, processes, log; see the module's docstring."""
    host = connect_host(ip)
    t0 = time.monotonic()
    out = {"at": time.time(), "port": port, "host": host}  # type: Dict[str, Any]
    # the two exchanges side by side: a busy server answers each late, and the caller (a
    # kubelet's exec probe) waits for the slower one, not for their sum
    got = {}  # type: Dict[str, Any]

    def read_metrics_now() -> None:
        m = metrics.fetch(port, host, timeout_s)
        got["metrics"] = {k: m.get(k) for k in ("ok", "code", "values", "error", "latency_s")}

    worker = None
    if read_metrics:
        import threading

        worker = threading.Thread(target=read_metrics_now, name="hd-metrics", daemon=True)
        worker.start()
    out["health"] = health(host, port, health_path, timeout_s) if health_path else None
    if worker is not None:
        worker.join(timeout_s + 1.0)  # fetch() keeps its own budget; this is a backstop
    out["metrics"] = got.get("metrics")
    out["connections"] = client_connections(port, proc_root)
    out["processes"] = processes(pids, proc_root) if pids else []
    out["log"] = log_growth(log_path, log_offset) if log_path else None
    out["took_s"] = round(time.monotonic() - t0, 4)
    return out
