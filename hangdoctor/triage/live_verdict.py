"""The verdict from what the window shows, for every process tree (engine or not): progress,
work pending, and threads that wait for input (docs/live-verdict.md).

- something moved (stacks that vary across the samples, CPU in varying frames, bytes through
  read/write, log growth): left to the general rules (progressing, or healthy when the API
  answers);
- a thread spinning on one line at high CPU in every sample: **hung** (a livelock);
- work pending (a request without an answer, a collective, a rendezvous, a file lock, a
  process that cannot run) and nothing moved: **hung**, whatever /health says;
- nothing pending and every thread waiting for outside input: **healthy** (idle); waiting only
  on timers: healthy when the log was written lately, else **inconclusive** (idle, or polling
  for something that never comes);
- anything else returns None: the general rules decide.

Layer: triage; may import: hangdoctor.triage, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.engines, hangdoctor.knowledge, hangdoctor.snapshot, hangdoctor.parsers and the
foundation.
"""

from __future__ import annotations

from typing import Any

# a periodic worker that wrote its log this lately is idle between two rounds of work
RECENT_LOG_S = 30.0


# Causes whose evidence is a fact about the job (a rank gone, ranks in different collectives,
# a GPU fault), not a reading of waits: with one of them strong, waiting threads are no idle.
_NOT_IDLE = ("rank-died", "nccl-desync", "gpu-fault", "gpu-kernel-spin")


def live_verdict(facts: dict[str, Any], window_s: float,
                 causes: list[dict[str, Any]] | None = None) -> tuple[str, str] | None:
    """(verdict, one-line reason), or None to let the general rules decide."""
    if facts.get("moving"):
        return None
    spinning = facts.get("spinning") or []
    if spinning:
        return "hung", (f"a thread spins on one line through the whole window ({spinning[0]}); "
                        "nothing else moved")
    pending = facts.get("pending") or []
    if pending:
        answering = " (/health answers, which proves only that the server is alive)" if facts.get("answering") else ""
        return "hung", f"work pending and nothing moved over {window_s:.1f} s: " + "; ".join(pending[:3]) + answering
    kind = facts.get("idle")
    if any(c["id"] in _NOT_IDLE and c["score"] >= 0.5 for c in causes or []):
        return None
    waits = "; ".join((facts.get("idle_waits") or [])[:3])
    if kind == "input":
        return "healthy", f"idle: nothing pending, every thread waits for input ({waits})"
    if kind == "timer":
        age = facts.get("log_age_s")
        if age is not None and age <= RECENT_LOG_S:
            return "healthy", (f"idle between rounds of periodic work: every thread sleeps on a timer, "
                               f"nothing pending, the log was written {age:.0f} s ago ({waits})")
        return "inconclusive", ("every thread sleeps on a timer and nothing is pending: idle, or "
                                "polling for something that never comes; a longer --window, or the "
                                f"log, tells them apart ({waits})")
    return None
