"""What an engine model is: process roles, phases, health semantics, metrics, log lines.

Each engine (vLLM, SGLang, TGI, TensorRT-LLM) is one module that builds an :class:`EngineModel`
out of data: regular expressions over command lines (setproctitle titles are longer than
``comm``'s 15 characters, so roles are read from the command line), frame patterns over stacks,
and line patterns over logs (the phase a line names; the lines the log view records as events).
Checks ask the model ("which process is the engine core?", "is this rank in a step?") instead of
matching frame names themselves.

Pure: no I/O. Frames are the evidence views' frames (innermost first); anything with ``name``,
``file`` and ``native`` attributes works.

Layer: engines; may import: the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

# Roles, one vocabulary for every engine.
API_SERVER = "api-server"
ENGINE_CORE = "engine-core"
WORKER = "worker"
TOKENIZER = "tokenizer"
DETOKENIZER = "detokenizer"
DP_CONTROLLER = "dp-controller"
ROUTER = "router"
LAUNCHER = "launcher"
RESOURCE_TRACKER = "resource-tracker"
COMPILE_WORKER = "compile-worker"

# Phases, one vocabulary for every engine.
LOADING = "loading"
WARMING_UP = "warming-up"
COMPILING = "compiling"
CAPTURING_GRAPHS = "capturing-graphs"
IDLE = "idle"  # waiting for requests
STEP = "step"  # a step in progress (forward, sampling, running compiled code)
WAITING_ON_WORKERS = "waiting-on-workers"  # the engine waits for its workers' results
IN_COLLECTIVE = "in-collective"  # a worker inside a collective
SERVING = "serving"  # an API server's event loop, idle or answering
BUSY = "busy"  # running, in code the model does not name

START_UP_PHASES = frozenset({LOADING, WARMING_UP, COMPILING, CAPTURING_GRAPHS})


@dataclass(frozen=True)
class RoleRule:
    """A process whose command line matches ``pattern`` has ``role``; the named group ``rank``
    (when the pattern has one) is its rank, ``group`` names the kind of rank (tp, pp, dp)."""

    role: str
    pattern: re.Pattern[str]
    group: str | None = None


@dataclass(frozen=True)
class FrameRule:
    """A thread whose stack has a frame named like ``name`` in a file containing ``file`` is
    in ``phase``. ``unless`` lists (name, file) pairs that, found further in, veto the rule
    (running compiled code is not compiling). Rules are tried in order; the first hit wins."""

    phase: str
    name: re.Pattern[str]
    file: str
    unless: tuple[tuple[str, str], ...] = ()
    roles: tuple[str, ...] = ()  # empty: any role
    innermost: bool = False  # only the innermost Python frame counts (an idle event loop)


@dataclass(frozen=True)
class LogRule:
    """A log line that says the engine is in ``phase`` (the last line recognised wins)."""

    phase: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class LogEventRule:
    """A line this engine writes that the log view records as an event of ``kind`` (the view's
    vocabulary, :data:`hangdoctor.evidence.log_signatures.EVENT_KINDS`). The view runs
    ``pattern`` only on lines that hold one of ``words`` (a cheap filter); the pattern's named
    groups are the event's data, as that kind reads them (load-done: ``seconds``, ``mem_gib``,
    ``avail_gb``; request: ``prompt_tps``, ``gen_tps``, ``running``, ``waiting``, ``phase``;
    shard-exit: ``rank``, ``code``, ``signal``, ``pid``). ``veto``: a line where this pattern
    matches before the kind's other patterns is not the event (a start-up line of TGI's router
    that ends like its ready line)."""

    kind: str
    pattern: re.Pattern[str]
    words: tuple[str, ...] = ()
    veto: bool = False


@dataclass(frozen=True)
class DeathRule:
    """A log line that says an engine process died: its role, and the named group ``title``
    (the process's title, when the line names it)."""

    role: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Health:
    """What the engine's health endpoint proves."""

    path: str
    proves_generation: bool
    text: str  # one sentence, for the report and the README


@dataclass(frozen=True)
class Metrics:
    """Names of the engine's Prometheus metrics that tell work in flight and progress."""

    running: tuple[str, ...] = ()  # gauges: requests being worked on
    waiting: tuple[str, ...] = ()  # gauges: requests queued
    progress: tuple[str, ...] = ()  # counters that grow with every step that produces output
    prefix: str = ""  # family prefix the collector keeps


@dataclass(frozen=True)
class EngineModel:
    name: str
    title: str
    detect: re.Pattern[str]  # a command line of this engine
    roles: tuple[RoleRule, ...]
    frames: tuple[FrameRule, ...]
    logs: tuple[LogRule, ...]
    health: Health
    metrics: Metrics
    stats_line: re.Pattern[str] | None = None  # the periodic throughput line
    notes: tuple[str, ...] = field(default_factory=tuple)
    deaths: tuple[DeathRule, ...] = ()
    # a log-line prefix that names the process writing it: groups ``title`` and ``pid``
    log_prefix: re.Pattern[str] | None = None
    # the engine's own lines among the log view's events (in the order they are tried)
    log_events: tuple[LogEventRule, ...] = ()

    # ------------------------------------------------------------ roles
    def role_of(self, cmdline: str) -> tuple[str | None, int | None, str | None]:
        """(role, rank, rank group) of a process from its command line (its title)."""
        for rule in self.roles:
            m = rule.pattern.search(cmdline)
            if m:
                rank = None
                if "rank" in rule.pattern.groupindex and m.group("rank") is not None:
                    rank = int(m.group("rank"))
                return rule.role, rank, rule.group
        return None, None, None

    # ------------------------------------------------------------ phases
    def phase_of_frames(
        self, frames: Sequence[Any], role: str | None = None
    ) -> tuple[str | None, str]:
        """(phase, the deciding frame's text) of one thread, or (None, "") when no rule
        matches. Frames innermost first."""
        py = [f for f in frames if not getattr(f, "native", False)]
        for rule in self.frames:
            if rule.roles and role not in rule.roles:
                continue
            for i, f in enumerate(py[:1] if rule.innermost else py):
                bare = f.name.rsplit(".", 1)[-1]
                if rule.file in f.file and (rule.name.search(f.name) or rule.name.search(bare)):
                    if rule.unless and _vetoed(py, i, rule.unless):
                        break
                    return rule.phase, _short(f)
        return None, ""

    def phase_of_log(self, lines: Iterable[str]) -> tuple[str | None, str]:
        """The phase the last recognised log line names, with that line."""
        last: tuple[str | None, str] = (None, "")
        for line in lines:
            for rule in self.logs:
                if rule.pattern.search(line):
                    last = (rule.phase, line.strip()[:200])
                    break
        return last

    def deaths_in_log(self, lines: Iterable[str]) -> list[dict[str, Any]]:
        """Engine processes the log says died: role, title, pid (from the last line that the
        process itself wrote, when the engine prefixes its lines) and the line."""
        last_pid: dict[str, int] = {}
        out: list[dict[str, Any]] = []
        for line in lines:
            if self.log_prefix is not None:
                m = self.log_prefix.search(line)
                if m:
                    last_pid[m.group("title")] = int(m.group("pid"))
            for rule in self.deaths:
                d = rule.pattern.search(line)
                if not d:
                    continue
                title = d.groupdict().get("title")
                pid = None
                want = re.findall(r"\d+", title or "")
                for known, kpid in last_pid.items():
                    if self.role_of("VLLM::" + known)[0] != rule.role and \
                            self.role_of(known)[0] != rule.role:
                        continue
                    # "VllmWorker-1" is the process titled Worker_TP1: the same trailing number
                    if title is None or (want and re.findall(r"\d+", known)[-1:] == want[-1:]):
                        pid = kpid
                out.append({"role": rule.role, "title": title, "pid": pid,
                            "line": line.strip()[:300]})
                break
        return out

    def is_stats_line(self, line: str) -> bool:
        return bool(self.stats_line and self.stats_line.search(line))


def _vetoed(frames: Sequence[Any], hit: int, unless: tuple[tuple[str, str], ...]) -> bool:
    """True when a veto frame sits at or inside the hit (closer to the innermost frame): the
    thread is running what the outer frame produced, not producing it."""
    for f in frames[: hit + 1]:
        for name, file in unless:
            if name in f.name and file in f.file:
                return True
    return False


def _short(f: Any) -> str:
    line = getattr(f, "line", None)
    return f"{f.name} ({f.file}{':' + str(line) if line else ''})"


def rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# The API server's asyncio event loop, idle or between callbacks: its innermost Python frame is
# the loop itself. One rule for every engine whose front end is a plain asyncio server (vLLM
# adds the names its uvloop runner shows).
ASYNCIO_SERVING = FrameRule(
    SERVING,
    rx(r"^(run_forever|_run_once|run|select)$"),
    "asyncio/",
    roles=(API_SERVER,),
    innermost=True,
)
