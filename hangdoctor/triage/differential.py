"""The differential: where the evidence stands (phase, what each process waits on, the errors it
printed) turned into a ranked list of causes, and the explanation ranked above its consequence.

A mechanism rule or a check says *what* happened. When none speaks, the evidence still says
*where*: a worker parked in a store wait during start-up, a log that stopped in the middle of
graph capture, an exception from one rank. Each position has causes it is known to come from
(``hangdoctor/knowledge/priors.json``, written from CAUSES.md and the libraries' wait points);
they are ranked, at low confidence, with the one observation that would split the first two. So
the differential is never empty when a stack, an error or a phase was read, and it is empty when
nothing was (a README, prose only).

Layer: triage; may import: hangdoctor.triage, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.engines, hangdoctor.knowledge, hangdoctor.snapshot, hangdoctor.parsers and the
foundation.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from hangdoctor.evidence.model import Evidence
from hangdoctor.knowledge import causes as causes_mod
from hangdoctor.triage.readings import (
    Position,
    announced_stop,
    log_repeats,
    queue_stuck,
    script_stop,
    script_waits,
    sizes_disagree,
    versions_split,
)

PRIOR_CAP = 0.35  # a position says where to look, never what it is

# the engine models' phases (hangdoctor/engines/spec.py) in the differential's words
_ENGINE_PHASE = {
    "loading": "load", "warming-up": "warmup", "compiling": "compile",
    "capturing-graphs": "graph-capture", "idle": "serving", "step": "serving",
    "waiting-on-workers": "serving", "in-collective": "serving", "serving": "serving",
}

# Where a log stopped, in what the libraries themselves print (torch.distributed, NCCL INFO,
# vLLM / SGLang / TGI start-up and serving lines, safetensors / hub loading, inductor / Triton /
# JIT builds, CUDA graph capture). The last line that matches one names the phase.
_PHASE_LINES: list[tuple[str, re.Pattern[str]]] = [
    ("shutdown", re.compile(r"destroy_process_group|[Ss]hutting down|shutdown\(\)|Received SIGTERM|atexit")),
    ("serving", re.compile(r"Avg prompt throughput|Running: \d+ reqs|POST /v1/|GET /v1/|\"POST |Uvicorn running|"
                           r"Application startup complete|Decode batch|Prefill batch|Started server process|"
                           r"[Ll]istening on|server is fired up|Connected to the engine|Processed prompts|"
                           r"request_id|llama server listening|HTTP server listening")),
    ("graph-capture", re.compile(r"[Cc]aptur\w* (?:CUDA |cuda )?graph|Capturing batches|cuda[_ ]graph|CUDA graphs?|graph_capture")),
    ("compile", re.compile(r"[Cc]ompil(?:ing|e|ation)\b|torch\.compile|inductor|[Aa]utotun|\bJIT\b|"
                           r"[Bb]uilding extension|ninja|nvcc|Triton kernel|flashinfer\.jit|deep_gemm")),
    ("warmup", re.compile(r"[Ww]arm(?:ing)?[ -]?up|profile_run|determine_num_available_blocks|"
                          r"# GPU blocks|num_gpu_blocks|KV cache|Memory profiling|max_total_num_tokens")),
    ("load", re.compile(r"[Ll]oading (?:weights|model|safetensors|checkpoint|shards)|[Ll]oad(?:ing)? weight|"
                        r"safetensors|Downloading|[Pp]ulling [0-9a-f]{6,}|load_weights|model weights took|"
                        r"Loading .* took|llama_model_load|load_tensors")),
    ("comm-init", re.compile(r"NCCL INFO (?:Bootstrap|comm 0x|Channel|Connected all|NET/|Using network|"
                             r"cudaDev|NCCL_)|ncclCommInitRank|init_device_mesh|Init COMPLETE")),
    ("rendezvous", re.compile(r"init_process_group|TCPStore|[Rr]endezvous|store_based_barrier|"
                              r"Waiting for \d+ (?:other )?(?:ranks|workers|processes)|MASTER_ADDR|"
                              r"world_size=\d+|init_distributed_environment|"
                              # torch/distributed/run.py config_from_args prints it, then
                              # elastic_launch starts the agent, whose first step is rendezvous
                              r"Setting OMP_NUM_THREADS environment variable for each process")),
]

_ERRORS: list[tuple[str, re.Pattern[str]]] = [
    ("oom", re.compile(r"[Oo]ut of memory|OutOfMemoryError|\bOOM\b|oom-kill|Killed process \d+")),
    ("cuda-error", re.compile(r"CUDA error|cudaError\w+|CUBLAS_STATUS|CUDNN_STATUS|illegal memory access|"
                              r"device-side assert|NVRM: Xid|unspecified launch failure")),
    # the process died: a signal, an exit code, Go's runtime panic ("panic: ..." then "goroutine N
    # [running]:"), libstdc++'s terminate handler (then abort(): "terminate called after throwing")
    ("killed", re.compile(r"^panic: |^goroutine \d+ \[running\]:|terminate called after throwing|\bKilled\b|SIGKILL|SIGSEGV|SIGBUS|SIGABRT|[Ss]egmentation fault|core dumped|"
                          r"signal \d+|exit(?:ed)? (?:with )?code -?\d+|exitcode\s*:\s*-?\d+|"
                          r"died|exited unexpectedly|is dead|terminated")),
    # one thread died of its own error and the process lives on (Rust std, panicking.rs:
    # "thread '{name}' panicked at {location}"; a panic unwinds only its thread, what waits on
    # that thread's answer waits for ever)
    ("panic", re.compile(r"^thread '[^']*' panicked at ")),
    ("timeout", re.compile(r"\btimed out\b|\b[Tt]imeout(?:Error|Exception)?\b(?![=<>~-])|[Dd]eadline exceeded|"
                           r"Watchdog caught")),
    ("connection", re.compile(r"Connection (?:refused|reset|closed)|ConnectionResetError|Broken pipe|"
                              r"ECONNREFUSED|No route to host|Name or service not known|ConnectionError")),
    # a traceback, also when a logger prefixed its lines or the paste kept only its frames
    # ('File "…", line N, in f' with the comma: faulthandler's frames have none)
    ("exception", re.compile(r"(?:^|\] |\s{2})Traceback \(most recent call last\)|(?:^|[\s`'\"(])\w+(?:Error|Exception)\b:|"
                             r"\bFile \"[^\"]+\", line \d+, in \w")),
]
# where a poster says it stops ("hangs after loading the weights", "stuck at 99 %% of the pull"):
# context, used only when no program line names a phase, and at a lower weight
_SAYS_STOPS = re.compile(r"(?P<before>[^.;!?。；！？]{0,50}?)(?:卡住|卡死|卡在|挂起|无响应|没有响应|不响应|\b(?:hang|hangs|hung|hanging|stuck|freez\w*|frozen|stops?|stopped|stall\w*|"
                         r"block\w*|never (?:finish\w*|return\w*|complet\w*|start\w*))\b)"
                         r"(?P<where>[^.;!?。；！？]{0,100})", re.I)
_PROSE_PHASE: list[tuple[str, re.Pattern[str]]] = [
    ("import", re.compile(r"\bimport(?:s|ing)?\b", re.I)),
    ("shutdown", re.compile(r"\b(?:shut ?down|exit\w*|terminat\w*|destroy\w*|teardown|clean ?up)\b", re.I)),
    ("graph-capture", re.compile(r"\bcaptur\w*|cuda ?graph", re.I)),
    ("compile", re.compile(r"编译|\bcompil\w*|\bjit\b|autotun\w*|\bbuild\w*", re.I)),
    ("warmup", re.compile(r"\bwarm[ -]?up|profil\w*|kv cache", re.I)),
    ("load", re.compile(r"加载|下载|\bload\w*|download\w*|\bpull\w*|weights?\b|checkpoint|safetensors", re.I)),
    ("rendezvous", re.compile(r"rendezvous|barrier|init_process_group|process group|\bstore\b", re.I)),
    ("comm-init", re.compile(r"\bnccl\b.*\binit|communicator|\bp2p\b", re.I)),
    ("init", re.compile(r"启动|初始化|\bstart\w*|\binit\w*|launch\w*|boot\w*", re.I)),
    ("serving", re.compile(r"请求|推理|生成|\brequests?\b|\bgenerat\w*|inference|decod\w*|prefill|serving|batch\w*|"
                          r"\bprompts?\b|completion|\bchat\b|embedding", re.I)),
]
PROSE_FACTOR = 0.6  # what a person says of where it stops weighs less than where a program stopped

# a thread in the import machinery is importing, whatever the innermost frame is
_IMPORT_FRAMES = ("_find_and_load", "_load_unlocked", "_call_with_frames_removed", "exec_module")


@lru_cache(maxsize=1)
def priors() -> dict[str, Any]:
    path = os.path.join(os.path.dirname(causes_mod.__file__), "priors.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclass
class Observations:
    """Where the evidence stands: positions of the processes, the phase, the errors."""

    positions: dict[str, Position] = field(default_factory=dict)
    phase: str | None = None
    phase_line: str = ""
    errors: dict[str, str] = field(default_factory=dict)  # error class -> first line
    phase_said: bool = False  # the phase is the poster's word, not a program line's

    @property
    def empty(self) -> bool:
        return not self.positions and not self.phase and not self.errors


# tearing a process group down waits on the peers and on pending work (torch
# distributed_c10d.py destroy_process_group: _wait_for_pending_works, then each backend's
# shutdown, "ncclCommAbort() was a 'collective' call in some versions of NCCL"; NCCL's
# ncclCommDestroy / ncclCommFinalize wait for the communicator's outstanding operations)
_TEARDOWN_PY = re.compile(r"^(destroy_process_group|_shutdown_backend|shutdown|abort|_abort_process_group)$")
_TEARDOWN_NATIVE = re.compile(r"ncclCommAbort|ncclCommDestroy|ncclCommFinalize|ProcessGroupNCCL::(?:shutdown|abort)|"
                              r"ProcessGroupNCCL::~ProcessGroupNCCL")


_COMPILER = re.compile(r"(?:^|[/\s\"'])(?:nvcc|cicc|ptxas|cc1plus|cc1|ninja|nvlink|fatbinary|hipcc|clang\+\+|"
                       r"g\+\+|gcc|c\+\+)(?:[\"'\s]|$)")


_ASYNC_HTTP = ("httpx/", "aiohttp/", "starlette/", "fastapi/", "uvicorn/", "asyncio/", "uvloop/", "sse_starlette/")


def _in_async_http(file: str) -> bool:
    return any(p in file for p in _ASYNC_HTTP)


def _wait_of(thread: Any) -> str:
    if any(not f.native and f.bare in _IMPORT_FRAMES for f in thread.frames):
        return "import"
    for f in thread.frames[:12]:
        if (f.native and _TEARDOWN_NATIVE.search(f.name)) or (
                not f.native and _TEARDOWN_PY.match(f.bare) and "torch/distributed" in f.file):
            return "teardown"
    kind = thread.wait_kind or "unknown"
    inner = next((f for f in thread.frames if not f.native), None)
    if kind in ("unknown", "running") and inner is not None and not _in_async_http(inner.file) and \
            any(not f.native and _in_async_http(f.file) for f in thread.frames):
        # code that does not wait, inside an asyncio HTTP server's or client's call: the event
        # loop runs it and serves nothing else until it returns (asyncio docs, "Developing with
        # asyncio": a blocking call in a coroutine blocks the whole loop). The loop's own frames
        # innermost (uvloop's run, asyncio's select) are a loop waiting for events: idle
        return "event-loop"
    return "collective" if kind.startswith("collective") else kind


# a command line someone typed says what was run, not where a process stands
_TYPED = re.compile(r"^\s*(?:[$#>%]\s+)?(?:sudo\s+)?(?:[\w./-]*/)?(?:hangdoctor|python3?|vllm|sglang|docker|"
                    r"podman|kubectl|torchrun|deepspeed|mpirun|srun|pip3?|curl|export|cd|ls|cat|git|ssh|bash|sh|"
                    r"text-generation-launcher|ollama|llama-server|trtllm-serve|nvidia-smi|py-spy|gdb)\b")


# lines that say where a process stands in its code or what is installed, never where in time a
# log stopped: stack frames (py-spy, gdb, a traceback), version listings (collect_env, pip, a
# poster's "- Name: version" bullets) and command lines with their flags
_NOT_A_PHASE = re.compile(
    r"^\s*(?:#\d+\s|File \"|at [\w.$<>]+\(|[\w.<>\[\]-]+\s+\([^()]*\.(?:py|pyx|so[\d.]*)(?::\d+)?\)\s*(?:#.*)?$|"
    r"\[(?:pip3?|conda)\]|[-*]?\s*[A-Za-z][\w .+/()-]{0,40}:\s*v?\d+(?:\.\d+)+\b|"
    r"(?:NVCC|GCC|Clang|CMake|Libc|OS|HIP|ROCM|cuDNN|CUDA|PyTorch|Python)[\w ]*(?:version)?\s*:|"
    r"[\w ]+ version\s*:)")
_FLAG = re.compile(r"(?:^|\s)--[a-zA-Z][\w-]+")


def _says_no_phase(line: str) -> bool:
    return bool(_NOT_A_PHASE.match(line)) or line.lstrip().startswith("--") or len(_FLAG.findall(line)) >= 2


def _evidence_lines(ev: Evidence) -> list[str]:
    """The lines a program printed: the log (live or pasted, prose already set apart) and the
    pasted evidence lines; never the poster's sentences."""
    lines: list[str] = []
    for s in ev.snapshots:
        for item in s.get("pasted_text") or []:
            if isinstance(item, dict):
                lines.extend(x for x in item.get("lines") or [] if isinstance(x, str))
        if not s.get("pasted_text"):
            lines.extend(x for x in (s.get("log") or {}).get("tail") or [] if isinstance(x, str))
        lines.extend(x for x in (s.get("kernel_log") or {}).get("lines") or [] if isinstance(x, str))
    return [x for x in lines[-20000:] if not _TYPED.match(x)]


