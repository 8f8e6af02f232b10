"""The short terminal summary: verdict, top causes, facts without a cause, the next command.

Data strings pass through ``_clean`` so a process name carrying terminal escape sequences cannot
repaint or retitle the user's terminal; colour codes are added only by this module and only
when asked.

Width: ``width=None`` cuts nothing (stdout is a file or a pipe, or ``--wide``). With a width
(the terminal's), the verdict and the headline wrap, since they are the answer; the cause rows
are cut, with a note saying what shows them whole; the next command is never cut: it wraps
at spaces with shell continuations, so it can still be copied and run.

Layer: report; may import: the standard library, jinja2, hangdoctor.report and the foundation
(it reads the analysis model only).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from hangdoctor.report.analysis_view import build_view

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
_WARN = "\x1b[1;33m"
MIN_WIDTH = 40
UNLIMITED = 1 << 30
# Facts a check established without a cause (a stopped process, a process that is not Python):
# shown because the user must know them whatever the ranking says.
_NOTE_CHECKS = ("process.alive",)


def _clean(value: Any, limit: int = UNLIMITED) -> str:
    """One line of data text: control characters shown as '?', clipped to ``limit``."""
    s = _CONTROL.sub("?", " ".join(str(value).split()))
    if limit <= 1:
        return s[:limit]
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _wrap(text: str, width: int, first: str, rest: str, max_lines: int = 4) -> list[str]:
    """Word-wrap ``text`` after ``first`` (continuations start with ``rest``), at most
    ``max_lines`` lines; a word longer than a line is cut."""
    lines: list[str] = []
    cur, empty = first, True
    for w in text.split(" "):
        if empty:
            cur, empty = cur + w, False
        elif len(cur) + 1 + len(w) <= width:
            cur += " " + w
        else:
            lines.append(cur)
            cur = rest + w
    lines.append(cur)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1] + " …"
    return [x if len(x) <= width else x[: width - 1] + "…" for x in lines]


def _wrap_command(cmd: str, width: int, first: str, rest: str) -> list[str]:
    """A command over several lines, cut at spaces only, each but the last ending in `` \\``:
    pasted into a shell it is the same command."""
    words = cmd.split(" ")
    lines: list[str] = []
    cur = first
    for w in words:
        if cur in (first, rest):
            cur += w
        elif len(cur) + 1 + len(w) + 2 <= width:
            cur += " " + w
        else:
            lines.append(cur + " \\")
            cur = rest + w
    lines.append(cur)
    return lines


def _notes(analysis: dict) -> list[str]:
    """Texts of fired cause-less signals of the note checks (a stopped process, no Python)."""
    out: list[str] = []
    checks = analysis.get("checks")
    for c in checks if isinstance(checks, list) else []:
        if not isinstance(c, dict) or c.get("id") not in _NOTE_CHECKS or c.get("verdict") != "fired":
            continue
        for s in c.get("signals") or []:
            if isinstance(s, dict) and s.get("cause") is None and s.get("text"):
                if str(s["text"]) not in out:
                    out.append(str(s["text"]))
    return out


def _uncollected(analysis: dict) -> list[str]:
    """Sources that failed (a --log that does not exist, a host that did not answer)."""
    out = []
    collection = analysis.get("collection")
    for m in collection if isinstance(collection, list) else []:
        if not isinstance(m, dict) or m.get("status") not in ("failed", "denied", "timeout"):
            continue
        source = str(m.get("source") or "")
        if source.startswith(("stacks:", "http")):
            continue  # "stacks" says it for all of them; a port that does not answer is evidence
        detail = str(m.get("detail") or m.get("status"))
        remedy = f" ({m['remedy']})" if m.get("remedy") else ""
        out.append(f"{source}: {detail}{remedy}")
    return out


def render_terminal(
    analysis: dict,
    color: bool = False,
    width: int | None = 100,
    written: Sequence[str] = (),
) -> str:
    """Return a few lines for a terminal: verdict, top 3 causes, notes, next command, paths.

    ``width`` is the terminal's width in columns, or None for no cutting at all. ``written``
    lists the report files written, shown last. ANSI colour only when ``color``.
    """
    v = build_view(analysis)
    limit = UNLIMITED if width is None else max(int(width), MIN_WIDTH)
    cut = False

    def paint(code: str, s: str) -> str:
        return f"{code}{s}{_RESET}" if color and code else s

    def clip(value: Any, room: int) -> str:
        nonlocal cut
        s = _clean(value)
        if len(s) > max(room, 10):
            cut = True
            return _clean(s, max(room, 10))
        return s

    verdict = v["verdict"] or "unknown"
    label = _clean(verdict.upper(), 20)
    painted = paint(_VERDICT_COLOR.get(v["verdict_class"], _BOLD), label)
    lines: list[str] = []
    reason = _clean(v["verdict_reason"])
    head = f"hangdoctor: {label}" + (f" — {reason}" if reason else "")
    wrapped = _wrap(head, limit, "", "    ")
    wrapped[0] = wrapped[0].replace(f"hangdoctor: {label}", f"hangdoctor: {painted}", 1)
    lines += wrapped
    causes = v["causes"][:3]
    # "Most likely X (score): summary" says again what cause 1's row says: on a terminal the
    # row is shown whole instead (it is the answer), and the headline only when it says more.
    top_is_headline = bool(causes) and v["headline"].startswith(f"Most likely {causes[0]['id']} ")
    if v["headline"] and not top_is_headline:
        lines += _wrap(_clean(v["headline"]), limit, "  ", "    ")
    if causes:
        id_w = min(max(len(_clean(c["id"], 28)) for c in causes), 28)
        for i, c in enumerate(causes, 1):
            row = f"  {i}. {_clean(c['id'], 28):<{id_w}}  {c['score']:.2f} "
            confidence = f"{c['confidence']:<6}  "
            if i == 1 and top_is_headline:
                wrapped = _wrap(_clean(c["summary"] or c["title"]), limit, row + confidence, "     ", 6)
                wrapped[0] = row + paint(_DIM, confidence) + wrapped[0][len(row + confidence):]
                lines += wrapped
                continue
            summary = clip(c["summary"] or c["title"], limit - len(row) - len(confidence))
            lines.append(row + paint(_DIM, confidence) + summary)
        if len(v["causes"]) > 3:
            lines.append(paint(_DIM, f"     … {len(v['causes']) - 3} more in the report"))
    else:
        lines.append("  no cause scored above the threshold")
    for note in _notes(analysis):
        lines += [paint(_WARN, x) if i == 0 else x
                  for i, x in enumerate(_wrap(_clean(note), limit, "  ! ", "    "))]  # fmt: skip
    for miss in _uncollected(analysis)[:4]:
        lines.append("  not collected: " + clip(miss, limit - 17))
    odd = [r for r in v["ranks"] if r["odd"]]
    if odd:
        names = ", ".join(
            f"rank {r['rank']} (pid {r['pid']})" if r["rank"] is not None else f"pid {r['pid']}"
            for r in odd[:6]
        )
        lines.append("  odd one out: " + clip(names, limit - 15))
    for r in v.get("risks", [])[:2]:
        lines += _wrap(_clean(f"{r['id']} (alone, never a cause): {r['text']}"), limit, "  risk: ", "    ")
    for k in v["known_issues"][:2]:
        lines += _wrap(_clean(k["text"]), limit, "  known: ", "    ")
    split = v.get("split")
    if split and split.get("observe") and len(causes) >= 2:
        lines += _wrap(_clean(f"{' vs '.join(split['between'])}: {split['observe']}"), limit, "  split: ", "    ")
    exp = v["next_experiment"]
    if exp:
        lines += _wrap(_clean(f"{exp['toggle']} — fixed: {exp['if_fixed']}; not: {exp['if_not']}"),
                       limit, "  try: ", "    ")
    if v["next_command"]:
        lines += _next_lines(_clean(v["next_command"]), limit)
    if cut:
        note = f"(cut at {limit} columns: --wide or -o report.html shows all)"
        lines += [paint(_DIM, x) for x in _wrap(note, limit, "  ", "   ")]
    for path in written:
        lines.append("  report: " + _clean(path))
    return "\n".join(lines) + "\n"


def _next_lines(cmd: str, width: int) -> list[str]:
    """The next command: on one line when it fits, else wrapped (never cut), comment apart."""
    one = "  next: " + cmd
    if len(one) <= width:
        return [one]
    command, sep, comment = cmd.partition("   # ")
    if not sep:
        command, sep, comment = cmd.partition(" # ")
    out = []
    if comment:
        out += _wrap("# " + comment.strip(), width, "  next: ", "        ")
        out += _wrap_command(command.strip(), width, "        ", "          ")
    else:
        out += _wrap_command(command.strip(), width, "  next: ", "          ")
    return out
