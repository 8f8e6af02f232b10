"""The Markdown rendering: pastes into a GitHub issue (65536 characters at most).

Same order as the HTML. Text outside code blocks is escaped so that data never becomes live
HTML or Markdown structure on GitHub; code blocks use a fence longer than any backtick run in
their content. When the report is over its byte budget the least important sections are
shortened first, then left out, and the report says which.

Layer: report; may import: the standard library, jinja2, hangdoctor.report and the foundation
(it reads the analysis model only).
"""

from __future__ import annotations

import html
import re
from typing import Any, Callable

from hangdoctor.report.analysis_view import build_view, fmt_num, frame_line

# Backslash-escapable characters that would otherwise start emphasis, links, code, tables or
# strikethrough in GitHub Markdown.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_WS = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_START = re.compile(r"^([#>+\-=]|\d+[.)])")
_BACKTICKS = re.compile(r"`+")
_PLAIN = re.compile(r"[\w.:/@=+,()\- ]*")

_OMITTED = "_Left out to fit the size limit; the HTML or JSON report has it._\n"

# What GitHub makes live in text: @mentions (they notify people), issue references (#12,
# org/repo#12, GH-12) and bare URLs (http://, https://, www.). A WORD JOINER (U+2060, shown as
# nothing) after the trigger character keeps the text as it reads and makes it inert.
_WJ = "\u2060"
_MENTION = re.compile(r"(?<![\w`])@(?=[A-Za-z0-9])")
_ISSUE_REF = re.compile(r"#(?=\d)|(?<![\w])(GH)-(?=\d)", re.IGNORECASE)
_BARE_URL = re.compile(r"(?i)\b(https?|ftp):(?=//)|\b(www)\.(?=\w)")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def _inert(s: str) -> str:
    """``s`` with mentions, issue references and bare URLs made inert (see _WJ)."""
    s = _MENTION.sub("@" + _WJ, s)
    s = _ISSUE_REF.sub(lambda m: (m.group(1) + _WJ + "-") if m.group(1) else "#" + _WJ, s)
    return _BARE_URL.sub(
        lambda m: (m.group(1) + _WJ + ":") if m.group(1) else (m.group(2) + _WJ + "."), s)


def md_text(value: Any, limit: int = 1000, start: bool = False) -> str:
    """Escape ``value`` for inline Markdown text or a table cell (one line, no live HTML).

    ``start``: the text begins a paragraph or list item, where ``#``, ``>``, ``-`` or ``1.``
    would open a block.
    """
    s = _CONTROL.sub(" ", _BIDI.sub("", str(value if value is not None else "")))
    s = _WS.sub(" ", s).strip()
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = _inert(_MD_SPECIAL.sub(r"\\\1", s))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    match = _LINE_START.match(s) if start else None
    if match:
        token = match.group(1)
        s = token[:-1] + "\\" + token[-1] + s[len(token) :]
    return s


def _summary(value: Any, limit: int = 300) -> str:
    """Escape text for a raw-HTML ``<summary>`` line (GitHub does no Markdown there)."""
    s = _WS.sub(" ", _CONTROL.sub(" ", _BIDI.sub("", str(value)))).strip()
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return _inert(html.escape(s, quote=True))