def _not_a_loop_line(line: str) -> bool:
    """A progress report, a start-up phase, an error or a non-log line repeats for other reasons."""
    return (any(rx.search(line) for _n, rx in _PHASE_LINES) or any(rx.search(line) for _n, rx in _ERRORS)
                or _says_no_phase(line))


def observe(ev: Evidence) -> Observations:
    obs = Observations()
    for (_host, pid), ps in ev.stacks.items():
        if not ps.ok:
            continue
        main = ps.main
        threads = [main] if main else []
        # a side thread parked in a lock, a store or a collective tells as much as the main one
        threads += [t for t in ps.threads if t is not main and _wait_of(t) in
                    ("lock", "rendezvous", "nccl-init", "collective", "io", "compile", "graph-capture")]
        for t in threads:
            w = _wait_of(t)
            if w in ("unknown",):
                continue
            pos = obs.positions.setdefault(w, Position(w, t.detail or (t.top.short if t.top else "")))
            if pid not in pos.pids:
                pos.pids.append(pid)
    for p in ev.processes:
        # a compiler in the process list is a build still running: torch's cpp_extension and
        # FlashInfer's JIT run ninja -> nvcc -> cicc / ptxas, Triton runs ptxas, setuptools gcc
        # (torch/utils/cpp_extension.py _run_ninja_build, flashinfer/jit/cpp_ext.py run_ninja)
        cmd = " ".join(str(x) for x in (p.raw.get("cmdline") or [])[:6]) or str(p.raw.get("name") or "")
        if _COMPILER.search(cmd):
            pos = obs.positions.setdefault("compile", Position("compile", cmd[:120]))
            if p.pid not in pos.pids:
                pos.pids.append(p.pid)
    lines = _evidence_lines(ev)
    try:
        phase, eline = ev.engine.log_phase() if ev.engine.model is not None else (None, "")
    except Exception:  # noqa: BLE001 - an engine view that cannot read the log leaves the phase open
        phase, eline = None, ""
    generic: tuple[str | None, str] = (None, "")
    prev = None
    for line in lines:
        if line == prev:
            continue  # a line repeated in a row says nothing new (a paste of one line 64 MB long)
        prev = line
        for name, rx in (() if _says_no_phase(line) or _IDLE_STATS.search(line) else _PHASE_LINES):
            if rx.search(line):
                generic = (name, line.strip()[:200])  # the last one wins: where it stopped
                break
        for name, rx in _ERRORS:
            if name not in obs.errors and rx.search(line):
                obs.errors[name] = line.strip()[:200]
                break
    prose = _prose_lines(ev)
    queue_stuck(lines, obs)
    script_stop(ev, lines, obs)
    announced_stop(ev, obs)
    sizes_disagree(lines, obs)
    versions_split(lines + prose, obs)
    log_repeats(lines, obs, _not_a_loop_line)
    if not obs.errors:
        # an error the poster quotes inline (`OSError: image file is truncated`) is the program's
        # words inside a sentence: its class counts, the sentence does not
        for line in prose:
            for span in _INLINE_CODE.findall(line):
                for name, rx in _ERRORS:
                    if name not in obs.errors and rx.search(span):
                        obs.errors[name] = span.strip()[:200]
                        break
    # the engine's own model of its log first; then the last line that one of the libraries'
    # own messages (generated from their source) matches; the generic lines otherwise
    if phase in _ENGINE_PHASE:
        obs.phase, obs.phase_line = _ENGINE_PHASE[phase], eline
    else:
        obs.phase, obs.phase_line = _phase_of_messages(lines) or generic
        if obs.phase in _AFTER and _DONE_BAR.search(obs.phase_line):
            # the last phase line is a progress bar at its end: that step is over, the engine
            # went on to the next one of its start-up (load -> profile -> capture -> serve)
            obs.phase = _AFTER[obs.phase]
    if obs.phase is None:
        said = _phase_said(prose)
        if said:
            obs.phase, obs.phase_line = said
            obs.phase_said = True
    if obs.empty:
        reported = any(isinstance(i, dict) and i.get("report") for s in ev.snapshots
                       for i in s.get("pasted_prose") or [])
        script_waits(ev, lines, obs, reported)
    return obs


