"""Typed view of an inference server's log: vLLM, SGLang, TGI, NCCL and torch.distributed lines.

Used for the live log tail (``snapshot["log"]["tail"]``) and for pasted logs alike. Each
recognised line becomes a :class:`LogEvent` of one *kind*; unrecognised lines are kept as text
only. One line may give several events (an ``ERROR`` line that is also a CUDA OOM).

Samples of the shapes recognised (one per kind)::

    Loading safetensors checkpoint shards:  97% Completed | 62/64 [00:31<00:01,  2.01it/s]
    (VllmWorker rank=1 pid=456) INFO 01-01 10:00:00 [default_loader.py:262] Loading weights took 12.30 seconds
    INFO 01-01 10:01:00 [backends.py:215] Compiling a graph for dynamic shape takes 25.10 s
    Capturing CUDA graph shapes:  45%|████▌     | 30/67 [00:05<00:06,  5.80it/s]
    INFO:     Application startup complete.
    [2025-01-01 10:00:00 TP1] Decode batch. #running-req: 3, #token: 512, gen throughput (token/s): 80.1
    gpu-node-3:46295:46295 [0] NCCL INFO comm 0x5581 rank 0 nranks 4 cudaDev 0 busId 19000 - Init COMPLETE
    [rank1]:[E1201 10:10:00.1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=123, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600005 milliseconds before timing out.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

# --- line cleaning ---------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Lines longer than this are cut: a 50 MB single-line paste must not feed the regexes.
MAX_LINE_CHARS = 16384
# Matchers see at most this much of a line (a vLLM config dump line is ~5 KB).
MATCH_CHARS = 4096


def clean_line(raw: str) -> str:
    """Strip the newline, ANSI colours and carriage-return overwrites (keep the last state)."""
    line = raw.rstrip("\n")
    if line.endswith("\r"):
        line = line.rstrip("\r")
    if "\r" in line:
        # tqdm redraws a bar with '\r': the text after the last '\r' is what the terminal shows.
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + f" …[cut {len(line) - MAX_LINE_CHARS} chars]"
    return line


# --- prefixes: who wrote the line --------------------------------------------------------------

# vLLM / Ray: "(VllmWorker rank=1 pid=456) ", "(EngineCore_DP0 pid=12)", "(RayWorkerWrapper pid=7, ip=..)"
_PAREN_PREFIX = re.compile(r"^\((?P<head>[^()]{0,120}?\bpid=(?P<pid>\d+)[^()]{0,80})\)\s?")
# SGLang: "[2025-01-01 10:00:00 TP1] ", "[2025-01-01 10:00:00 DP0 TP3] ", "[... TP0 EP0] "
_SGLANG_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<tags>(?: [A-Z]{2,3}\d+)*)\]\s?"
)
# torch.distributed: "[rank1]:" and torchrun --tee: "[default1]:"
_TORCH_PREFIX = re.compile(r"^\[(?:rank|default)(?P<rank>\d+)\]:\s?")
# Python / vLLM logging header after the process prefix: "ERROR 01-01 10:00:00 [file.py:470] "
_LEVEL_HEADER = re.compile(
    r"^(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"(?: \[[^\]]*\])?\s?"
)
_RANK_IN_HEAD = re.compile(r"(?:\brank=|(?:^|[\s_])TP)(\d+)\b")
_RANK_WORD = re.compile(r"(?:\brank=(\d+)\b|\[Rank (\d+)\]|\bRank (\d+)\]|\[rank(\d+)\])")


@dataclass
class LinePrefix:
    """What a line's prefix says about its writer; ``rest`` is the line without prefixes."""

    rank: Optional[int]
    pid: Optional[int]
    rest: str
    level: Optional[str] = None


