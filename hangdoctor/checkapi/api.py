"""The check API: what a check declares, what it returns, and the four verdicts.

A check is a function of the evidence, declared with :func:`check`::

    @check("gpu.util-power", "GPU utilisation read against power",
           needs=["gpus"], causes=["nccl-desync", "gpu-kernel-spin"])
    def util_power(ev: Evidence) -> Result:
        ...
        return fired("GPU 0 at 100 % utilisation but idle power", Signal("nccl-desync", 0.3, "..."))

Verdicts: **fired** (at least one signal for a cause or a finding), **cleared** (had the
evidence and ruled its causes out; may carry signals against them), **skipped** (evidence
missing: the runner does this from ``needs``, or the check returns :func:`skipped`), and
**errored** (the check raised; the runner keeps the traceback and goes on).

Layer: checkapi; may import: the standard library, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.knowledge and the foundation.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

FIRED, CLEARED, SKIPPED, ERRORED = "fired", "cleared", "skipped", "errored"


@dataclass
class Signal:
    """Evidence for (weight > 0) or against (weight < 0) one cause; ``cause=None`` is a plain
    finding worth showing (a permission problem, an explanation) that speaks for no cause."""

    cause: str | None
    weight: float
    text: str
    refs: list[str] = field(default_factory=list)
    odd: list[dict[str, Any]] = field(default_factory=list)  # odd ones out, for the report

    def to_dict(self) -> dict[str, Any]:
        d = {"cause": self.cause, "weight": round(self.weight, 3), "text": self.text, "refs": self.refs}
        if self.odd:
            d["odd"] = self.odd
        return d


@dataclass
class Result:
    verdict: str
    summary: str = ""
    signals: list[Signal] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    error: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # inputs to the overall verdict


def fired(summary: str, *signals: Signal, facts: dict[str, Any] | None = None) -> Result:
    return Result(FIRED, summary, list(signals), facts=facts or {})


def cleared(summary: str, *signals: Signal, facts: dict[str, Any] | None = None) -> Result:
    return Result(CLEARED, summary, list(signals), facts=facts or {})


def skipped(missing: list[str], summary: str = "") -> Result:
    return Result(SKIPPED, summary or "needs " + ", ".join(missing), missing=list(missing))


def against(cause: str, weight: float, text: str, refs: list[str] | None = None) -> Signal:
    return Signal(cause, -abs(weight), text, refs or [])


def support(cause: str, weight: float, text: str, refs: list[str] | None = None,
            odd: list[dict[str, Any]] | None = None) -> Signal:
    return Signal(cause, abs(weight), text, refs or [], odd or [])


@dataclass
class Check:
    id: str
    title: str
    func: Callable[..., Result]
    needs: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    module: str = ""

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.func) or ""

    @property
    def confirm(self) -> str:
        """The 'Confirm by hand' part of the docstring."""
        doc = self.doc
        marker = "Confirm by hand:"
        if marker in doc:
            return doc.split(marker, 1)[1].strip()
        return ""

    def __call__(self, ev: Any) -> Result:
        return self.func(ev)


def check(id: str, title: str, needs: list[str] | tuple[str, ...] = (),
          causes: list[str] | tuple[str, ...] = ()) -> Callable[[Callable[..., Result]], Check]:
    """Declare a check. ``needs``: evidence names (see hangdoctor.evidence.model.SOURCES)
    without which the check is skipped; ``causes``: cause ids it can speak for or against."""

    def wrap(func: Callable[..., Result]) -> Check:
        return Check(id=id, title=title, func=func, needs=list(needs), causes=list(causes),
                     module=func.__module__)

    return wrap
