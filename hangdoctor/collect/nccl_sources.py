"""What NCCL and PyTorch already keep about a job: the loaded NCCL, its RAS answer, Flight Recorder dumps.

Runs in the probe, on the target host (stdlib only, Python 3.8+). Three read-only sources:

- **The loaded NCCL.** ``/proc/PID/maps`` names the ``libnccl`` a process mapped; its version
  comes from the file name (``libnccl.so.2.18.3``, system installs) or from the pip wheel's
  ``nvidia_nccl_cu*-X.Y.Z.dist-info`` beside it (``nvidia/nccl/lib/libnccl.so.2``).
- **NCCL RAS** (libnccl >= 2.24, on unless ``NCCL_RAS_ENABLE=0``): a plain-text service on
  ``NCCL_RAS_ADDR`` (default ``localhost:28028``) that answers for every communicator of the job.
  Exactly the client protocol is sent: ``CLIENT PROTOCOL 2``, ``SET FORMAT json`` (>= 2.28.7; an
  older server does not answer OK and the text table is kept), ``STATUS``; the server closes the
  connection after its answer (measured on NCCL 2.28.9). Nothing else is ever sent to NCCL.
- **Flight Recorder dumps** that a watchdog already wrote (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``):
  ``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank, or the defaults
  (``$XDG_CACHE_HOME`` or ``~/.cache``, ``/torch/``; ``/tmp/nccl_trace_rank_``). A dump is a
  pickle of plain dicts and lists: it is read with an unpickler that refuses every global, so
  a hostile file cannot run code; or JSON (``_dump_nccl_trace_json``). Files are read through
  ``/proc/PID/root`` so a containerised rank's dumps are found too. Only a summary travels.

Writing to the on-demand pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``) asks the target to dump:
that is done only when the user passed ``--fr-dump`` (``request_fr_dump``), and said in the report.

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import socket
import time

from hangdoctor import redact
from hangdoctor.collect import target_fs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

RAS_DEFAULT_PORT = 28028
FS_TIMEOUT_S = 2.0  # for the target's paths (a mapped library, dump folders): target_fs
RAS_CAP_BYTES = 4 << 20  # a 1000-rank job's STATUS is ~1 MB of JSON
FR_CAP_BYTES = 64 << 20
FR_KEEP_ENTRIES = 12  # per process group: the last ones tell where each rank is
_LIB_RE = re.compile(r"(/\S*libnccl[^/\s]*\.so[^/\s]*)$")
_SO_VERSION_RE = re.compile(r"libnccl[^/]*\.so\.(\d+\.\d+\.\d+)")
_DIST_RE = re.compile(r"^nvidia_nccl(?:_cu\d+)?-(\d+\.\d+\.\d+)[^/]*\.dist-info$")
_RANK_FILE_RE = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")


# ---------------------------------------------------------------- the loaded NCCL


def nccl_libraries(maps_text: str) -> List[str]:
    """Paths of the libnccl files mapped, from the text of /proc/PID/maps."""
    seen = []  # type: List[str]
    for line in maps_text.splitlines():
        if "libnccl" not in line:
            continue
        m = _LIB_RE.search(line.strip())
        if m and m.group(1) not in seen and "libnccl-net" not in m.group(1):
            seen.append(m.group(1))
    return seen


def nccl_version(path: str, root: str = "") -> Tuple[Optional[str], Optional[str]]:
    """(version, how it was found) of a libnccl path; ``root`` prefixes file access
    (``/proc/PID/root`` for a process in another mount namespace)."""
    m = _SO_VERSION_RE.search(os.path.basename(path))
    if m:
        return m.group(1), "file name"
    # .../site-packages/nvidia/nccl/lib/libnccl.so.2 -> .../site-packages/nvidia_nccl_cu12-X.dist-info
    dirs = []
    d = os.path.dirname(path)
    for _ in range(4):
        d = os.path.dirname(d)
        dirs.append(d)
    # the path is the target's (a mapped library on a wedged mount): touched only by a child
    answers = target_fs.run([{"op": "realpath", "path": root + path}]
                            + [{"op": "listdir", "path": root + d} for d in dirs], FS_TIMEOUT_S)
    real = answers[0].get("real")
    if real:
        m = _SO_VERSION_RE.search(os.path.basename(real))
        if m:
            return m.group(1), "file name"
    for ans in answers[1:]:
        for name in ans.get("names") or []:
            dm = _DIST_RE.match(name)
            if dm:
                return dm.group(1), "pip wheel %s" % name
    return None, None


# ---------------------------------------------------------------- RAS


def local_addresses(net: str = "/proc/net") -> List[str]:
    """The IPv4 and IPv6 addresses of the network namespace whose ``/proc/.../net`` is ``net``
    (the host's, or a target's own: ``/proc/PID/net``), loopback included."""
    out = ["127.0.0.1", "::1"]
    try:
        with open(net + "/fib_trie", "rb") as f:
            lines = f.read(4 << 20).decode("ascii", "replace").splitlines()
    except OSError:
        lines = []
    for prev, line in zip(lines, lines[1:]):
        # "|-- 10.0.0.5" followed by "/32 host LOCAL": one of the namespace's own addresses
        if "/32 host LOCAL" in line:
            addr = prev.strip().lstrip("|-+ ").strip()
            if addr and addr not in out:
                out.append(addr)
    try:
        with open(net + "/if_inet6", "rb") as f:
            for row in f.read(1 << 20).decode("ascii", "replace").splitlines():
                h = row.split()[0] if row.split() else ""
                if len(h) == 32:
                    addr = ":".join(h[i:i + 4] for i in range(0, 32, 4))
                    try:
                        addr = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, addr))
                    except (OSError, ValueError):
                        continue
                    if addr not in out:
                        out.append(addr)
    except OSError:
        pass
    return out


def ras_address(env: Dict[str, str], nccl_loaded: bool,
                own: Optional[List[str]] = None) -> Optional[Tuple[str, int]]:
    """Where this process's RAS listens, or None (NCCL not loaded, RAS disabled, bad address).

    Only loopback or one of the target's own addresses (``own``, from its network namespace) is
    ever connected to: an ``NCCL_RAS_ADDR`` naming another host would make the probe a client
    of whatever the target points it at."""
    if not nccl_loaded or env.get("NCCL_RAS_ENABLE", "").strip() == "0":
        return None
    addr = env.get("NCCL_RAS_ADDR", "").strip()
    if not addr:
        return ("127.0.0.1", RAS_DEFAULT_PORT)
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = addr, str(RAS_DEFAULT_PORT)
    host = host.strip("[]") or "127.0.0.1"
    if host in ("localhost", "0.0.0.0"):
        host = "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if host.startswith("127.") or host == "::1":
        return (host, int(port))
    allowed = own if own is not None else local_addresses()
    if host not in allowed:
        return None
    return (host, int(port))


def query_ras(host: str, port: int, timeout_s: float = 2.0, cap_bytes: int = RAS_CAP_BYTES) -> Dict[str, Any]:
    """One read-only RAS exchange; never raises. The whole exchange has ``timeout_s``."""
    t0 = time.monotonic()
    deadline = t0 + max(0.1, timeout_s)
    out = {"addr": "%s:%d" % (host, port), "ok": False}  # type: Dict[str, Any]
    sock = None
    try:
        sock = socket.create_connection((host, port), timeout=max(0.05, deadline - time.monotonic()))
        reader = _LineReader(sock, deadline, cap_bytes)
        sock.sendall(b"CLIENT PROTOCOL 2\n")
        hello = reader.line()
        if not hello.startswith("SERVER PROTOCOL"):
            out["error"] = "not an NCCL RAS server (answered %r)" % hello[:60]
            return out
        out["server_protocol"] = hello.split()[-1] if hello.split() else ""
        sock.sendall(b"SET FORMAT json\n")
        fmt = reader.line()
        json_ok = fmt.strip() == "OK"
        if not json_ok:
            # an older RAS (< 2.28.7) answers with an error line and keeps the connection
            out["format_note"] = "SET FORMAT json refused: %r" % fmt[:80]
        sock.sendall(b"STATUS\n")
        body = reader.rest()
        out["truncated"] = reader.truncated
        if json_ok:
            try:
                out["status"] = json.loads(body)
                out["format"] = "json"
                out["ok"] = True
            except ValueError as exc:
                out["error"] = "STATUS was not JSON: %s" % exc
                out["text"] = body[:65536]
        else:
            out["format"] = "text"
            out["text"] = body[:262144]
            out["ok"] = bool(body.strip())
    except socket.timeout:
        out["error"] = "RAS did not answer within %.1f s" % timeout_s
    except OSError as exc:
        out["error"] = "RAS not reachable: %s" % (exc.strerror or exc)
    finally:
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        out["duration_s"] = round(time.monotonic() - t0, 4)
    # the answer is the target's text: redacted before it is kept, like every other source
    return redact.redact_obj(out)


class _LineReader:
    def __init__(self, sock: socket.socket, deadline: float, cap: int) -> None:
        self.sock, self.deadline, self.cap = sock, deadline, cap
        self.buf = b""
        self.total = 0
        self.closed = False
        self.truncated = False

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        self.sock.settimeout(left)
        chunk = self.sock.recv(65536)
        if not chunk:
            self.closed = True
            return False
        self.total += len(chunk)
        if self.total > self.cap:
            self.truncated = True
            keep = max(0, len(chunk) - (self.total - self.cap))
            self.buf += chunk[:keep]
            self.closed = True
            return False
        self.buf += chunk
        return True

    def line(self) -> str:
        while b"\n" not in self.buf and not self.closed:
            if not self._fill():
                break
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("utf-8", "replace").strip()

    def rest(self) -> str:
        """Everything until the server closes (its answer ends that way), the cap or the deadline."""
        try:
            while not self.closed and self._fill():
                pass
        except socket.timeout:
            if not self.buf:
                raise
        return self.buf.decode("utf-8", "replace")


def summarize_ras(doc: Dict[str, Any]) -> Dict[str, Any]:
    """The parts of a RAS STATUS document the checks use (it can be large: one row per rank)."""
    comms = []
    for c in doc.get("communicators") or []:
        if not isinstance(c, dict):
            continue
        ranks = []
        for r in (c.get("ranks") or [])[:1024]:
            if not isinstance(r, dict):
                continue
            st = r.get("status") if isinstance(r.get("status"), dict) else {}
            counts = r.get("collective_counts") if isinstance(r.get("collective_counts"), dict) else {}
            ranks.append({"rank": r.get("rank"), "host": r.get("host"), "pid": r.get("pid"),
                          "cuda_dev": r.get("cuda_dev"), "nvml_dev": r.get("nvml_dev"),
                          "status": st, "collective_counts": counts})
        missing = []
        for m in (c.get("missing_ranks") or [])[:1024]:
            if isinstance(m, dict):
                missing.append({k: m.get(k) for k in ("rank", "host", "pid", "cuda_dev", "nvml_dev")
                                if k in m})
            else:
                missing.append({"rank": m})
        comms.append({"hash": c.get("hash"), "size": c.get("size"),
                      "ranks_count": c.get("ranks_count"),
                      "missing_ranks_count": c.get("missing_ranks_count"),
                      "ranks": ranks, "missing_ranks": missing})
    ras = doc.get("ras") if isinstance(doc.get("ras"), dict) else {}
    return {"nccl_version": doc.get("nccl_version"),
            "cuda_runtime_version": doc.get("cuda_runtime_version"),
            "cuda_driver_version": doc.get("cuda_driver_version"),
            "timestamp": doc.get("timestamp"),
            "communicators": comms,
            "timeouts_count": ras.get("timeouts_count"),
            "collection_time_sec": ras.get("collection_time_sec")}


# ---------------------------------------------------------------- Flight Recorder


class _NoGlobals(pickle.Unpickler):
    """Plain containers and scalars only: any class or function in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError("refused global %s.%s" % (module, name))