_INLINE_CODE = re.compile(r"`([^`\n]{6,300})`")


def _prose_lines(ev: Evidence) -> list[str]:
    """The sentences of a report of one's own incident (never a script, never a write-up)."""
    out: list[str] = []
    for s in ev.snapshots:
        for item in s.get("pasted_prose") or []:
            if not isinstance(item, dict) or item.get("script") or (item.get("document") and not item.get("report")):
                continue
            out.extend(x for x in item.get("lines") or [] if isinstance(x, str))
    return out


# a tqdm bar at its end ("100%|…| 23/23", "100% Completed | 1/1"); the start-up order of vLLM and
# SGLang (model_runner: load_model, then profile_run / KV cache, then capture_model, then serve)
_DONE_BAR = re.compile(r"\b100%\s*(?:Completed\s*)?\|.*?\b(\d+)/\1\b")
_AFTER = {"load": "warmup", "warmup": "graph-capture", "graph-capture": "serving"}


def _phase_said(prose: list[str]) -> tuple[str, str] | None:
    """Where the poster says it stops, from the sentences of a report (:func:`_prose_lines`:
    never a script, never a write-up about hangs in general): the first phase word after
    'hangs / stuck / stops at…', else before it ('the request hangs')."""
    said = ""
    for line in prose:
        m = _SAYS_STOPS.search(line)
        if not m:
            continue
        said = said or line.strip()[:200]
        for part in (m.group("where"), m.group("before")):
            hit = next((name for name, rx in _PROSE_PHASE if rx.search(part)), None)
            if hit:
                return hit, line.strip()[:200]
    if said and any(_SERVES.search(line) for line in prose):
        # it hangs, and the poster says some calls to the same server are answered: the server
        # is past its start-up, so the stop is in serving
        return "serving", said
    return None