def split_prefix(line: str) -> LinePrefix:
    """Peel the process prefixes (vLLM, Ray, SGLang, torch) and a logging header off a line."""
    rank: Optional[int] = None
    pid: Optional[int] = None
    rest = line
    for _ in range(3):  # prefixes stack: "[rank1]:(VllmWorker TP1 pid=4) INFO ..."
        m = _PAREN_PREFIX.match(rest)
        if m:
            pid = int(m.group("pid"))
            r = _RANK_IN_HEAD.search(m.group("head"))
            if r and rank is None:
                rank = int(r.group(1))
            rest = rest[m.end() :]
            continue
        m = _SGLANG_PREFIX.match(rest)
        if m:
            tp = re.search(r"TP(\d+)", m.group("tags"))
            if tp and rank is None:
                rank = int(tp.group(1))
            rest = rest[m.end() :]
            continue
        m = _TORCH_PREFIX.match(rest)
        if m:
            if rank is None:
                rank = int(m.group("rank"))
            rest = rest[m.end() :]
            continue
        break
    level = None
    m = _LEVEL_HEADER.match(rest)
    if m:
        level = m.group("lvl")
        rest = rest[m.end() :]
    return LinePrefix(rank=rank, pid=pid, rest=rest, level=level)


# --- events -----------------------------------------------------------------------------------


@dataclass
class LogEvent:
    """One recognised log line: ``kind`` is one of :data:`EVENT_KINDS`; ``line_no`` is 1-based."""

    kind: str
    line_no: int
    text: str
    rank: Optional[int] = None
    pid: Optional[int] = None
    data: dict = field(default_factory=dict)


EVENT_KINDS = (
    "load-progress",
    "load-done",
    "compile",
    "graph-capture",
    "server-ready",
    "request",
    "nccl-info",
    "nccl-warn",
    "nccl-init",
    "watchdog-timeout",
    "cuda-oom",
    "host-oom",
    "shm-broadcast-wait",
    "shm-no-space",
    "sigbus",
    "shard-exit",
    "waiting-for-shard",
    "sglang-watchdog",
    "traceback",
    "error",
    "rendezvous",
    "lock-wait",
)

# Kinds that say nothing about the server's state on their own: chatty NCCL setup lines.
NOISE_KINDS = frozenset({"nccl-info"})


def _f(x: Optional[str]) -> Optional[float]:
    return float(x) if x is not None else None


def _i(x: Optional[str]) -> Optional[int]:
    return int(x) if x is not None else None


_Matcher = Callable[[str], Optional[dict]]
# (kind, literal words one of which the line must hold, matcher): the words are a cheap filter
# so that a 200 MB log does not run every regex on every line.
_MATCHERS: list[tuple[str, tuple, _Matcher]] = []


def _matcher(kind: str, *words: str) -> Callable[[_Matcher], _Matcher]:
    def deco(fn: _Matcher) -> _Matcher:
        _MATCHERS.append((kind, words, fn))
        return fn

    return deco


_LOAD_BAR = re.compile(
    r"(?P<pct>\d{1,3})%\s*(?:Completed\s*)?\|(?:[^|]{0,200}\|)?\s*(?P<done>\d+)/(?P<total>\d+)"
)


@_matcher("load-progress", "%")
def _load_progress(s: str) -> Optional[dict]:
    if "oad" not in s:
        return None
    m = _LOAD_BAR.search(s)
    if not m:
        return None
    what = s[max(0, m.start() - 100) : m.start()].strip().rstrip(":").strip()
    what = what.rsplit("] ", 1)[-1]
    if "load" not in what.lower():
        return None
    return {
        "pct": int(m.group("pct")),
        "done": int(m.group("done")),
        "total": int(m.group("total")),
        "what": what,
    }


_LOAD_DONE = [
    re.compile(r"Loading weights took (?P<s>[\d.]+) ?s"),
    re.compile(r"Model loading took (?P<gib>[\d.]+) ?GiB(?: memory)? and (?P<s>[\d.]+) ?s"),
    re.compile(r"Load weight end\.(?:.*?avail mem=(?P<avail_gb>[\d.]+) ?GB)?"),
    re.compile(r"Shard ready in (?P<s>[\d.]+) ?s"),
]