def load_fr(data: bytes) -> Dict[str, Any]:
    """Decode one Flight Recorder dump (pickle or JSON). Raises ValueError when it is neither."""
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            doc = json.loads(data.decode("utf-8", "replace"))
        except ValueError as exc:
            raise ValueError("not a Flight Recorder dump (bad JSON: %s)" % exc) from None
    else:
        try:
            doc = _NoGlobals(io.BytesIO(data)).load()
        except Exception as exc:
            raise ValueError("not a Flight Recorder dump (%s)" % exc) from None
    if not isinstance(doc, dict) or "entries" not in doc:
        raise ValueError("not a Flight Recorder dump (no entries)")
    return doc


def _user_frame(frames: Any) -> Optional[str]:
    """The first frame outside torch.distributed: the caller's line that issued the collective."""
    if not isinstance(frames, list):
        return None
    for f in frames:
        if not isinstance(f, dict):
            continue
        fn = str(f.get("filename") or "")
        if "/torch/distributed/" in fn or "/torch/nn/parallel/" in fn:
            continue
        return "%s (%s:%s)" % (f.get("name"), fn, f.get("line"))
    return None


def summarize_fr(doc: Dict[str, Any], keep: int = FR_KEEP_ENTRIES) -> Dict[str, Any]:
    """Per process group: its ranks, the status counters and the last ``keep`` entries."""
    entries = [e for e in (doc.get("entries") or []) if isinstance(e, dict)]
    groups = {}  # type: Dict[str, Dict[str, Any]]
    pg_config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
    pg_status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    for e in entries:
        pg = e.get("process_group")
        name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id"))
        desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
        g = groups.setdefault(name, {"pg": name, "desc": desc, "entries": [], "states": {}})
        st = str(e.get("state"))
        g["states"][st] = g["states"].get(st, 0) + 1
        g["entries"].append({
            "record_id": e.get("record_id"),
            "collective_seq_id": e.get("collective_seq_id"),
            "p2p_seq_id": e.get("p2p_seq_id"),
            "is_p2p": e.get("is_p2p"),
            "op": e.get("profiling_name"),
            "state": st,
            "input_sizes": (e.get("input_sizes") or [])[:4],
            "input_dtypes": (e.get("input_dtypes") or [])[:4],
            "time_created_ns": e.get("time_created_ns"),
            "timeout_ms": e.get("timeout_ms"),
            "duration_ms": e.get("duration_ms"),
            "thread_name": e.get("thread_name"),
            "caller": _user_frame(e.get("frames")),
        })
    for name, g in groups.items():
        g["entries"] = g["entries"][-keep:]
        cfg = pg_config.get(name) if isinstance(pg_config.get(name), dict) else {}
        g["ranks"] = cfg.get("ranks")
        g["desc"] = g["desc"] or cfg.get("desc", "")
        st = pg_status.get(name) if isinstance(pg_status.get(name), dict) else {}
        g["status"] = {k: st.get(k) for k in ("last_enqueued_collective", "last_started_collective",
                                               "last_completed_collective") if k in st}
    return {"version": doc.get("version"), "comm_lib_version": doc.get("comm_lib_version"),
            "entries_total": len(entries), "groups": sorted(groups.values(), key=lambda g: g["pg"])}


