"""Progress across looks: is work pending, and has the server moved since the last look?

``judge(sample, state, ...)`` reads one cheap look (:mod:`hangdoctor.collect.liveness`) and the
state kept from the previous one, and returns the verdict and the state to keep. Pure: no I/O,
the caller stores the state (a small file for ``hangdoctor probe``, memory for ``watch``).

The rule: an incident is work pending and no progress for ``after_s`` seconds, or a server that
is gone. ``/health`` is one signal among several, never the judge of progress: vLLM's stays 200
while a step is stuck. Work pending is any of the engine's running / waiting gauges above zero,
or client connections established on the API port (the gauges can read 0 through a wedge: they
are published once per step, and the step that took the request never finished). Progress is a
change in any of the engine's progress counters (tokens, iterations, requests finished); for a
server that is no known engine, log lines other than health checks and scrapes.

Exit codes follow the plugin convention of Nagios, Node Problem Detector and load balancer
script hooks: 0 ok, 1 warning, 2 critical, 3 unknown.

Layer: triage; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot, hangdoctor.parsers and the foundation.
"""

from __future__ import annotations

from typing import Any

from hangdoctor.engines import ENGINES, EngineModel

SCHEMA_VERSION = 1
STATE_VERSION = 1
OK, WARNING, CRITICAL, UNKNOWN = "ok", "warning", "critical", "unknown"
EXIT = {OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3}
# the states a look can find, and the status each gives
STATES = {
    "idle": OK,  # nothing pending
    "progressing": OK,  # work pending and it moved since the last look
    "pending": OK,  # work pending, not moved yet, for less than the warning time
    "stalling": WARNING,  # work pending, not moved for warn_after_s
    "slow": WARNING,  # health answered, but slower than slow_s
    "not-answering": WARNING,  # connected, no answer within the timeout (critical after after_s)
    "hung": CRITICAL,  # work pending, not moved for after_s (or no answer for after_s)
    "unhealthy": CRITICAL,  # the health path answered 5xx
    "dead": CRITICAL,  # nothing listens, or a watched process is gone
    "unknown": UNKNOWN,
}
# counter families that move once per engine step, besides the engine model's progress names
_STEP_COUNTERS = ("iteration_tokens_total_count", "iteration_tokens_count")


def engine_of(values: dict[str, float]) -> EngineModel | None:
    """The engine whose metric family these names belong to."""
    for e in ENGINES:
        if e.metrics.prefix and any(k.startswith(e.metrics.prefix) for k in values):
            return e
    return None


def progress_counters(values: dict[str, float], engine: EngineModel | None) -> dict[str, float]:
    """The counters that move only when the engine makes progress."""
    if engine is None:
        return {}
    names = set(engine.metrics.progress)
    names |= {k for k in values if k.startswith(engine.metrics.prefix) and k.endswith(_STEP_COUNTERS)}
    return {k: values[k] for k in sorted(names) if k in values}


def _gauge(values: dict[str, float], names: tuple[str, ...]) -> float | None:
    got = [values[n] for n in names if n in values]
    return sum(got) if got else None


def _moved(before: dict[str, float], now: dict[str, float]) -> list[str]:
    """Counters that changed (a drop is a restart: counted as a change)."""
    return [k for k, v in now.items() if k in before and before[k] != v]


def _health_line(h: dict[str, Any] | None) -> str:
    if not h:
        return "no health path"
    if h.get("code") is not None:
        return "%s %d in %.2f s" % (h["path"], h["code"], h.get("latency_s") or 0.0)
    return "%s: %s" % (h["path"], h.get("error"))


