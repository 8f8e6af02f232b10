"""The short terminal summary: verdict, top causes, where the report went.

Data strings pass through ``_clean`` so a process name carrying terminal escape sequences cannot
repaint or retitle the user's terminal; colour codes are added only by this module and only
when asked.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from hangdoctor.report.view import build_view

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_RESET = "\x1b[0m"
_VERDICT_COLOR = {
    "hung": "\x1b[1;31m",
    "dead": "\x1b[1;35m",
    "progressing": "\x1b[1;33m",
    "healthy": "\x1b[1;32m",
    "inconclusive": "\x1b[1;36m",
}
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"


def _clean(value: Any, limit: int) -> str:
    """One line of data text: control characters shown as '?', clipped to ``limit``."""
    s = _CONTROL.sub("?", " ".join(str(value).split()))
    if limit <= 1:
        return s[:limit]
    return s if len(s) <= limit else s[: limit - 1] + "…"


def render_terminal(
    analysis: dict, color: bool = False, width: int = 100, written: Sequence[str] = ()
) -> str:
    """Return a few lines for stderr/stdout: verdict, top 3 causes, next command, report paths.

    ``written`` lists the report files written, shown last. ANSI colour only when ``color``.
    """
    v = build_view(analysis)
    width = max(int(width), 40)

    def paint(code: str, s: str) -> str:
        return f"{code}{s}{_RESET}" if color and code else s

    verdict = v["verdict"] or "unknown"
    label = _clean(verdict.upper(), 20)
    reason = _clean(v["verdict_reason"], max(width - len("hangdoctor: ") - len(label) - 3, 10))
    lines = [f"hangdoctor: {paint(_VERDICT_COLOR.get(v['verdict_class'], _BOLD), label)}"
             + (f" — {reason}" if reason else "")]  # fmt: skip
    if v["headline"]:
        lines.append("  " + _clean(v["headline"], width - 2))
    causes = v["causes"][:3]
    if causes:
        id_w = min(max(len(_clean(c["id"], 28)) for c in causes), 28)
        for i, c in enumerate(causes, 1):
            head = f"  {i}. {_clean(c['id'], 28):<{id_w}}  {c['score']:.2f} "
            confidence = f"{c['confidence']:<6}  "
            summary = _clean(c["summary"] or c["title"], max(width - len(head) - 8, 10))
            lines.append(head + paint(_DIM, confidence) + summary)
        if len(v["causes"]) > 3:
            lines.append(paint(_DIM, f"     … {len(v['causes']) - 3} more in the report"))
    else:
        lines.append("  no cause scored above the threshold")
    odd = [r for r in v["ranks"] if r["odd"]]
    if odd:
        names = ", ".join(
            f"rank {r['rank']} (pid {r['pid']})" if r["rank"] is not None else f"pid {r['pid']}"
            for r in odd[:6]
        )
        lines.append("  odd one out: " + _clean(names, width - 15))
    for k in v["known_issues"][:2]:
        lines.append("  known: " + _clean(k["text"], width - 9))
    exp = v["next_experiment"]
    if exp:
        lines.append("  try: " + _clean(f"{exp['toggle']} — fixed: {exp['if_fixed']}; not: {exp['if_not']}", width - 7))
    if v["next_command"]:
        lines.append("  next: " + _clean(v["next_command"], width - 8))
    for path in written:
        lines.append("  report: " + _clean(path, 4096))
    return "\n".join(lines) + "\n"