def fr_prefixes(env: Dict[str, str]) -> List[str]:
    """Where this process's watchdog writes its dumps (path prefixes; the rank is appended)."""
    out = []  # type: List[str]
    for key in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        v = env.get(key, "").strip()
        if v and v not in out:
            out.append(v)
    cache = env.get("XDG_CACHE_HOME", "").strip() or (
        os.path.join(env["HOME"], ".cache") if env.get("HOME") else "")
    if cache:
        out.append(os.path.join(cache, "torch", "nccl_trace_rank_"))
    out.append("/tmp/nccl_trace_rank_")
    return out


def find_fr_dumps(prefixes: List[str], root: str = "", limit: int = 64,
                  as_ids: Optional[Any] = None) -> List[str]:
    """Existing dump files (paths as the target sees them) under the given prefixes.

    The folders are the target's (its environment names them): listed by a disposable child
    (target_fs) with the target's own rights."""
    found = []  # type: List[str]
    split = [os.path.split(prefix) for prefix in prefixes]
    answers = target_fs.run([{"op": "listdir", "path": root + (d or "/")} for d, _b in split],
                            FS_TIMEOUT_S, as_ids)
    for (d, base), ans in zip(split, answers):
        names = ans.get("names")
        if names is None:
            continue
        for name in names:
            if name.startswith(base) and _RANK_FILE_RE.search(name[len(base):] or "x"):
                path = os.path.join(d, name)
                if path not in found:
                    found.append(path)
            if len(found) >= limit:
                return found
    return found