def judge(
    sample: dict[str, Any],
    state: dict[str, Any] | None,
    *,
    after_s: float,
    warn_after_s: float | None = None,
    slow_s: float = 1.0,
    use_connections: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the verdict, the state to keep for the next look). ``state`` is None on the first look
    or when it belongs to another target."""
    now = float(sample["at"])
    target = "%s:%s" % (sample.get("host"), sample.get("port"))
    if state is not None and (state.get("target") != target or state.get("version") != STATE_VERSION
                              or not isinstance(state.get("at"), (int, float)) or state["at"] > now):
        state = None  # another server's, another format's, or a clock that went back
    warn_after_s = after_s / 2.0 if warn_after_s is None else warn_after_s
    h = sample.get("health")
    m = sample.get("metrics") or {}
    values = m.get("values") or {} if m.get("ok") else {}
    engine = engine_of(values)
    counters = progress_counters(values, engine)
    procs = sample.get("processes") or []
    log = sample.get("log") or {}

    running = _gauge(values, engine.metrics.running) if engine else None
    waiting = _gauge(values, engine.metrics.waiting) if engine else None
    conns = sample.get("connections") if use_connections else None
    pending_from = []
    if (running or 0) > 0:
        pending_from.append("running=%g" % running)
    if (waiting or 0) > 0:
        pending_from.append("waiting=%g" % waiting)
    if (conns or 0) > 0:
        pending_from.append("%d client connection%s" % (conns, "" if conns == 1 else "s"))
    pending = bool(pending_from)

    # progress since the last look: engine counters, else (no engine counters) log work lines
    moved: list[str] = []
    first = state is None
    if not first:
        if counters:
            moved = _moved(state.get("counters") or {}, counters)
        elif (log.get("work_lines") or 0) > 0:
            moved = ["log +%d lines" % log["work_lines"]]
    progress = None if first else bool(moved)

    # the stall clock: the last look that saw progress or nothing pending
    clock_at = now if (first or not pending or moved) else float(state.get("clock_at", now))
    stalled_s = 0.0 if not pending else max(0.0, now - clock_at)

    answered = h is None or h.get("code") is not None
    if h is None:  # no health path asked: the /metrics exchange tells whether anything listens
        connected = not str(m.get("error") or "").startswith("connect failed")
    else:
        connected = bool(h.get("connected"))
    bad_since = None if answered else (now if first or state.get("bad_since") is None else float(state["bad_since"]))

    # a look that saw progress is no stall, even with after_s 0 (watch's use)
    stalled = pending and not moved and not first
    # with no counter and no log, nothing shows progress: a stall is at most a warning
    visible = bool(counters) or bool(log.get("path"))
    dead_procs = [p for p in procs if not p.get("alive")]
    if not connected:
        name, why = "dead", "nothing answers on port %s (%s)" % (
            sample.get("port"), (h or m).get("error"))
    elif dead_procs and procs:
        name, why = "dead", "process%s %s gone" % (
            "es" if len(dead_procs) > 1 else "", ", ".join(str(p["pid"]) for p in dead_procs[:4]))
    elif not answered:
        gone_s = 0.0 if bad_since is None else now - bad_since
        name = "hung" if gone_s >= after_s else "not-answering"
        why = "%s, for %.0f s" % (_health_line(h), gone_s)
    elif h is not None and h["code"] >= 500:
        name, why = "unhealthy", _health_line(h)
    elif stalled and stalled_s >= after_s and visible:
        name, why = "hung", "%s and no progress for %.0f s" % (", ".join(pending_from), stalled_s)
    elif stalled and stalled_s >= warn_after_s:
        name, why = "stalling", "%s and no progress for %.0f s" % (", ".join(pending_from), stalled_s)
    elif h is not None and (h.get("latency_s") or 0.0) > slow_s:
        name, why = "slow", _health_line(h)
    elif pending:
        name = "progressing" if moved else "pending"
        why = ", ".join(pending_from) + ("; moved: " + ", ".join(moved[:3]) if moved
                                        else "; first look" if first else "; not moved yet")
    else:
        name, why = "idle", "nothing pending"
    status = STATES[name]
    if pending and not visible:
        why += " (no engine counters and no --log: progress is not visible, a stall stays a warning)"

    verdict = {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "exit_code": EXIT[status],
        "state": name,
        "summary": "%s %s: %s" % (status.upper(), name, why),
        "target": target,
        "engine": engine.name if engine else None,
        "work_pending": pending,
        "pending_from": pending_from,
        "running": running,
        "waiting": waiting,
        "connections": sample.get("connections"),
        "progress": progress,
        "moved": moved,
        "seconds_since_progress": round(stalled_s, 3),
        "health": h,
        "metrics": {"ok": bool(m.get("ok")), "error": m.get("error"), "counters": counters},
        "processes": procs,
        "first_look": first,
        "at": now,
        "took_s": sample.get("took_s"),
    }
    new_state = {
        "version": STATE_VERSION,
        "target": target,
        "at": now,
        # a look without counters (/metrics not read) keeps the last ones to compare with
        "counters": counters or (state or {}).get("counters") or {},
        "clock_at": clock_at,
        "bad_since": bad_since,
        "log_offset": log.get("size"),
        "looks": (0 if first else int(state.get("looks", 0))) + 1,
    }
    return verdict, new_state
