"""The log view's recognisers: one log line in, the events it is (load progress, NCCL
warnings, a watchdog timeout, a CUDA OOM, ...), each a kind and its data.

Samples of the shapes recognised (one per kind)::

    Loading safetensors checkpoint shards:  97% Completed | 62/64 [00:31<00:01,  2.01it/s]
    (VllmWorker rank=1 pid=456) INFO 01-01 10:00:00 [default_loader.py:262] Loading weights took 12.30 seconds
    INFO 01-01 10:01:00 [backends.py:215] Compiling a graph for dynamic shape takes 25.10 s
    Capturing CUDA graph shapes:  45%|████▌     | 30/67 [00:05<00:06,  5.80it/s]
    INFO:     Application startup complete.
    [2025-01-01 10:00:00 TP1] Decode batch. #running-req: 3, #token: 512, gen throughput (token/s): 80.1
    gpu-node-3:46295:46295 [0] NCCL INFO comm 0x5581 rank 0 nranks 4 cudaDev 0 busId 19000 - Init COMPLETE
    [rank1]:[E1201 10:10:00.1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=123, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600005 milliseconds before timing out.

The engine-neutral shapes (NCCL, torch.distributed, CUDA, OOM, shared memory, uvicorn, Python
tracebacks) are here; each engine's own lines (vLLM, SGLang, TGI) are data in its model
(``EngineModel.log_events``, :mod:`hangdoctor.engines`), which each kind reads in the
catalogue's order. Every kind has literal words one of which its lines hold: one regex over all
the words picks the kinds worth trying, so a 200 MB log does not run every regex on every line.
Multi-line shapes (a traceback's exception line, a watchdog's follow-up) are followed by the
view, :mod:`hangdoctor.evidence.logs`.

Layer: evidence; may import: the standard library and hangdoctor.engines (the engine models'
log lines).
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Optional

from hangdoctor.engines import ENGINES
from hangdoctor.engines.spec import LogEventRule

# Matchers see at most this much of a line (a vLLM config dump line is ~5 KB).
MATCH_CHARS = 4096

_RANK_WORD = re.compile(r"(?:\brank=(\d+)\b|\[Rank (\d+)\]|\bRank (\d+)\]|\[rank(\d+)\])")


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


_Matcher = Callable[[str], Optional[dict]]
# (kind, literal words one of which the line must hold, matcher): the words are a cheap filter
# so that a 200 MB log does not run every regex on every line.
_MATCHERS: list[tuple[str, tuple, _Matcher]] = []


def _matcher(kind: str, *words: str) -> Callable[[_Matcher], _Matcher]:
    def deco(fn: _Matcher) -> _Matcher:
        _MATCHERS.append((kind, words, fn))
        return fn

    return deco


def _engine_rules(kind: str) -> tuple[LogEventRule, ...]:
    """The engines' lines of one kind, in the catalogue's order (vLLM, SGLang, TGI, ...)."""
    return tuple(rule for engine in ENGINES for rule in engine.log_events if rule.kind == kind)


def _engine_words(kind: str) -> tuple[str, ...]:
    return tuple(w for rule in _engine_rules(kind) for w in rule.words)


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


_LOAD_DONE = _engine_rules("load-done")


@_matcher("load-done", *_engine_words("load-done"))
def _load_done(s: str) -> Optional[dict]:
    for rule in _LOAD_DONE:
        m = rule.pattern.search(s)
        if m:
            d = m.groupdict()
            out: dict = {}
            if d.get("seconds"):
                out["seconds"] = _f(d["seconds"].rstrip("."))
            if d.get("mem_gib"):
                out["mem_gib"] = _f(d["mem_gib"])
            if d.get("avail_gb"):
                out["avail_gb"] = _f(d["avail_gb"])
            return out
    return None


_COMPILE_SECONDS = re.compile(r"(?:takes?|took|time:?)\s+(?P<s>\d+(?:\.\d+)?)\s?s\b")
_COMPILE = re.compile(
    r"torch\.compile|\b[Cc]ompil(?:e|es|ed|ing|ation took)\b|[Aa]utotun|AUTOTUNE|\bJIT\b|"
    r"Dynamo bytecode transform|inductor|[Tt]riton kernel"
)
# not compiling: configuration echoes, build facts, and the advice torch appends to every CUDA
# error ("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
_COMPILE_NOT = re.compile(r"compilation_config|CUDA used to build|[Cc]ompiled with|Compile with `?TORCH_USE_CUDA_DSA")


@_matcher("compile", "ompil", "utotun", "AUTOTUNE", "JIT", "Dynamo", "nductor", "riton")
def _compile(s: str) -> Optional[dict]:
    if not _COMPILE.search(s) or _COMPILE_NOT.search(s):
        return None
    m = _COMPILE_SECONDS.search(s)
    return {"seconds": float(m.group("s"))} if m else {}


# vLLM's "Capturing CUDA graphs ...: 40%"; SGLang's tqdm (sglang/srt/model_executor/
# cuda_graph_runner.py: f"Capturing batches ({bs=} {avail_mem=:.2f} GB)")
_CAPTURE_BAR = re.compile(r"Capturing (?:(?:CUDA|cuda) ?graphs?|batches)[^:]{0,80}:\s*(?P<pct>\d{1,3})%")
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


# uvicorn, under any engine's API server (vLLM, SGLang, trtllm-serve); then the engines' own.
_READY = re.compile(r"Application startup complete|Uvicorn running on")
_READY_RULES = ((_READY, False),) + tuple(
    (rule.pattern, rule.veto) for rule in _engine_rules("server-ready")
)


@_matcher("server-ready", "startup complete", "Uvicorn running", *_engine_words("server-ready"))
def _server_ready(s: str) -> Optional[dict]:
    # The pattern that matches first in the line decides (the earlier one on a tie), as one
    # alternation of them all would.
    first: Optional[tuple[int, bool]] = None
    for pattern, veto in _READY_RULES:
        m = pattern.search(s)
        if m and (first is None or m.start() < first[0]):
            first = (m.start(), veto)
    if first is None or first[1]:
        return None
    return {}


_ACCESS = re.compile(
    r"\"(?P<method>GET|POST|PUT|DELETE|PATCH) (?P<path>\S+) HTTP/[\d.]+\" (?P<code>\d{3})"
)
# The engines' request lines: those that carry data (a stats line) are tried before the bare ones.
_REQUEST_DATA = tuple(r.pattern for r in _engine_rules("request") if r.pattern.groupindex)
_REQUEST_BARE = tuple(r.pattern for r in _engine_rules("request") if not r.pattern.groupindex)
_REQUEST_FIELDS: dict[str, Callable[[str], object]] = {
    "prompt_tps": float,
    "gen_tps": float,
    "running": int,
    "waiting": int,
    "phase": str.lower,
}


@_matcher("request", "HTTP/", *_engine_words("request"))
def _request(s: str) -> Optional[dict]:
    m = _ACCESS.search(s)
    if m:
        return {"method": m.group("method"), "path": m.group("path"), "code": int(m.group("code"))}
    for pattern in _REQUEST_DATA:
        m = pattern.search(s)
        if m:
            d = {k: _REQUEST_FIELDS[k](v) for k, v in m.groupdict().items() if v is not None}
            if "prompt_tps" in d and "gen_tps" in d:
                # zero throughput with nothing running is a stats line of an idle server
                d["idle"] = d["prompt_tps"] == 0 and d["gen_tps"] == 0 and not d.get("running")
            return d
    if any(pattern.search(s) for pattern in _REQUEST_BARE):
        return {}
    return None


_NCCL_HOST = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
_NCCL_LEVEL = re.compile(r"\bNCCL (INFO|WARN|TRACE|ERROR)\b")
_NCCL_RANK = re.compile(r"\brank (\d+)\b(?:.*?\bn[Rr]anks (\d+))?")


def nccl_data(s: str) -> tuple[Optional[str], dict]:
    """An NCCL line's level and what its header and text name: host, pid, dev, rank, nranks."""
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
    lvl, d = nccl_data(s)
    return d if lvl in ("INFO", "TRACE") else None