@_matcher("load-done", "took", "Load weight end", "Shard ready")
def _load_done(s: str) -> Optional[dict]:
    for pat in _LOAD_DONE:
        m = pat.search(s)
        if m:
            d = m.groupdict()
            out: dict = {}
            if d.get("s"):
                out["seconds"] = _f(d["s"].rstrip("."))
            if d.get("gib"):
                out["mem_gib"] = _f(d["gib"])
            if d.get("avail_gb"):
                out["avail_gb"] = _f(d["avail_gb"])
            return out
    return None


_COMPILE_SECONDS = re.compile(r"(?:takes?|took|time:?)\s+(?P<s>\d+(?:\.\d+)?)\s?s\b")
_COMPILE = re.compile(
    r"torch\.compile|\b[Cc]ompil(?:e|es|ed|ing|ation took)\b|[Aa]utotun|AUTOTUNE|\bJIT\b|"
    r"Dynamo bytecode transform|inductor|[Tt]riton kernel"
)
_COMPILE_NOT = re.compile(r"compilation_config|CUDA used to build|[Cc]ompiled with")


@_matcher("compile", "ompil", "utotun", "AUTOTUNE", "JIT", "Dynamo", "nductor", "riton")
def _compile(s: str) -> Optional[dict]:
    if not _COMPILE.search(s) or _COMPILE_NOT.search(s):
        return None
    m = _COMPILE_SECONDS.search(s)
    return {"seconds": float(m.group("s"))} if m else {}


_CAPTURE_BAR = re.compile(r"Capturing (?:CUDA|cuda) ?graphs?[^:]{0,80}:\s*(?P<pct>\d{1,3})%")
_CAPTURE = re.compile(
    r"(?i)\bcaptur(?:e|ing)\b.{0,40}\b(?:cuda ?graphs?|cudagraphs?)\b|graph capturing finished"
)


@_matcher("graph-capture", "aptur")
def _graph_capture(s: str) -> Optional[dict]:
    m = _CAPTURE_BAR.search(s)
    if m:
        return {"pct": int(m.group("pct"))}
    if _CAPTURE.search(s):
        low = s.lower()
        if "begin" in low or "start" in low:
            return {"phase": "begin"}
        if " end" in low or "finished" in low or "took" in low:
            return {"phase": "end"}
        return {}
    return None


_READY = re.compile(
    r"Application startup complete|Uvicorn running on|The server is fired up and ready to roll|"
    r"(?:^|\s)(?:Connected|Ready)\s*$|Starting HTTP server|Invalid hostname, defaulting"
)


@_matcher("server-ready", "startup complete", "Uvicorn running", "fired up", "Connected", "Ready")
def _server_ready(s: str) -> Optional[dict]:
    m = _READY.search(s)
    if not m or "Invalid hostname" in m.group(0) or "Starting HTTP" in m.group(0):
        return None
    return {}


_ACCESS = re.compile(
    r"\"(?P<method>GET|POST|PUT|DELETE|PATCH) (?P<path>\S+) HTTP/[\d.]+\" (?P<code>\d{3})"
)
_THROUGHPUT = re.compile(
    r"Avg prompt throughput: (?P<p>[\d.]+) tokens/s, Avg generation throughput: (?P<g>[\d.]+) "
    r"tokens/s(?:, Running: (?P<run>\d+) reqs)?(?:, (?:Swapped|Waiting): (?P<wait>\d+) reqs)?"
)
_SGLANG_BATCH = re.compile(r"(?P<phase>Decode|Prefill) batch\..*?#running-req: (?P<run>\d+)")
_REQ_WORDS = re.compile(
    r"\b(?:Added request|Received request|Finished request)\b|router::server.*Success"
)


