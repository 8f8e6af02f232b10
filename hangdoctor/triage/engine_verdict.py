"""The verdict from the engine's progress (checks/engine_progress.py), kept apart from the
general verdict: an API that answers proves little, progress does.

- work in flight and no forward progress over the window: **hung**, whatever /health says;
- requests held by the front end while the engine idles: **hung** (the front end);
- the engine moved (tokens generated, a client got bytes, a rank moved): **healthy** when the
  API answers (serving), else left to the general verdict (starting, compiling: progressing);
- idle with nothing in flight and the API answering: **healthy**;
- an engine core or worker that exited: **dead** (the engines shut the server down then).
Anything else (no engine model, starting up, no data) returns None: the general rules decide.

Layer: triage; may import: hangdoctor.triage, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.engines, hangdoctor.knowledge, hangdoctor.snapshot, hangdoctor.parsers and the
foundation.
"""

from __future__ import annotations

from typing import Any


def engine_verdict(facts: dict[str, Any]) -> tuple[str, str] | None:
    """(verdict, one-line reason) from the engine facts, or None to let the others decide."""
    engine = facts.get("engine")
    if not isinstance(engine, dict):
        return None
    state = engine.get("state")
    reason = str(engine.get("reason") or "")
    if state == "dead":
        return "dead", reason
    if state in ("stuck", "frontend"):
        if facts.get("answering"):
            reason += " (/health answers, which proves only that the engine is not known dead)"
        return "hung", reason
    if state in ("moving", "idle") and facts.get("answering"):
        return "healthy", reason
    if state == "moving" and engine.get("api_answers"):
        return "healthy", reason  # /health was late, GET /metrics answered: serving, slowly
    return None


def _canary_outcome(canary: dict[str, Any]) -> str:
    if canary.get("ok"):
        return "answered"
    if isinstance(canary.get("code"), int):  # an HTTP answer: refused (401 for a wrong key)
        return f"answered HTTP {canary['code']}, refused, not hung: {canary.get('error')}"
    return "no answer: " + str(canary.get("error"))


def intrusion_note(ev: Any) -> str:
    """What the engine-progress sources sent to the server, for the report's intrusion line."""
    raws = [s.get("engine_progress") for s in ev.snapshots if s.get("engine_progress")]
    if not raws:
        return ""
    ports = sorted({p for r in raws for p in r.get("ports") or []})
    note = ""
    if ports:
        note = "; GET /metrics at both ends of the window on port(s) " + ", ".join(map(str, ports))
    canary = next((r.get("canary") for r in raws if r.get("canary")), None) or {}
    if canary.get("sent"):
        note += (f"; one 1-token completion was sent (--probe-generate, model {canary.get('model')}):"
                 f" {_canary_outcome(canary)}")
    elif canary.get("asked"):
        note += f"; the 1-token canary (--probe-generate) was not sent: {canary.get('error')}"
    else:
        note += "; no generation request was sent (--probe-generate sends one 1-token completion)"
    return note