@_matcher("nccl-warn", "NCCL")
def _nccl_warn(s: str) -> Optional[dict]:
    lvl, d = nccl_data(s)
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
    _, d = nccl_data(s)
    d["phase"] = m.group(1).lower() if m else "call"
    return d


_WD_TRIGGER = re.compile(
    r"Watchdog caught collective operation timeout|last enqueued NCCL work|Timeout at NCCL work|"
    r"watchdog got stuck for|detected by watchdog|last enqueued work:|"
    # the work record alone (ProcessGroupNCCL.cpp, WorkNCCL's operator<<): only the watchdog's
    # timeout and error messages print it; posters paste it without the sentence before it
    r"^\s*WorkNCCL\(SeqNum=\d+"
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


@_matcher("watchdog-timeout", "atchdog", "NCCL work", "enqueued", "WorkNCCL(SeqNum")
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


_SHM_WAIT = _engine_rules("shm-broadcast-wait")


@_matcher("shm-broadcast-wait", *_engine_words("shm-broadcast-wait"))
def _shm_wait(s: str) -> Optional[dict]:
    for rule in _SHM_WAIT:
        m = rule.pattern.search(s)
        if m:
            return {"seconds": int(m.group("seconds"))}
    return None


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


# The engines' own lines first, then the exit codes that torch.distributed.elastic and any
# supervisor print.
_SHARD_EXIT = [rule.pattern for rule in _engine_rules("shard-exit")] + [
    re.compile(r"exited with (?:exit )?code:? (?P<code>-?\d+)"),
    re.compile(
        r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)(?: \(pid: (?P<pid>\d+)\))?"
    ),
    re.compile(r"died with exit code (?P<code>-?\d+)"),
]


