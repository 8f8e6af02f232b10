"""The engine view of the evidence: which process is what, what phase each is in, and what
the engine's own signals (health, metrics, connections, stats line, canary) said over the window.

Built from the evidence views (``Evidence``) and an engine model; pure.

Layer: evidence; may import: the standard library, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hangdoctor.engines import ENGINES, detect
from hangdoctor.engines import spec as b
from hangdoctor.engines.spec import EngineModel

_TITLE_PREFIXES = ("VLLM::", "sglang::", "text-generation-")
_ROLE_WORDS = {
    b.API_SERVER: "API server",
    b.ENGINE_CORE: "engine core",
    b.WORKER: "worker",
    b.TOKENIZER: "tokenizer",
    b.DETOKENIZER: "detokenizer",
    b.DP_CONTROLLER: "data-parallel controller",
    b.ROUTER: "router",
    b.LAUNCHER: "launcher",
    b.RESOURCE_TRACKER: "resource tracker",
    b.COMPILE_WORKER: "compile worker",
}


def in_flight(conn: dict[str, Any], window_ms: float) -> bool | None:
    """True when the connection's last data came in and nothing went back over the window;
    False when it sent data within the window, or never received any; None without timings."""
    sent_ms, recv_ms = conn.get("last_data_sent_ms"), conn.get("last_data_recv_ms")
    if sent_ms is None or recv_ms is None:
        return None
    if not conn.get("bytes_received"):
        return False  # connected, nothing asked yet
    if sent_ms < window_ms:
        return False  # it answered (or streams) within the window
    never_answered = not conn.get("bytes_acked") and not conn.get("bytes_sent")
    # the request came after the last answer: a keep-alive connection that got its answer has
    # sent last; one waiting for an answer has received last.
    # (equal: both in one kernel tick, the answer right after the request: answered)
    return never_answered or recv_ms < sent_ms


@dataclass
class EngineProc:
    proc: Any  # evidence.model.Proc
    role: str | None
    rank: int | None
    phases: list[tuple[str | None, str]] = field(default_factory=list)  # per stack sample
    stack_ok: bool = False
    moved: bool | None = None
    innermost: str = ""  # the innermost Python frame of the main thread, last sample

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    @property
    def host(self) -> str:
        return str(self.proc.host)

    @property
    def title(self) -> str:
        text = self.proc.cmdline_text or str(self.proc.name or "")
        if text.startswith(_TITLE_PREFIXES):
            return text.split()[0] if text.startswith("text-") else text.strip()[:60]
        return _ROLE_WORDS.get(self.role or "", self.role or (self.proc.name or "?"))

    @property
    def label(self) -> str:
        return f"pid {self.pid} ({self.title})"

    @property
    def phase(self) -> str | None:
        """The phase at the end of the window (last sample)."""
        return self.phases[-1][0] if self.phases else None

    @property
    def phase_detail(self) -> str:
        return self.phases[-1][1] if self.phases else ""

    @property
    def same_phase(self) -> bool:
        """The same phase in every sample (two samples: start and end of the window)."""
        return len(self.phases) >= 2 and len({p for p, _ in self.phases}) == 1

    @property
    def alive(self) -> bool:
        return bool(self.proc.alive)

    @property
    def stopped(self) -> bool:
        return self.proc.state in ("T", "t")

    @property
    def cpu_delta_s(self) -> float | None:
        return self.proc.cpu_delta_s


def _by_log(ev: Any) -> EngineModel | None:
    """A server already gone (its root a zombie with no command line, its children reaped) is
    still known by its log: the engine whose per-process prefix most of its lines carry
    (vLLM's "(EngineCore pid=N)"), when at least three do."""
    if not ev.has("log"):
        return None
    lines = ev.log.lines[-2000:]
    best, hits = None, 0
    for e in ENGINES:
        if e.log_prefix is None:
            continue
        n = sum(1 for x in lines if e.log_prefix.search(x))
        if n > hits:
            best, hits = e, n
    return best if hits >= 3 else None


class EngineView:
    """What the engine model makes of one set of evidence."""

    def __init__(self, ev: Any, model: EngineModel | None = None) -> None:
        self.ev = ev
        self.model = model or detect(p.cmdline_text for p in ev.processes) or _by_log(ev)
        self.procs: list[EngineProc] = []
        if self.model is None:
            return
        for p in ev.processes:
            # a zombie has no command line left; its comm (15 characters of the title) remains
            role, rank, _group = self.model.role_of(p.cmdline_text or str(p.name or ""))
            if role is None and p.listen:
                role = b.API_SERVER
            ep = EngineProc(proc=p, role=role, rank=rank if rank is not None else p.rank)
            ps = ev.stacks.get((p.host, p.pid))
            if ps is not None and ps.ok:
                ep.stack_ok = True
                ep.moved = ps.moved
                from hangdoctor.evidence.stacks import pick_main

                for sample in ps.samples:
                    main = pick_main(sample, p.pid)
                    ep.phases.append(
                        self.model.phase_of_frames(main.frames, role) if main else (None, "")
                    )
                main = pick_main(ps.samples[-1], p.pid)
                inner = next((f for f in (main.frames if main else []) if not f.native), None)
                ep.innermost = inner.short if inner else ""
            self.procs.append(ep)

    # ------------------------------------------------------------ roles
    @property
    def name(self) -> str | None:
        return self.model.name if self.model else None

    def by_role(self, role: str) -> list[EngineProc]:
        return sorted(
            (p for p in self.procs if p.role == role),
            key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid),
        )

    @property
    def api_servers(self) -> list[EngineProc]:
        return self.by_role(b.API_SERVER)

    @property
    def engine_cores(self) -> list[EngineProc]:
        return self.by_role(b.ENGINE_CORE)

    @property
    def workers(self) -> list[EngineProc]:
        return self.by_role(b.WORKER)

    def collective_waiters(self) -> list[EngineProc]:
        """Workers inside the step's collective: named by their frames, or (tensor parallel)
        burning CPU for the whole window in the same step with an unchanged stack while a
        peer is stopped or elsewhere. Measured on vLLM's CPU backend: the rank waiting for its
        peer spins in the all-reduce inside the compiled graph (``OpOverload.__call__`` under
        ``CompiledFxGraph.__call__``), which Python frames cannot name."""
        workers = [w for w in self.workers if w.alive]
        if len(workers) < 2:
            return []
        window = self.ev.window_s or 0.0
        out = []
        for w in workers:
            if w.stopped or not w.stack_ok:
                continue
            if w.phase == b.IN_COLLECTIVE:
                out.append(w)
                continue
            spinning = (w.phase == b.STEP and w.same_phase and w.moved is False
                        and window > 0 and (w.cpu_delta_s or 0.0) >= 0.25 * window)  # spins: 0.86 s of 2 s measured on 2 shared cores
            others = [o for o in workers if o is not w]
            # a peer that is stopped, out of the step, or parked in it without CPU (user code,
            # a blocking call) while this one burns CPU: this one waits for it
            peer_away = any(
                o.stopped
                or o.phase not in (b.STEP, b.IN_COLLECTIVE)
                or (o.moved is False and (o.cpu_delta_s or 0.0) < 0.1 * window)
                for o in others
            )
            if spinning and peer_away:
                out.append(w)
        return out

    def find(self, host: str, pid: int) -> EngineProc | None:
        for p in self.procs:
            if p.pid == pid and p.host == host:
                return p
        return None

    # ------------------------------------------------------------ outside signals
    @property
    def progress_raw(self) -> list[dict[str, Any]]:
        return [s["engine_progress"] for s in self.ev.snapshots if s.get("engine_progress")]

    @property
    def has_progress_data(self) -> bool:
        return any(p.get("ports") for p in self.progress_raw)

    def metrics_read(self) -> bool:
        """Both ends of the window read on at least one port."""
        return any(
            m.get("delta") is not None
            for raw in self.progress_raw
            for m in (raw.get("metrics") or {}).values()
        )

    def metrics_answered_at_end(self) -> bool:
        """The API server answered ``GET /metrics`` at the end of the window on some port: its
        HTTP front end serves, whatever a slow ``/health`` said."""
        return any(
            (m.get("end") or {}).get("ok")
            for raw in self.progress_raw
            for m in (raw.get("metrics") or {}).values()
        )

    def metric(self, name: str, end: bool = True) -> float | None:
        total, seen = 0.0, False
        for raw in self.progress_raw:
            for m in (raw.get("metrics") or {}).values():
                side = m.get("end" if end else "start") or {}
                if side.get("ok") and name in (side.get("values") or {}):
                    total += float(side["values"][name])
                    seen = True
        return total if seen else None

    def metric_delta(self, name: str) -> float | None:
        total, seen = 0.0, False
        for raw in self.progress_raw:
            for m in (raw.get("metrics") or {}).values():
                d = m.get("delta")
                if d is not None and name in d:
                    total += float(d[name])
                    seen = True
        return total if seen else None

    def gauge(self, names: tuple[str, ...]) -> float | None:
        vals = [self.metric(n) for n in names]
        vals = [v for v in vals if v is not None]
        return sum(vals) if vals else None

    def progress_deltas(self) -> dict[str, float]:
        """Changes of the model's progress counters over the window (those read at both ends)."""
        out: dict[str, float] = {}
        if self.model is None:
            return out
        for n in self.model.metrics.progress:
            d = self.metric_delta(n)
            if d is not None:
                out[n] = d
        return out

    def connections(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
        """(client connections in flight over the whole window, connections answered in the
        window, the socket table's source)."""
        stuck: list[dict[str, Any]] = []
        answered: list[dict[str, Any]] = []
        source = None
        for raw in self.progress_raw:
            a = raw.get("connections_start") or {}
            z = raw.get("connections_end") or {}
            source = z.get("source") or a.get("source") or source
            window_ms = float(raw.get("connections_window_s") or raw.get("window_s") or 0) * 1000.0
            start_peers = {c.get("peer") for c in a.get("connections") or []}
            for c in z.get("connections") or []:
                state = in_flight(c, window_ms)
                if state is True and c.get("peer") in start_peers:
                    stuck.append(c)
                elif (
                    state is False
                    and (c.get("bytes_acked") or c.get("bytes_sent"))
                    and (c.get("last_data_sent_ms") or 1e12) < window_ms
                ):
                    answered.append(c)  # it sent data back within the window
        return stuck, answered, source

    def canary(self) -> dict[str, Any] | None:
        for raw in self.progress_raw:
            if raw.get("canary"):
                return raw["canary"]
        return None

    def stats_lines(self) -> list[str]:
        if self.model is None or self.model.stats_line is None:
            return []
        return [ln for ln in self.ev.log.lines if self.model.is_stats_line(ln)][-3:]

    def log_phase(self) -> tuple[str | None, str]:
        if self.model is None:
            return None, ""
        return self.model.phase_of_log(self.ev.log.lines)