@_matcher("request", "HTTP/", "throughput", "batch.", "request", "Success")
def _request(s: str) -> Optional[dict]:
    m = _ACCESS.search(s)
    if m:
        return {"method": m.group("method"), "path": m.group("path"), "code": int(m.group("code"))}
    m = _THROUGHPUT.search(s)
    if m:
        d = {"prompt_tps": float(m.group("p")), "gen_tps": float(m.group("g"))}
        if m.group("run") is not None:
            d["running"] = int(m.group("run"))
        if m.group("wait") is not None:
            d["waiting"] = int(m.group("wait"))
        # vLLM keeps logging zero throughput for a while after the last request: not activity.
        d["idle"] = d["prompt_tps"] == 0 and d["gen_tps"] == 0 and not d.get("running")
        return d
    m = _SGLANG_BATCH.search(s)
    if m:
        return {"phase": m.group("phase").lower(), "running": int(m.group("run"))}
    if _REQ_WORDS.search(s):
        return {}
    return None


_NCCL_HOST = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
_NCCL_LEVEL = re.compile(r"\bNCCL (INFO|WARN|TRACE|ERROR)\b")
_NCCL_RANK = re.compile(r"\brank (\d+)\b(?:.*?\bn[Rr]anks (\d+))?")


def _nccl_data(s: str) -> tuple[Optional[str], dict]:
    m = _NCCL_LEVEL.search(s)
    if not m:
        return None, {}
    d: dict = {}
    h = _NCCL_HOST.match(s)
    if h:
        d.update(host=h.group("host"), pid=int(h.group("pid")), dev=int(h.group("dev")))
    r = _NCCL_RANK.search(s, m.end())
    if r:
        d["rank"] = int(r.group(1))
        if r.group(2):
            d["nranks"] = int(r.group(2))
    return m.group(1), d


@_matcher("nccl-info", "NCCL")
def _nccl_info(s: str) -> Optional[dict]:
    lvl, d = _nccl_data(s)
    return d if lvl in ("INFO", "TRACE") else None


@_matcher("nccl-warn", "NCCL")
def _nccl_warn(s: str) -> Optional[dict]:
    lvl, d = _nccl_data(s)
    return d if lvl in ("WARN", "ERROR") else None


_NCCL_INIT_PHASE = re.compile(r"\bInit (START|COMPLETE)\b")
_NCCL_INIT_CALL = re.compile(r"ncclCommInitRank\w*|ncclCommSplit|ncclCommInitAll")


@_matcher("nccl-init", "Init ", "ncclComm")
def _nccl_init(s: str) -> Optional[dict]:
    m = _NCCL_INIT_PHASE.search(s)
    if not m and not _NCCL_INIT_CALL.search(s):
        return None
    if "NCCL" not in s and "nccl" not in s:
        return None
    _, d = _nccl_data(s)
    d["phase"] = m.group(1).lower() if m else "call"
    return d


_WD_TRIGGER = re.compile(
    r"Watchdog caught collective operation timeout|last enqueued NCCL work|Timeout at NCCL work|"
    r"watchdog got stuck for|detected by watchdog|last enqueued work:"
)
_WD_FIELDS = {
    "seqnum": (re.compile(r"SeqNum=(\d+)"), int),
    "optype": (re.compile(r"OpType=(\w+)"), str),
    "numel": (re.compile(r"NumelIn=(\d+)"), int),
    "timeout_ms": (re.compile(r"Timeout\(ms\)=(\d+)"), int),
    "ran_ms": (re.compile(r"ran for (\d+) milliseconds"), int),
    "last_enqueued": (re.compile(r"last enqueued (?:NCCL )?work: (-?\d+)"), int),
    "last_completed": (re.compile(r"last completed (?:NCCL )?work: (-?\d+)"), int),
    "at_work": (re.compile(r"(?:Timeout at NCCL work|at work|at work sequence id): (\d+)"), int),
    "stuck_s": (re.compile(r"watchdog got stuck for (\d+) seconds"), int),
}