def read_fr_dump(path: str, root: str = "", cap_bytes: int = FR_CAP_BYTES,
                 as_ids: Optional[Any] = None) -> Dict[str, Any]:
    """Summary of one dump file, or its error; never raises. Read by a disposable child with
    the target's own rights (target_fs): the file is where the target's environment says."""
    out = {"path": path}  # type: Dict[str, Any]
    m = _RANK_FILE_RE.search(path)
    out["rank"] = int(m.group(1)) if m else None
    ans = target_fs.run([{"op": "read", "path": root + path, "max_bytes": cap_bytes + 1,
                          "nofollow": True}], FS_TIMEOUT_S + 2.0, as_ids)[0]
    if ans.get("timeout"):
        out["error"] = "no answer within %.0f s (a hung mount?): not read" % (FS_TIMEOUT_S + 2.0)
        return out
    if "data" not in ans:
        err = ans.get("error") or "no answer"
        out["error"] = err if err == "not a regular file" else "unreadable: %s" % err
        return out
    out["size_bytes"] = ans["size"]
    out["mtime"] = round(ans["mtime"], 3)
    out["_key"] = (ans.get("dev"), ans.get("ino"))
    if ans["size"] > cap_bytes or len(ans["data"]) > cap_bytes:
        out["error"] = "larger than %d MiB: not read" % (cap_bytes >> 20)
        return out
    data = ans["data"]
    try:
        out["summary"] = summarize_fr(load_fr(data))
    except ValueError as exc:
        out["error"] = str(exc)
    except RecursionError:
        out["error"] = "not a Flight Recorder dump (nested too deep)"
    return out