# a call that works or is answered ("the API works correctly", "curl returns a normal response")
_SERVES = re.compile(r"(?=.*\b(?:API|endpoint|curl|requests?|calls?|calling|queries|query)\b)"
                     r"(?=.*\b(?:works?|worked|succeed\w*|returns? (?:a |the )?(?:normal|correct|valid|proper)\w* "
                     r"(?:response|answer|result)|respond\w*|answer(?:s|ed))\b)", re.I)


# the generated messages' phases in the differential's words
_MESSAGE_PHASE = {"init": "init", "rendezvous": "rendezvous", "load": "load", "compile": "compile",
                  "warmup": "warmup", "graph-capture": "graph-capture", "serving": "serving",
                  "shutdown": "shutdown", "import": "import"}


# an idle server's stats line (vLLM's metrics / loggers.py, every 10 s: zero throughput, nothing
# running) is a heartbeat: the engine has no work, and the phase is where the lines before it were
_IDLE_STATS = re.compile(r"Avg prompt throughput: 0(?:\.0+)? tokens/s, Avg generation throughput: 0(?:\.0+)? "
                         r"tokens/s, Running: 0 reqs")


def _phase_of_messages(lines: list[str]) -> tuple[str, str] | None:
    try:
        from hangdoctor.knowledge.generated import match_message
    except ImportError:
        return None
    for line in reversed(lines[-3000:]):
        if _says_no_phase(line) or _IDLE_STATS.search(line):
            continue
        for m in match_message(line):
            ph = _MESSAGE_PHASE.get(str(m.get("phase")))
            if ph:
                return ph, line.strip()[:200]
    return None