@_matcher("watchdog-timeout", "atchdog", "NCCL work", "enqueued")
def _watchdog(s: str) -> Optional[dict]:
    if not _WD_TRIGGER.search(s):
        return None
    d: dict = {}
    for key, (pat, conv) in _WD_FIELDS.items():
        m = pat.search(s)
        if m:
            d[key] = conv(m.group(1))
    if "seqnum" not in d and "at_work" in d:
        d["seqnum"] = d["at_work"]
    r = _RANK_WORD.search(s)
    if r:
        d["rank"] = int(next(g for g in r.groups() if g is not None))
    return d


_CUDA_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|"
    r"CUBLAS_STATUS_ALLOC_FAILED|Not enough memory to (?:allocate|load)|No available memory for the cache blocks"
)
_TRIED = re.compile(r"Tried to allocate (?P<n>[\d.]+) ?(?P<u>[KMG]i?B)")


@_matcher("cuda-oom", "emory", "ALLOC")
def _cuda_oom(s: str) -> Optional[dict]:
    if not _CUDA_OOM.search(s):
        return None
    m = _TRIED.search(s)
    return {"tried": m.group("n") + " " + m.group("u")} if m else {}


_HOST_OOM = re.compile(
    r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory|(?:^|\s)Killed(?!\s+process)(?:\s|$)"
)


@_matcher("host-oom", "MemoryError", "bad_alloc", "Cannot allocate", "Killed")
def _host_oom(s: str) -> Optional[dict]:
    if "OutOfMemoryError" in s:
        return None
    m = _HOST_OOM.search(s)
    if not m:
        return None
    # a shell's bare "Killed" only says SIGKILL: the OOM killer sends it, and so does kill -9
    return {"sigkill_only": True} if "Killed" in m.group(0) else {}


_SHM_WAIT = re.compile(r"No available shared memory broadcast block found in (\d+) seconds?")


@_matcher("shm-broadcast-wait", "broadcast block")
def _shm_wait(s: str) -> Optional[dict]:
    m = _SHM_WAIT.search(s)
    return {"seconds": int(m.group(1))} if m else None


_SHM_SPACE = re.compile(
    r"unable to allocate shared memory|Error while creating shared memory segment|"
    r"unable to (?:write to|open shared memory object|mmap).{0,80}(?:/dev/shm|</torch_|shared memory)|"
    r"(?:/dev/shm|shm).{0,200}No space left on device|No space left on device.{0,200}(?:/dev/shm|shm)"
)


@_matcher("shm-no-space", "shared memory", "No space", "shm")
def _shm_space(s: str) -> Optional[dict]:
    return {} if _SHM_SPACE.search(s) else None


_SIGBUS = re.compile(r"\bBus error\b|\bsignal 7\b|\bSIGBUS\b")


@_matcher("sigbus", "Bus error", "signal 7", "SIGBUS")
def _sigbus(s: str) -> Optional[dict]:
    return {} if _SIGBUS.search(s) else None


_SHARD_EXIT = [
    re.compile(r"Shard (?P<rank>\d+) failed to start"),
    re.compile(r"Shard process was signaled to shutdown with signal (?P<signal>\d+)"),
    re.compile(r"Shard (?P<rank>\d+) (?:crashed|terminated)"),
    re.compile(r"exited with (?:exit )?code:? (?P<code>-?\d+)"),
    re.compile(
        r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)(?: \(pid: (?P<pid>\d+)\))?"
    ),
    re.compile(r"Worker ?[Pp]roc \S*?(?P<rank>\d*) died unexpectedly"),
    re.compile(r"died with exit code (?P<code>-?\d+)"),
]