@_matcher("shard-exit", "exit", "died", *_engine_words("shard-exit"))
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


_WAIT_SHARD = _engine_rules("waiting-for-shard")


@_matcher("waiting-for-shard", *_engine_words("waiting-for-shard"))
def _waiting_for_shard(s: str) -> Optional[dict]:
    for rule in _WAIT_SHARD:
        m = rule.pattern.search(s)
        if m:
            r = re.search(r"\brank=(\d+)", s)
            rank = r.group(1) if r else m.groupdict().get("rank")
            return {"rank": int(rank)} if rank is not None else {}
    return None


_SGL_WD = _engine_rules("sglang-watchdog")


@_matcher("sglang-watchdog", *_engine_words("sglang-watchdog"))
def _sglang_watchdog(s: str) -> Optional[dict]:
    for rule in _SGL_WD:
        m = rule.pattern.search(s)
        if m:
            pid = m.groupdict().get("dump_pid")
            return {"dump_pid": int(pid)} if pid else {}
    return None


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


def candidate_kinds(text: str) -> set[str]:
    """The kinds whose words the line holds: the only ones worth trying on it."""
    kinds: set[str] = set()
    for w in _KEYWORDS.findall(text):
        kinds |= _KINDS_OF_WORD[w]
    return kinds


def in_order(kinds: Iterable[str]) -> list[str]:
    """Kinds in the order their recognisers are tried (and a line's events are listed)."""
    return sorted(kinds, key=_ORDER.__getitem__)


def recognise(kind: str, s: str) -> Optional[dict]:
    """The data of an event of ``kind`` in line ``s`` (its prefixes peeled off), or None."""
    return _MATCHERS[_ORDER[kind]][2](s)


# Python tracebacks: their first line, the line that chains a second one, the exception line.
TB_START = re.compile(r"^Traceback \(most recent call last\):")
TB_CHAIN = re.compile(
    r"^(?:During handling of the above exception|The above exception was the direct cause)"
)
EXC_LINE = re.compile(r"^(?P<exc>[A-Za-z_][\w.]{0,120})(?::\s|:$|$)")