def fence(content: str, info: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run inside ``content``."""
    body = _CONTROL.sub(
        "?", _BIDI.sub("", content.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    "))
    )
    longest = max((len(m) for m in _BACKTICKS.findall(body)), default=0)
    bar = "`" * max(3, longest + 1)
    info = re.sub(r"[^a-z0-9_-]", "", info.lower())
    return f"{bar}{info}\n{body.rstrip(chr(10))}\n{bar}\n"


def _code(value: Any, table: bool = False, limit: int = 200) -> str:
    """An inline code span for an id or key (backticks dropped; pipes escaped in tables)."""
    s = _WS.sub(" ", _CONTROL.sub(" ", _BIDI.sub("", str(value)))).strip().replace("`", "")[:limit]
    if not s:
        return "–"
    if not _PLAIN.fullmatch(s):
        # Code spans are literal on GitHub, but data that looks like markup is shown as escaped
        # text instead, so no reader has to reason about span/tag precedence.
        return md_text(s, limit)
    return f"`{s.replace('|', chr(92) + '|')}`" if table else f"`{s}`"


def _details(summary: str, body: str, open_: bool = False) -> str:
    # A blank line after <summary> and before </details> lets GitHub render Markdown inside.
    attr = " open" if open_ else ""
    return (
        f"<details{attr}><summary>{_summary(summary)}</summary>\n\n{body.rstrip()}\n\n</details>\n"
    )


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def _range(values: list[float], unit: str = "") -> str:
    if not values:
        return "–"
    low, high = min(values), max(values)
    if abs(high - low) < 0.05:
        return f"{high:.0f}{unit}"
    return f"{low:.0f}–{high:.0f}{unit}"


def _opt(value: Any) -> str:
    return "–" if value is None or value == "" else md_text(value, 200)


# --- sections: each returns its versions, most complete first -------------------------------


def _header(v: dict[str, Any]) -> str:
    verdict = v["verdict"] or "unknown"
    lines = [f"# hangdoctor: {md_text(verdict.upper(), 40)}", ""]
    if v["verdict_reason"]:
        lines.append(f"**Verdict {md_text(verdict, 40)}:** {md_text(v['verdict_reason'])}")
        lines.append("")
    if v["headline"]:
        lines.append(f"**{md_text(v['headline'])}**")
        lines.append("")
    meta = []
    if v["generated_at"]:
        meta.append(f"generated {md_text(v['generated_at'], 80)}")
    if v["origin"]:
        meta.append(f"evidence: {md_text(v['origin'], 40)}")
    if v["window_s"] is not None:
        meta.append(f"window {v['window_s']:.1f} s")
    meta.append(f"{md_text(v['tool_name'], 80)} {md_text(v['tool_version'], 80)}".strip())
    lines.append("_" + " · ".join(meta) + "_")
    lines.append("")
    if v["command"]:
        lines.append(fence(v["command"], "sh") + "\n")
    return "\n".join(lines)


def _evidence_table(cause: dict[str, Any]) -> str:
    rows = []
    for side, items in (("for", cause["evidence"]), ("against", cause["against"])):
        for e in items:
            refs = ", ".join(e["refs"][:8]) + (" …" if len(e["refs"]) > 8 else "")
            rows.append(
                [side, _opt(e["check"]), fmt_num(e["weight"], 2), md_text(e["text"]), _opt(refs)]
            )
    return _table(["", "check", "weight", "evidence", "refs"], rows) if rows else ""


def _causes(v: dict[str, Any]) -> list[str]:
    if not v["causes"]:
        text = "## Likely causes\n\nNo cause scored above the threshold.\n"
        return [text]

    def full(evidence: bool, steps: bool, limit: int) -> str:
        parts = ["## Likely causes\n"]
        for i, c in enumerate(v["causes"][:limit], 1):
            parts.append(
                f"### {i}. {_code(c['id'])} {md_text(c['title'])} "
                f"— score {c['score']:.2f} ({c['confidence']})\n"
            )
            if c["summary"]:
                parts.append(md_text(c["summary"], start=True) + "\n")
            if c["odd_ones_out"]:
                odd = "; ".join(
                    f"**rank {_opt(o['rank'])}** (pid {_opt(o['pid'])}): {md_text(o['why'])}"
                    for o in c["odd_ones_out"]
                )
                parts.append(f"**Odd ones out:** {odd}\n")
            if evidence and (c["evidence"] or c["against"]):
                label = f"Evidence: {len(c['evidence'])} for, {len(c['against'])} against"
                parts.append(_details(label, _evidence_table(c), open_=i == 1))
            if steps and c["next_steps"]:
                parts.append("**Next steps:**\n\n" + fence("\n".join(c["next_steps"]), "sh"))
        if len(v["causes"]) > limit:
            parts.append(f"_{len(v['causes']) - limit} more causes left out._\n")
        if v.get("split") and v["split"].get("observe"):
            parts.append(f"**What would tell {' from '.join(_code(x) for x in v['split']['between'])}:** "
                         + md_text(v["split"]["observe"]) + "\n")
        if v.get("risks"):
            parts.append("**Risk factors** (settings and versions: they support a cause a symptom points "
                         "to, never lead alone):\n\n" + "\n".join(
                             f"- {_code(r['id'])}: {md_text(r['text'])}" for r in v["risks"]) + "\n")
        return "\n".join(parts)

    return [full(True, True, 50), full(False, True, 10), full(False, False, 5)]


def _ranks(v: dict[str, Any]) -> list[str]:
    if not v["ranks"]:
        return [""]
    header = ["", "host", "pid", "rank", "role", "GPU", "state", "wchan", "CPU %", "GPU util %",
              "GPU W", "GPU mem", "top frame", "wait"]  # fmt: skip

    def table(rows_in: list[dict[str, Any]]) -> str:
        rows = []
        for r in rows_in:
            mark = "**odd**" if r["odd"] else ("dead" if not r["alive"] else "")
            rows.append(
                [
                    mark, _opt(r["host"]), _opt(r["pid"]), _opt(r["rank"]), _opt(r["role"]),
                    _opt(r["gpu"]), _opt(r["state"]), _opt(r["wchan"]), fmt_num(r["cpu_pct"]),
                    _range(r["gpu_util_pct"]), _range(r["gpu_power_w"]),
                    _mib(r["gpu_mem_mib"]), _opt(r["top_frame"]), _opt(r["wait_kind"]),
                ]
            )  # fmt: skip
        return _table(header, rows)

    title = f"## Ranks ({len(v['ranks'])})\n\n"
    odd_why = [
        f"- pid {_opt(r['pid'])} (rank {_opt(r['rank'])}): {md_text('; '.join(r['odd_why']))}"
        for r in v["ranks"]
        if r["odd"]
    ]
    odd_text = ("**Odd ones out:**\n\n" + "\n".join(odd_why) + "\n\n") if odd_why else ""
    full = title + table(v["ranks"]) + "\n" + odd_text
    keep = [r for i, r in enumerate(v["ranks"]) if r["odd"] or i < 16]
    short = (
        title
        + table(keep)
        + f"\n_{len(v['ranks']) - len(keep)} unremarkable rows left out._\n\n"
        + odd_text
    )
    return [full, short] if len(keep) < len(v["ranks"]) else [full]


def _mib(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


def _stacks(v: dict[str, Any]) -> list[str]:
    if not v["stack_groups"]:
        return [""]

    def render(groups: list[dict[str, Any]], max_frames: int) -> str:
        parts = ["## Stacks grouped by signature\n"]
        for g in groups:
            known = [str(r) for r in g["ranks"] if r is not None]
            pids = ", ".join(str(p) for p in g["pids"][:16]) + (" …" if len(g["pids"]) > 16 else "")
            # without rank numbers, the group names its pids ("1 × pid 4242", not "1 × rank –")
            who = (f"rank{'s' if len(known) != 1 else ''} {', '.join(known)}" if known else
                   f"pid{'s' if len(g['pids']) != 1 else ''} {pids}")  # fmt: skip
            label = (
                f"{'ODD ONE OUT · ' if g['odd'] else ''}{g['count']} × {who} · "
                f"{g['wait_kind'] or 'unknown'} · {g['signature']}"
            )
            frames = g["frames"][:max_frames]
            body = f"pids {md_text(pids)}\n\n" + fence(
                "\n".join(frame_line(f) for f in frames)
                + (
                    f"\n… {len(g['frames']) - len(frames)} more frames"
                    if len(g["frames"]) > len(frames)
                    else ""
                ),
                "text",
            )
            parts.append(_details(label, body, open_=g["odd"]))
        if len(groups) < len(v["stack_groups"]):
            parts.append(f"_{len(v['stack_groups']) - len(groups)} more groups left out._\n")
        return "\n".join(parts)

    odd_first = [g for g in v["stack_groups"] if g["odd"]] + [
        g for g in v["stack_groups"] if not g["odd"]
    ]
    return [render(v["stack_groups"], 200), render(odd_first[:6], 20)]


def _gpus(v: dict[str, Any]) -> list[str]:
    parts = []
    if v["gpus"]:
        rows = []
        for g in v["gpus"]:
            limit = f" of {g['power_limit_w']:.0f}" if g["power_limit_w"] else ""
            mem = _mib(g["mem_used_last_mib"]) + (
                f" of {_mib(g['mem_total_mib'])}" if g["mem_total_mib"] else ""
            )
            pids = ", ".join(str(p) for p in g["pids"] if p is not None) or "–"
            rows.append(
                [_opt(g["host"]), _opt(g["index"]), _opt(g["name"]), _range(g["util_pct"]),
                 _range(g["power_w"]) + limit, mem, md_text(pids), _opt(g["reading"])]
            )  # fmt: skip
        parts.append("## GPUs\n\n" + _table(
            ["host", "GPU", "name", "util %", "power W", "memory", "pids", "reading"], rows))  # fmt: skip
    if v["host_facts"]:
        rows = [
            [_opt(f["host"]), _mib(f["mem_available_mib"]), _mib(f["swap_used_mib"]),
             _mib(f["shm_free_mib"]), _mib(f["shm_total_mib"])]
            for f in v["host_facts"]
        ]  # fmt: skip
        parts.append("## Host memory\n\n" + _table(
            ["host", "RAM available", "swap used", "/dev/shm free", "/dev/shm size"], rows))  # fmt: skip
    return ["\n".join(parts)] if parts else [""]


def _env(v: dict[str, Any]) -> list[str]:
    if not v["env_diff"]:
        return [""]
    rows = [
        [_code(d["key"], table=True),
         "<br>".join(f"{md_text(k, 100)}: {md_text(val, 300)}" for k, val in d["pairs"])]
        for d in v["env_diff"]
    ]  # fmt: skip
    return ["## Environment differences between ranks\n\n" + _table(["variable", "values"], rows)]


def _log(v: dict[str, Any]) -> list[str]:
    log = v["log"]
    if not log["present"]:
        return [""]
    meta = []
    if log["path"]:
        meta.append(_code(log["path"], limit=1000))
    if log["grew_bytes"] is not None:
        meta.append(f"grew {log['grew_bytes']:.0f} B over the window")
    if log["age_s"] is not None:
        meta.append(f"last written {log['age_s']:.0f} s ago")
    head = "## Log tail\n\n" + (" · ".join(meta) + "\n\n" if meta else "")
    events = "".join(
        f"- **{md_text(e['kind'], 80)}**"
        + (f" (line {e['line']})" if e["line"] is not None else "")
        + f": {md_text(e['text'], 300)}\n"
        for e in log["events"]
    )
    if events:
        events = "Recognised events:\n\n" + events + "\n"

    def tail(lines: list[dict[str, Any]]) -> str:
        text = "\n".join(("» " if ln["event"] else "  ") + ln["text"] for ln in lines)
        label = f"last {len(lines)} lines (» marks a recognised event)"
        return _details(label, fence(text, "text"), open_=True) if lines else ""

    return [
        head + events + tail(log["lines"]),
        head + events + tail(log["lines"][-10:]),
        head + events,
    ]


def _ruled(v: dict[str, Any]) -> list[str]:
    parts = []
    if v["ruled_out"]:
        parts.append("## Ruled out\n")
        parts += [
            f"- {_code(r['id'])} {md_text(r['title'])}: " + md_text("; ".join(r["by"]) or "–")
            for r in v["ruled_out"]
        ]
        parts.append("")
    if v["not_checked"]:
        parts.append("## Not checked\n")
        parts += [
            f"- {_code(r['id'])} {md_text(r['title'])}: missing "
            + md_text(", ".join(r["missing"]) or "–")
            for r in v["not_checked"]
        ]
        parts.append("")
    return ["\n".join(parts) + "\n"] if parts else [""]


def _collection(v: dict[str, Any]) -> list[str]:
    def render(rows_in: list[dict[str, Any]] | None) -> str:
        parts = ["## Collection\n"]
        if v["hosts"]:
            rows = [
                [_opt(h["name"]), _opt(h["hostname"]), md_text(h["status_text"] or "–", 40),
                 _opt(h["duration_s"]), _opt(", ".join(str(p) for p in h["root_pids"] if p is not None)),
                 _opt(h["error"])]
                for h in v["hosts"]
            ]  # fmt: skip
            parts.append(
                _table(["host", "hostname", "status", "duration s", "root pids", "error"], rows)
            )
        if v["weakened"]:
            parts.append(
                "**Weakened by:**\n\n"
                + "\n".join(f"- {md_text(w, start=True)}" for w in v["weakened"])
                + "\n"
            )
        for k in v["known_issues"]:
            parts.append(f"**Known issue:** {md_text(k['text'])} ({md_text(k['url'])})\n")
        exp = v["next_experiment"]
        if exp:
            parts.append(
                f"**Next experiment** (tells {md_text(exp['between'] or 'the top causes')} apart):\n\n"
                + fence(exp["toggle"], "sh")
                + f"- if it fixes it: {md_text(exp['if_fixed'])}\n- if not: {md_text(exp['if_not'])}\n"
            )
        if v["next_command"]:
            parts.append("**Next command:**\n\n" + fence(v["next_command"], "sh"))
        if v["intrusion"]:
            parts.append(f"**Intrusion:** {md_text(v['intrusion'])}\n")
        if rows_in:
            rows = [
                [_opt(m["host"]), _opt(m["source"]), md_text(m["status"] or "–", 40),
                 fmt_num(m["duration_s"], 3), _opt(m["detail"]), _opt(m["remedy"])]
                for m in rows_in
            ]  # fmt: skip
            table = _table(["host", "source", "status", "duration s", "detail", "remedy"], rows)
            parts.append(_details(f"Manifest: {len(rows_in)} sources", table))
        return "\n".join(parts)

    not_ok = [m for m in v["collection"] if m["status"] != "ok"]
    versions = [render(v["collection"])]
    if len(not_ok) < len(v["collection"]):
        versions.append(render(not_ok))
    versions.append(render(None))
    return versions


def _checks(v: dict[str, Any]) -> list[str]:
    if not v["checks"]:
        return [""]
    counts = ", ".join(f"{n} {k}" for k, n in v["check_counts"].items())

    def render(tracebacks: bool) -> str:
        rows = [
            [_code(c["id"], table=True), md_text(c["verdict_text"] or "–", 20),
             _opt(c["summary"] or (("missing " + ", ".join(c["missing"])) if c["missing"] else ""))]
            for c in v["checks"]
        ]  # fmt: skip
        parts = [f"## Checks ({counts})\n", _table(["check", "verdict", "summary"], rows)]
        if tracebacks:
            for c in v["checks"]:
                if c["verdict"] == "errored" and c["error"]:
                    parts.append(_details(f"{c['id']} errored", fence(c["error"], "text")))
        return "\n".join(parts)

    return [render(True), render(False), f"## Checks ({counts})\n"]


# Display order, and for each section how soon it gives way when the report is too big
# (lower gives way first).
_SECTIONS: list[tuple[str, Callable[[dict[str, Any]], list[str]], int]] = [
    ("causes", _causes, 9),
    ("ranks", _ranks, 7),
    ("stacks", _stacks, 4),
    ("GPUs", _gpus, 5),
    ("environment", _env, 3),
    ("log tail", _log, 1),
    ("ruled out", _ruled, 6),
    ("collection", _collection, 2),
    ("checks", _checks, 0),
]


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def render_markdown(analysis: dict, max_bytes: int = 60000) -> str:
    """Return the Markdown report, at most ``max_bytes`` bytes of UTF-8.

    Sections give way in order of importance (checks, log tail, manifest, environment, stacks,
    GPUs, ruled out, ranks, causes): first shortened, then left out, and the report says which.
    """
    v = build_view(analysis)
    header = _header(v)
    versions = {name: [s for s in fn(v)] for name, fn, _ in _SECTIONS}
    for name in versions:
        title = versions[name][0].split("\n", 1)[0]
        if versions[name][0] and title.startswith("## "):
            versions[name].append(f"{title}\n\n{_OMITTED}")
    chosen = {name: 0 for name in versions}
    order = [name for name, _, _ in sorted(_SECTIONS, key=lambda s: s[2])]

    def assemble(note: str) -> str:
        body = [versions[name][chosen[name]] for name, _, _ in _SECTIONS]
        return header + note + "\n".join(b for b in body if b).rstrip() + "\n"

    note_reserve = 400
    budget = max_bytes - note_reserve
    for name in order:
        while _size(assemble("")) > budget and chosen[name] < len(versions[name]) - 1:
            chosen[name] += 1
    # Degrading a whole step can free more than needed: give back what still fits, the most
    # important sections first.
    for name in reversed(order):
        while chosen[name] > 0:
            chosen[name] -= 1
            if _size(assemble("")) > budget:
                chosen[name] += 1
                break
    shortened = [name for name in order if chosen[name] > 0]
    note = ""
    if shortened:
        note = (
            f"> [!NOTE]\n> Shortened to fit {max_bytes} bytes: "
            f"{', '.join(shortened)} cut or left out. The HTML or JSON report has everything.\n\n"
        )
    out = assemble(note)
    if _size(out) > max_bytes:
        # Only the header and the shortest causes are left and they are still too big: cut at a
        # line boundary. Those parts have no open code fence or <details> to break.
        raw = out.encode("utf-8")[: max(max_bytes - 120, 0)]
        cut = raw.decode("utf-8", errors="ignore").rsplit("\n", 1)[0]
        out = cut + "\n\n_Report cut here to fit the size limit._\n"
        out = out.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    return out