@_matcher("shard-exit", "Shard", "exit", "died")
def _shard_exit(s: str) -> Optional[dict]:
    for pat in _SHARD_EXIT:
        m = pat.search(s)
        if m:
            d = {k: int(v) for k, v in m.groupdict().items() if v}
            if "rank" not in d:
                r = re.search(r"\brank=(\d+)", s)
                if r:
                    d["rank"] = int(r.group(1))
            return d
    return None


_WAIT_SHARD = re.compile(r"Waiting for shard(?: (?P<n>\d+))? to be ready")


@_matcher("waiting-for-shard", "Waiting for shard")
def _waiting_for_shard(s: str) -> Optional[dict]:
    m = _WAIT_SHARD.search(s)
    if not m:
        return None
    r = re.search(r"\brank=(\d+)", s)
    rank = r.group(1) if r else m.group("n")
    return {"rank": int(rank)} if rank is not None else {}


_SGL_WD = re.compile(
    r"Scheduler watchdog timeout|watchdog timeout \(self\.watchdog_timeout|Pyspy dump for PID (\d+)"
)


@_matcher("sglang-watchdog", "atchdog", "Pyspy")
def _sglang_watchdog(s: str) -> Optional[dict]:
    m = _SGL_WD.search(s)
    if not m:
        return None
    return {"dump_pid": int(m.group(1))} if m.group(1) else {}


_ERROR = re.compile(r"(?:^|[\s\]:|])(?:ERROR|CRITICAL|FATAL)\b|^\[?E\d{4} |\]:\[E\d{4} |^E\d{4} ")


@_matcher("error", "ERROR", "CRITICAL", "FATAL", "E0", "E1")
def _error(s: str) -> Optional[dict]:
    return {} if _ERROR.search(s) else None


_RDZV = re.compile(
    r"store based barrier|Waiting in store|TCPStore|[Rr]endezvous|Timed out initializing process group|"
    r"init_process_group|DistStoreError|Connection to .{0,60}:\d+ timed out|"
    r"waiting for (?:all )?(?:\d+ )?(?:workers|peers|ranks) to join"
)


@_matcher(
    "rendezvous",
    "barrier",
    "Store",
    "store",
    "endezvous",
    "init_process_group",
    "timed out",
    "join",
)
def _rendezvous(s: str) -> Optional[dict]:
    if not _RDZV.search(s):
        return None
    return {"timed_out": True} if re.search(r"(?i)timed out|timeout", s) else {}


_LOCK = re.compile(
    r"Waiting for lock|Attempting to acquire lock|Waiting on baton|Lock \d+ not acquired|"
    r"waiting for (?:the )?(?:file )?lock"
)
_LOCK_PATH = re.compile(r"\bon (?P<path>/\S+\.lock)\b|(?P<p2>/\S+\.lock)")


@_matcher("lock-wait", "lock", "baton")
def _lock_wait(s: str) -> Optional[dict]:
    if not _LOCK.search(s):
        return None
    m = _LOCK_PATH.search(s)
    return {"path": m.group("path") or m.group("p2")} if m else {}


def _keyword_index() -> tuple[re.Pattern, dict]:
    """One regex over every matcher's words, and word -> kinds (a word also stands for the
    shorter words inside it, since a regex scan reports only the longest at one place)."""
    kinds_of: dict[str, set] = {}
    for kind, words, _fn in _MATCHERS:
        for w in words:
            kinds_of.setdefault(w, set()).add(kind)
    words = sorted(kinds_of, key=len, reverse=True)
    full = {w: set().union(*(kinds_of[v] for v in words if v in w)) for w in words}
    return re.compile("|".join(re.escape(w) for w in words)), full


_KEYWORDS, _KINDS_OF_WORD = _keyword_index()
_ORDER = {kind: i for i, (kind, _w, _f) in enumerate(_MATCHERS)}

