"""Forward progress of the engine, measured from outside over the window.

Work in flight: client connections on the API port that asked and got nothing back over the
window, the engine's running/waiting gauges, an engine core waiting on its workers in both
samples, a worker in the same step in both samples. Forward progress: the engine's counters
(generated tokens, finished requests) grew, a client got bytes back, a rank's stack moved. An
API that answers while work is in flight and nothing progresses is a stuck engine: vLLM's
/health stays 200 then (it only says the engine is not known dead).

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re
from typing import Any

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.engines import spec as b
from hangdoctor.evidence.engine_view import EngineProc, EngineView
from hangdoctor.evidence.model import Evidence

_BUSY_PHASES = (b.STEP, b.IN_COLLECTIVE, b.WAITING_ON_WORKERS)
_STATS_RUNNING = re.compile(
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs"
)


def _stuck_workers(view: EngineView) -> list[EngineProc]:
    """Workers that spent the whole window in one step (same phase, stack unchanged) or are
    stopped: the ranks the step waits for."""
    out = []
    for w in view.workers:
        if not w.alive:
            continue
        if w.stopped:
            out.append(w)
        elif (
            w.stack_ok
            and w.same_phase
            and w.phase in (b.STEP, b.IN_COLLECTIVE)
            and w.moved is False
        ):
            out.append(w)
    return out


def _why(w: EngineProc) -> str:
    if w.stopped:
        return f"stopped (state {w.proc.state}: SIGSTOP or a debugger)"
    if w.role == b.ENGINE_CORE:
        return "waiting on its workers"
    return f"in its {w.phase or 'step'} at {w.innermost or w.phase_detail}"


def _describe(w: EngineProc) -> str:
    if w.stopped:
        return f"{w.label} is stopped (state {w.proc.state}: SIGSTOP or a debugger)"
    cpu = w.cpu_delta_s
    cpu_txt = f", {cpu:.2f} s CPU" if cpu is not None else ""
    where = w.innermost or w.phase_detail
    return f"{w.label} in the same {w.phase} for the whole window at {where}{cpu_txt}"


def assess(ev: Evidence) -> dict[str, Any] | None:
    """The engine's state over the window: idle / moving / stuck / starting / unknown, with
    the reasons for each side, the process it names and a one-line reason. None when the
    processes are not a known engine."""
    view: EngineView = ev.engine
    if view.model is None or not view.procs:
        return None
    window = ev.window_s or 0.0
    in_flight: list[str] = []  # the evidence, in full (the check's findings)
    short: list[str] = []  # the same, a few words each (the one-line reason)
    progress: list[str] = []
    named: list[EngineProc] = []

    stuck_conns, answered, conn_source = view.connections()
    if stuck_conns:
        in_flight.append(
            f"{len(stuck_conns)} client request(s) on port "
            f"{stuck_conns[0].get('local_port')} got no bytes back over {window:.1f} s"
        )
        short.append(f"{len(stuck_conns)} client request(s) got no bytes back")
    if answered:
        progress.append(f"{len(answered)} client connection(s) got bytes back in the window")
    running = view.gauge(view.model.metrics.running)
    waiting = view.gauge(view.model.metrics.waiting)
    if running:
        in_flight.append(f"{view.model.metrics.running[0]} = {running:g}")
        short.append(f"{view.model.metrics.running[0]} {running:g}")
    if waiting:
        in_flight.append(f"{view.model.metrics.waiting[0]} = {waiting:g}")
        short.append(f"{view.model.metrics.waiting[0]} {waiting:g}")
    # vLLM's stats line: every 10 s while there is work (debug when idle). A last line that
    # counts running requests at 0 tokens/s is the engine's own word for a stalled batch.
    stats = view.stats_lines()
    if stats:
        m = _STATS_RUNNING.search(stats[-1])
        if m and int(m.group("running")) > 0 and float(m.group("gen")) == 0.0:
            in_flight.append(f"the engine's last stats line: {m.group(0)}")
    deltas = view.progress_deltas()
    grew = {k: v for k, v in deltas.items() if v > 0}
    if grew:
        progress.append(", ".join(f"{k} +{v:g}" for k, v in grew.items()))

    # No API port yet: the server has not finished starting (vLLM opens it after the engine's
    # start-up), so an engine core waiting on its workers is start-up work, not a request.
    cores_waiting = [
        c for c in view.engine_cores if c.same_phase and c.phase == b.WAITING_ON_WORKERS
    ] if ev.http else []
    for c in cores_waiting:
        in_flight.append(
            f"the engine core {c.label} waited on its workers for the whole window "
            f"({c.phase_detail})"
        )
    if cores_waiting:
        short.append("the engine core waits on its workers")
    stuck = _stuck_workers(view)
    in_step_moving = [
        w
        for w in view.workers
        if w.stack_ok and w.phase in _BUSY_PHASES and w.moved is True and not w.stopped
    ]
    if in_step_moving:
        progress.append(f"{len(in_step_moving)} worker(s) moved through the step")
    else:
        # a stack that differs between the window's samples, busy in at least one, is moving
        # (under saturating load GET /metrics may answer late and a non-streaming client gets
        # no byte until its answer is whole: the engine's own stacks still show it stepping)
        moving = [p for p in view.engine_cores + view.workers
                  if p.stack_ok and p.moved is True and not p.stopped
                  and any(ph in _BUSY_PHASES for ph, _ in p.phases)]
        if moving:
            progress.append(f"{len(moving)} engine process(es) moved between the window's samples")
    if stuck and not in_step_moving:
        # first: the findings lead with the process the step waits on
        in_flight.insert(0, "; ".join(_describe(w) for w in stuck[:3]))
        # the one the others wait for: a stopped rank, else one that is not waiting in (or
        # spinning at) the step's collective
        waiters = {w.pid for w in view.collective_waiters()}
        odd = (
            [w for w in stuck if w.stopped]
            or [w for w in stuck if w.phase != b.IN_COLLECTIVE and w.pid not in waiters]
            or stuck
        )
        named = odd
    elif cores_waiting:
        named = cores_waiting

    dead = [p for p in view.engine_cores + view.workers if not p.alive]
    # a process already reaped is in no process list: the engine's log says who died
    log_deaths = view.model.deaths_in_log(ev.log.lines) if ev.has("log") else []
    start_up = [p for p in view.procs if p.phase in b.START_UP_PHASES]
    answering = any(h.get("ok") for h in ev.http)
    facts: dict[str, Any] = {
        "engine": view.model.name,
        "in_flight": in_flight,
        "progress": progress,
        "connections_source": conn_source,
        "metrics_read": view.metrics_read(),
        "named": [],
        "canary": None,
    }
    canary = view.canary()
    if canary is not None:
        facts["canary"] = canary
        if canary.get("sent") and canary.get("ok"):
            progress.append(f"the 1-token canary answered in {canary.get('latency_s') or 0:.2f} s")
        elif canary.get("sent") and isinstance(canary.get("code"), int):
            # an HTTP answer (401 for a wrong key, 4xx, 5xx): the front end answered in time;
            # a refused request is not a hung engine
            progress.append(f"the 1-token canary was answered with HTTP {canary['code']} "
                            f"in {canary.get('latency_s') or 0:.2f} s (refused, not hung)")
        elif canary.get("sent"):
            in_flight.append(f"the 1-token canary got no answer: {canary.get('error')}")
            short.append("the 1-token canary got no answer")

    if dead:
        d = dead[0]
        facts.update(
            state="dead",
            named=[_ref(p) for p in dead],
            reason=(
                f"the engine lost {d.label}: it "
                + ("is a zombie (exited, not reaped)" if d.proc.zombie else "exited")
                + f"; {view.model.title} shuts the whole server down when an engine process dies"
            ),
        )
        return facts
    if log_deaths and not answering:
        d = log_deaths[-1]
        who = {"engine-core": "the engine core", "worker": "a worker"}.get(d["role"], d["role"])
        if d.get("title"):
            who += f" ({d['title']})"
        if d.get("pid"):
            who += f", pid {d['pid']},"
        facts.update(
            state="dead",
            named=[{"host": view.procs[0].host, "pid": d.get("pid"), "rank": None,
                    "role": d["role"], "label": who}],
            reason=(f"the log says {who} died: {d['line'][-160:]}; {view.model.title} shuts the "
                    "whole server down when an engine process dies"),
        )
        return facts
    if not answering and start_up:
        p = start_up[0]
        facts.update(
            state="starting",
            named=[_ref(p)],
            reason=f"starting: {p.label} is {p.phase} ({p.phase_detail})",
        )
        return facts
    engine_side = bool(cores_waiting or stuck or running or waiting)
    engine_procs = [p for p in view.engine_cores + view.workers if p.stack_ok]
    engine_idle = bool(engine_procs) and all(
        p.phase == b.IDLE and p.same_phase for p in engine_procs
    )
    if in_flight and not progress and not engine_side and engine_idle:
        # requests wait, and the engine has none of them: the front end holds them
        api = view.api_servers[:1]
        api_txt = ""
        if api:
            a = api[0]
            api_txt = (
                f"; the API server {a.label} is at {a.innermost or a.phase_detail}"
                if a.phase != b.SERVING
                else f"; the API server {a.label}"
            )
        facts.update(
            state="frontend",
            named=[_ref(a) for a in api],
            reason=(
                "requests wait in the front end, the engine is idle: "
                + ", ".join(short[:2])
                + api_txt
            ),
        )
        return facts
    if in_flight and not progress:
        who = named[0] if named else None
        facts.update(
            state="stuck",
            named=[_ref(w) for w in named],
            reason=(
                f"work in flight, no progress over {window:.1f} s: "
                + ", ".join(short[:3] or in_flight[:1])
                + (f"; stuck: {who.label}, {_why(who)}" if who else "")
            ),
            detail="; ".join(in_flight),
        )
        return facts
    if progress:
        reason = f"serving, moving over {window:.1f} s: " + "; ".join(progress[:3])
        # Under saturating load the API's /health can miss its deadline while the engine
        # generates and GET /metrics answers: the front end is slow, not stuck
        # (seen: 2 cores, 3 clients streaming). Clients that got bytes back prove it as well.
        served = ("GET /metrics answered" if view.metrics_answered_at_end()
                  else "clients got bytes back" if answered else "")
        slow_health = not answering and bool(served)
        if slow_health:
            late = next((h for h in ev.http if not h.get("ok")), {})
            reason += (f"; {late.get('url') or '/health'} gave {late.get('error') or 'no answer'},"
                       f" but {served}: the front end is slow under load, not stuck")
        facts.update(state="moving", reason=reason, api_answers=answering or slow_health)
        return facts
    if not ev.has("engine_progress") and not engine_idle:
        # nothing measured from outside and no idle stacks to go by: say so, claim nothing
        facts.update(state="unknown", reason="no progress data (/metrics, client connections) "
                     "and no engine stacks idle in both samples")
        return facts
    cores_idle = [c for c in view.engine_cores + view.workers if c.phase == b.IDLE]
    idle_txt = f"; {len(cores_idle)} engine process(es) waiting for requests" if cores_idle else ""
    seen = []
    if conn_source:
        seen.append("no client request waiting")
    if facts["metrics_read"]:
        seen.append("running/waiting gauges 0")
    facts.update(
        state="idle",
        reason="idle: nothing in flight ("
        + (", ".join(seen) or "no request seen")
        + ")"
        + idle_txt,
    )
    return facts


def _ref(p: EngineProc) -> dict[str, Any]:
    return {"host": p.host, "pid": p.pid, "rank": p.rank, "role": p.role, "label": p.label}


@check(
    "engine.progress",
    "Work in flight and forward progress of the engine",
    needs=["timing", "processes"],
    causes=["request-deadlock", "nccl-desync", "frontend-hang", "rank-died"],
)
def engine_progress(ev: Evidence):
    """Reads the engine's state over the window from outside: client connections on the API
    port that got no bytes back (the kernel's socket table, both ends of the window), the
    engine's ``/metrics`` gauges and counters at both ends (read-only GETs), the engine core and
    workers' phases in both stack samples (the engine model says what each frame means), the
    stats log line and, with ``--probe-generate``, a 1-token canary. Work in flight with no
    forward progress is a stuck step (``request-deadlock``; with tensor parallel and one rank
    stopped or outside the collective, ``nccl-desync`` naming that rank), whatever ``/health``
    says.

    Confirm by hand: ss -tin state established '( sport = :PORT )'; curl -s
    http://127.0.0.1:PORT/metrics | grep -E 'num_requests_running|generation_tokens_total' (twice);
    py-spy dump --pid ENGINE_CORE_PID
    """
    facts = assess(ev)
    if facts is None:
        return cleared("not a known inference engine: no engine model applies")
    state = facts["state"]
    view: EngineView = ev.engine
    out_facts: dict[str, Any] = {"engine": facts}
    if state == "stuck":
        signals = []
        named = facts["named"]
        refs = [f"pid:{n['pid']}" for n in named]
        odd = [
            {"host": n["host"], "pid": n["pid"], "rank": n["rank"], "why": n["label"]}
            for n in named
        ]
        waiters = view.collective_waiters()
        if named and waiters and any(w.pid != named[0]["pid"] for w in waiters):
            peers = ", ".join(w.label for w in waiters if w.pid != named[0]["pid"])
            signals.append(
                support(
                    "nccl-desync",
                    0.75,
                    f"{named[0]['label']} never reaches the step's collective while its peer(s) "
                    f"{peers} spin in it; {facts['detail']}",
                    refs,
                    odd,
                )
            )
        else:
            signals.append(support("request-deadlock", 0.75, facts["detail"], refs, odd))
        signals.append(
            against(
                "frontend-hang",
                0.6,
                "the engine, not the front end, holds the "
                "requests: " + "; ".join(facts["in_flight"][:2]),
            )
        )
        return fired(facts["reason"], *signals, facts=out_facts)
    if state == "dead":
        named = facts["named"]
        odd = [
            {"host": n["host"], "pid": n["pid"], "rank": n["rank"], "why": n["label"] + " exited"}
            for n in named
        ]
        return fired(
            facts["reason"],
            support("rank-died", 0.8, facts["reason"],
                    [f"pid:{n['pid']}" for n in named if n.get("pid")], odd),
            facts=out_facts,
        )
    if state == "frontend":
        named = facts["named"]
        return fired(
            facts["reason"],
            support("frontend-hang", 0.55, facts["reason"], [f"pid:{n['pid']}" for n in named]),
            against(
                "request-deadlock",
                0.6,
                "the engine core and workers wait for requests: the engine holds none of them",
            ),
            against(
                "post-load-deadlock",
                0.6,
                "the API port is open and the engine's processes sit in their idle loop, waiting "
                "for requests: start-up is over",
            ),
            facts=out_facts,
        )
    if state == "moving":
        signals = [against("request-deadlock", 0.8, facts["reason"]),
                   against("nccl-desync", 0.6, facts["reason"])]
        if facts.get("api_answers"):
            signals.append(against("frontend-hang", 0.6, facts["reason"]))
        return cleared(facts["reason"], *signals, facts=out_facts)
    if state == "idle":
        return cleared(
            facts["reason"], against("request-deadlock", 0.6, facts["reason"]), facts=out_facts
        )
    return cleared(facts["reason"], facts=out_facts)