# what a position read from a log or a paste (not from a process's stack) says, in words
_SAID = {
    "size-mismatch": "ranks print different sizes beside the same collective",
    "log-repeats": "the log repeats one line: a loop that makes no progress",
    "queue-stuck": "requests wait and none runs",
    "step-stuck": "requests run and no step of the engine finishes",
    "version-split": "a version separates the failing configurations from the working ones",
    "event-loop": "the stop is on an event loop",
    "remote-wait": "the stop waits for a remote task's answer",
    "load-call": "the stop is in a load",
    "serving-call": "the stop is in a request",
    "teardown": "the stop is in tearing the process group down",
    "compile": "a compiler runs",
}


def prior_signals(obs: Observations) -> dict[str, list[dict[str, Any]]]:
    """cause -> the positions that speak for it (text, weight), from priors.json."""
    data = priors()
    out: dict[str, list[dict[str, Any]]] = {}

    def add(table: dict[str, float], text: str) -> None:
        for cause, w in table.items():
            if cause in causes_mod.CAUSES:
                out.setdefault(cause, []).append({"text": text, "check": "differential",
                                                  "weight": round(min(PRIOR_CAP, float(w)), 3),
                                                  "refs": ["prior"]})

    for w, pos in obs.positions.items():
        table = data["wait"].get(w)
        if table:
            if pos.factor != 1.0:
                table = {c: w * pos.factor for c, w in table.items()}
            if pos.pids:
                who = f"{len(pos.pids)} process(es)" if len(pos.pids) != 1 else f"pid {pos.pids[0]}"
                add(table, f"{who} wait in {w}" + (f" ({pos.frame})" if pos.frame else ""))
            else:  # read from the log or the poster's paste, not from a process's stack
                add(table, f"{_SAID.get(w, 'the evidence stands at ' + w)}: {pos.frame}")
    if obs.phase and obs.phase in data["phase"]:
        table = data["phase"][obs.phase]
        if obs.phase_said:
            table = {c: w * PROSE_FACTOR for c, w in table.items()}
            add(table, f"the poster says it stops in the {obs.phase} phase: \"{obs.phase_line}\"")
        else:
            add(table, f"the evidence stops in the {obs.phase} phase"
                + (f": {obs.phase_line}" if obs.phase_line else ""))
    for cls, line in obs.errors.items():
        table = data["error"].get(cls)
        if table:
            add(table, f"an error of class {cls}: {line}")
    return out