_TB_START = re.compile(r"^Traceback \(most recent call last\):")
_TB_CHAIN = re.compile(
    r"^(?:During handling of the above exception|The above exception was the direct cause)"
)
_EXC_LINE = re.compile(r"^(?P<exc>[A-Za-z_][\w.]{0,120})(?::\s|:$|$)")


_RANK_EQ = re.compile(r"\brank=(\d+)\b")


def _rank_of(pref: LinePrefix, data: dict) -> Optional[int]:
    if pref.rank is not None:
        return pref.rank
    r = data.get("rank")
    if isinstance(r, int):
        return r
    m = _RANK_EQ.search(pref.rest)  # TGI puts "rank=N" at the end of the line
    return int(m.group(1)) if m else None


class LogView:
    """Events and (the kept tail of) cleaned lines of one log; see :func:`parse_log`."""

    def __init__(
        self, events: list[LogEvent], lines: list[str], counts: dict, total_lines: int
    ) -> None:
        self.events = events
        self.lines = lines
        self.counts: dict[str, int] = dict(counts)  # every event seen per kind, even if dropped
        self.total_lines = total_lines

    def of(self, *kinds: str) -> list[LogEvent]:
        """Events of the given kinds, in line order."""
        return [e for e in self.events if e.kind in kinds]

    def last(self, *kinds: str) -> Optional[LogEvent]:
        """The last event of any of the given kinds (of any kind when none given)."""
        for e in reversed(self.events):
            if not kinds or e.kind in kinds:
                return e
        return None

    def last_meaningful(self) -> Optional[LogEvent]:
        """The last event that tells something about the server's state (not NCCL chatter or
        an idle zero-throughput stats line)."""
        for e in reversed(self.events):
            if e.kind in NOISE_KINDS or (e.kind == "request" and e.data.get("idle")):
                continue
            return e
        return None

    def ranks(self) -> dict[int, set]:
        """rank -> pids seen writing lines for that rank (from prefixes)."""
        out: dict[int, set] = {}
        for e in self.events:
            if e.rank is not None and e.pid is not None:
                out.setdefault(e.rank, set()).add(e.pid)
        return out

    def __repr__(self) -> str:
        return f"LogView({self.total_lines} lines, {dict(self.counts)})"