def request_fr_dump(env: Dict[str, str], rank: Optional[int], root: str = "",
                    owner_uid: Optional[int] = None) -> Dict[str, Any]:
    """Opt-in (``--fr-dump``): ask a rank to dump through its on-demand pipe. Never blocks.

    The path comes from the target's environment, so it is written to only when it is a FIFO
    (checked before opening, since opening a device for writing can act on it, and again on the
    open descriptor) owned by the target's uid (``owner_uid``): a FIFO the target created."""
    import stat as _stat

    base = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "").strip()
    if not base:
        return {"ok": False, "error": "TORCH_NCCL_DEBUG_INFO_PIPE_FILE not set at launch"}
    path = "%s%d.pipe" % (base, rank if rank is not None else 0)

    def refuse(st: Any) -> Optional[str]:
        if not _stat.S_ISFIFO(st.st_mode):
            return "not a FIFO; not written to"
        if owner_uid is not None and st.st_uid != owner_uid:
            return "a FIFO of uid %d, not the target's (uid %d); not written to" % (
                st.st_uid, owner_uid)
        return None

    try:
        why = refuse(os.lstat(root + path))
    except OSError as exc:
        return {"ok": False, "pipe": path, "error": "pipe not found: %s" % (exc.strerror or exc)}
    if why:
        return {"ok": False, "pipe": path, "error": why}
    try:
        fd = os.open(root + path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        return {"ok": False, "pipe": path, "error": "pipe not open for reading: %s" % (exc.strerror or exc)}
    try:
        why = refuse(os.fstat(fd))
        if why:  # swapped between the check and the open
            return {"ok": False, "pipe": path, "error": why}
        os.write(fd, b"1\n")
    except OSError as exc:
        return {"ok": False, "pipe": path, "error": str(exc.strerror or exc)}
    finally:
        os.close(fd)
    return {"ok": True, "pipe": path}


# ---------------------------------------------------------------- per process


def process_facts(pid: int, proc: str = "/proc") -> Dict[str, Any]:
    """NCCL facts of one process: the libraries mapped, their versions, RAS address, FR prefixes."""
    facts = {"pid": pid}  # type: Dict[str, Any]
    try:
        with open("%s/%d/maps" % (proc, pid), "rb") as f:
            maps = f.read(8 << 20).decode("utf-8", "replace")
    except OSError:
        return facts
    libs = nccl_libraries(maps)
    root = "%s/%d/root" % (proc, pid)
    if not os.path.isdir(root):
        root = ""
    facts["libraries"] = []
    for lib in libs:
        ver, how = nccl_version(lib, root)
        facts["libraries"].append({"path": lib, "version": ver, "version_source": how})
    try:
        with open("%s/%d/environ" % (proc, pid), "rb") as f:
            raw = f.read(1 << 20)
        env = {}
        for item in raw.split(b"\0"):
            k, sep, v = item.partition(b"=")
            if sep:
                env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    except OSError:
        env = {}
    net = "%s/%d/net" % (proc, pid)
    facts["ras_addr"] = ras_address(env, bool(libs),
                                    local_addresses(net) if os.path.isdir(net) else None)
    facts["ras_disabled"] = bool(libs) and env.get("NCCL_RAS_ENABLE", "").strip() == "0"
    facts["fr_prefixes"] = fr_prefixes(env) if (libs or any(k.startswith("TORCH_FR") or k.startswith("TORCH_NCCL")
                                                            for k in env)) else []
    facts["_env"] = env  # kept in memory for --fr-dump only; dropped before the snapshot
    facts["_root"] = root
    return facts


# ---------------------------------------------------------------- the probe's use


class NcclCollector:
    """Reads the NCCL facts of the diagnosed processes at the window's start and end.

    ``start()`` and ``finish()`` run on the probe's pool. RAS is queried once per address (one
    RAS answers for the whole job) at both edges of the window: collective counts that do not
    move, and ranks reported missing, are what the checks read.
    """

    def __init__(self, pids: List[int], proc: str, ras: bool, fr_dump: bool, timeout_s: float) -> None:
        self.pids, self.proc, self.ras, self.fr_dump = pids, proc, ras, fr_dump
        self.timeout_s = timeout_s
        self.facts = []  # type: List[Dict[str, Any]]
        self.addrs = []  # type: List[Tuple[str, int]]
        self.samples = []  # type: List[Dict[str, Any]]
        self.fr_requests = []  # type: List[Dict[str, Any]]
        self.t0 = time.monotonic()

    def start(self) -> None:
        for pid in self.pids:
            f = process_facts(pid, self.proc)
            if f.get("libraries") or f.get("fr_prefixes"):
                self.facts.append(f)
        for f in self.facts:
            a = f.get("ras_addr")
            if a and a not in self.addrs:
                self.addrs.append(a)
        if self.ras:
            self._sample()
        if self.fr_dump:
            for f in self.facts:
                if f.get("libraries"):
                    rank = _rank_from_env(f.get("_env") or {})
                    ids = target_fs.ids_of(f["pid"], self.proc)
                    req = request_fr_dump(f.get("_env") or {}, rank, f.get("_root") or "",
                                          ids[0] if ids else -1)
                    req["pid"] = f["pid"]
                    self.fr_requests.append(req)

    def _sample(self) -> None:
        for host, port in self.addrs[:4]:
            res = query_ras(host, port, self.timeout_s)
            res["t_s"] = round(time.monotonic() - self.t0, 3)
            if res.get("format") == "json" and isinstance(res.get("status"), dict):
                res["status"] = summarize_ras(res["status"])
            self.samples.append(res)

    def finish(self) -> Dict[str, Any]:
        if self.ras and self.addrs:
            self._sample()
        dumps = []  # type: List[Dict[str, Any]]
        seen = set()
        for f in self.facts:
            root = f.get("_root") or ""
            ids = target_fs.ids_of(f["pid"], self.proc)
            for path in find_fr_dumps(f.get("fr_prefixes") or [], root, as_ids=ids):
                d = read_fr_dump(path, root, as_ids=ids)
                key = d.pop("_key", None) or (root, path)
                if key in seen:  # one file seen through several ranks' roots
                    continue
                seen.add(key)
                d["found_via_pid"] = f["pid"]
                dumps.append(d)
        procs = []
        for f in self.facts:
            procs.append({"pid": f["pid"], "libraries": f.get("libraries") or [],
                          "ras_addr": "%s:%d" % f["ras_addr"] if f.get("ras_addr") else None,
                          "ras_disabled": f.get("ras_disabled", False)})
        return {"processes": procs, "ras": self.samples, "ras_queried": bool(self.ras and self.addrs),
                "flight_recorder": dumps, "fr_requests": self.fr_requests}


def _rank_from_env(env: Dict[str, str]) -> Optional[int]:
    for key in ("RANK", "LOCAL_RANK"):
        v = env.get(key, "").strip()
        if v.isdigit():
            return int(v)
    return None