def split_between(a: str, b: str) -> str:
    s = priors()["splits"]
    return s.get(f"{a}|{b}") or s.get(f"{b}|{a}") or s["default"]


def explains(cause: str, other: str) -> bool:
    return other in (priors()["explains"].get(cause) or [])


def order_by_explanation(ranked: list[dict[str, Any]], min_score: float) -> None:
    """In place: a cause with a mechanism behind it goes above a consequence of it that ranked
    higher by little (SIGBUS on a full /dev/shm above the rank that died of it). A weak cause does
    not jump a strong consequence: the evidence for the consequence may have another origin."""
    moved = True
    guard = 0
    while moved and guard < 20:
        moved = False
        guard += 1
        for i in range(len(ranked)):
            for j in range(i + 1, len(ranked)):
                a, b = ranked[i], ranked[j]
                if (explains(b["id"], a["id"]) and not explains(a["id"], b["id"])
                        and not b.get("symptom_only") and not b.get("prior")
                        and b["score"] >= max(min_score, 0.8 * a["score"])):
                    b.setdefault("explains", []).append(a["id"])
                    ranked.insert(i, ranked.pop(j))
                    moved = True
                    break
            if moved:
                break


def set_risks_apart(causes: list[dict[str, Any]], prior: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """In place: a cause that only risk factors speak for (a version, a /dev/shm size, a setting)
    leaves ``causes`` and is returned as a risk; it supports what a symptom or the position
    points to and never leads alone. Where the position points at it too, the risk raises it
    (at the score of both together) and it stays."""
    risks = []
    for c in list(causes):
        if not (c["evidence"] and all("risk" in (i.get("refs") or []) for i in c["evidence"])):
            continue
        if c["id"] in prior:
            keep = 1.0 - c["score"]
            for it in prior[c["id"]]:
                keep *= 1.0 - it["weight"]
            c["score"] = round(min(c["score"], 1.0 - keep), 3)
            c["evidence"] = c["evidence"] + prior[c["id"]]
            c["summary"] += " (a risk factor, where the evidence stands: " + prior[c["id"]][0]["text"] + ")"
            continue
        causes.remove(c)
        risks.append({"id": c["id"], "title": c["title"], "score": c["score"], "text": c["summary"]})
    return risks


def prior_causes(prior: dict[str, list[dict[str, Any]]], scored: dict[str, dict[str, Any]], min_score: float,
                 next_steps: Callable[[str], list[str]]) -> list[dict[str, Any]]:
    """The causes where the evidence stands points to, when no mechanism spoke: low confidence,
    each lowered by what rules it out (a prior or not)."""
    out = []
    for cid, items in prior.items():
        keep = 1.0
        for it in items:
            keep *= 1.0 - it["weight"]
        score = min(PRIOR_CAP, 1.0 - keep)
        against = (scored.get(cid) or {}).get("against") or []
        for it in against:
            score *= 1.0 - min(0.99, it["weight"])
        score = round(score, 3)
        if score < min_score / 2:
            continue
        out.append({
            "id": cid, "title": causes_mod.title(cid), "score": score, "confidence": "low",
            "symptom_only": False, "prior": True,
            "summary": "where the evidence stands, not a mechanism: " + items[0]["text"],
            "evidence": sorted(items, key=lambda i: -i["weight"]), "against": against,
            "next_steps": next_steps(cid), "odd_ones_out": [],
        })
    return out


JOIN_BELOW = 0.5  # a mechanism at or above this stands on its own; below, the position counts too


def join_priors(causes: list[dict[str, Any]], prior: dict[str, list[dict[str, Any]]],
                scored: dict[str, dict[str, Any]], min_score: float,
                next_steps: Callable[[str], list[str]]) -> None:
    """In place: when every mechanism that spoke is weak (below JOIN_BELOW), the causes only the
    position points to join the list as priors (low), ranked below the mechanisms (analyze's
    sort). A cause a mechanism named is not raised by its position: tried on the corpus, that
    let a phase outvote the mechanism more often than it helped (top-1 54 -> 52)."""
    if not prior or not causes or max(c["score"] for c in causes) >= JOIN_BELOW:
        return
    have = {c["id"] for c in causes}
    causes.extend(prior_causes({k: v for k, v in prior.items() if k not in have},
                               scored, min_score, next_steps))