class _LogParser:
    """Incremental parser: feed lines, keep bounded state when limits are given."""

    def __init__(self, max_lines_kept: Optional[int], max_events_per_kind: Optional[int]) -> None:
        self.lines: deque = deque(maxlen=max_lines_kept)
        self.max_events = max_events_per_kind
        self.events: dict[str, deque] = {}
        self.counts: Counter = Counter()
        self.line_no = 0
        self.tb_state: dict[Optional[int], str] = {}
        self.wd_optype: dict = {}  # (rank, seqnum) -> OpType  # per writer pid: "frames" | "chain"

    def _emit(self, ev: LogEvent) -> None:
        if ev.kind == "watchdog-timeout":
            self._watchdog_optype(ev)
        self.counts[ev.kind] += 1
        q = self.events.get(ev.kind)
        if q is None:
            q = self.events[ev.kind] = deque(maxlen=self.max_events)
        q.append(ev)

    def _watchdog_optype(self, ev: LogEvent) -> None:
        """Follow-up watchdog lines ("last enqueued NCCL work: N") name no OpType: take it from
        the same rank's earlier line about the same SeqNum, so ranks compare like with like."""
        seq, op = ev.data.get("seqnum"), ev.data.get("optype")
        if seq is None:
            return
        if op is not None:
            if len(self.wd_optype) > 10000:  # bounded memory on endless logs
                self.wd_optype.clear()
            self.wd_optype[(ev.rank, seq)] = op
        elif (ev.rank, seq) in self.wd_optype:
            ev.data["optype"] = self.wd_optype[(ev.rank, seq)]
            ev.data["optype_from_earlier_line"] = True

    def _traceback(self, pref: LinePrefix, text: str) -> None:
        rest = pref.rest
        key = pref.pid
        state = self.tb_state.get(key)
        if _TB_START.match(rest):
            self.tb_state[key] = "frames"
            return
        if state is None:
            return
        if not rest.strip():
            if state == "frames":
                return
            return
        if rest[:1] in (" ", "\t"):
            return
        if _TB_CHAIN.match(rest):
            self.tb_state[key] = "chain"
            return
        if state == "chain":
            return
        del self.tb_state[key]
        m = _EXC_LINE.match(rest)
        exc = m.group("exc") if m else None
        self._emit(
            LogEvent("traceback", self.line_no, text, pref.rank, pref.pid, {"exc_type": exc})
        )

    def feed(self, raw: str) -> None:
        self.line_no += 1
        text = clean_line(raw)
        self.lines.append(text)
        if not text.strip():
            return
        cands: set = set()
        if len(text) > MATCH_CHARS:
            text = text[:MATCH_CHARS]  # events live at the start; keeps regexes cheap
        for w in _KEYWORDS.findall(text):
            cands |= _KINDS_OF_WORD[w]
        if not cands and not self.tb_state and "Traceback" not in text:
            return
        pref = split_prefix(text)
        if self.tb_state or "Traceback" in text:
            self._traceback(pref, text)
        rest = pref.rest
        if pref.level in ("ERROR", "CRITICAL"):
            cands.add("error")
        for kind in sorted(cands, key=_ORDER.__getitem__):
            fn = _MATCHERS[_ORDER[kind]][2]
            if kind == "error" and pref.level in ("ERROR", "CRITICAL"):
                data: Optional[dict] = {}
            else:
                data = fn(rest if kind != "error" else text)
            if data is None:
                continue
            pid = pref.pid if pref.pid is not None else data.get("pid")
            if pid is None and "NCCL" in rest:
                pid = _nccl_data(rest)[1].get("pid")
            self._emit(LogEvent(kind, self.line_no, text, _rank_of(pref, data), pid, data))

    def view(self) -> LogView:
        evs = [e for q in self.events.values() for e in q]
        evs.sort(key=lambda e: e.line_no)
        return LogView(evs, list(self.lines), self.counts, self.line_no)


def parse_log(
    lines: Iterable[str],
    max_lines_kept: Optional[int] = None,
    max_events_per_kind: Optional[int] = None,
) -> LogView:
    """Parse log lines (a list or any iterator of str) into a :class:`LogView`.

    Without limits every line and event is kept; with them, memory stays bounded whatever the
    input's length (``counts`` still counts every event).
    """
    p = _LogParser(max_lines_kept, max_events_per_kind)
    for raw in lines:
        if not isinstance(raw, str):
            raw = (
                bytes(raw).decode("utf-8", "replace")
                if isinstance(raw, (bytes, bytearray))
                else str(raw)
            )
        # one item may hold several lines (a whole paste passed as one string)
        if "\n" in raw.rstrip("\n"):
            for part in raw.split("\n"):
                p.feed(part)
        else:
            p.feed(raw)
    return p.view()


_READ_CHUNK = 1 << 16


def _iter_file_lines(path: str) -> Iterable[str]:
    """Yield decoded lines of a file; a line longer than the chunk is cut, the rest skipped."""
    with open(path, "rb") as f:
        skipping = False
        while True:
            chunk = f.readline(_READ_CHUNK)
            if not chunk:
                return
            complete = chunk.endswith(b"\n")
            if not skipping:
                yield chunk.replace(b"\x00", b"").decode("utf-8", "replace")
            skipping = not complete


def parse_log_file(path: str, max_lines_kept: int = 400, max_events_per_kind: int = 200) -> LogView:
    """Parse a log file of any size in bounded memory: the last ``max_lines_kept`` lines, the
    last ``max_events_per_kind`` events of each kind, and counts of all events."""
    return parse_log(_iter_file_lines(path), max_lines_kept, max_events_per_kind)
