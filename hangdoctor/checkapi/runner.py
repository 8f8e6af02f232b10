"""Runs checks over the evidence: skips what lacks evidence, keeps going past a crash.

Layer: checkapi; may import: the standard library, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.knowledge and the foundation.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from hangdoctor.checkapi.api import ERRORED, SKIPPED, Check, Result


@dataclass
class Outcome:
    check: Check
    result: Result


def run_checks(checks: list[Check], ev: object) -> list[Outcome]:
    out = []
    for c in checks:
        missing = [n for n in c.needs if not ev.has(n)]  # type: ignore[attr-defined]
        if missing:
            out.append(Outcome(c, Result(SKIPPED, "needs " + ", ".join(missing), missing=missing)))
            continue
        try:
            result = c(ev)
            if not isinstance(result, Result):
                raise TypeError(f"check {c.id} returned {type(result).__name__}, not Result")
        except Exception as exc:
            result = Result(ERRORED, f"{type(exc).__name__}: {exc}", error=traceback.format_exc())
        out.append(Outcome(c, result))
    return out
