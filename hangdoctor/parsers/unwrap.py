"""Take off the wrapping a paste arrived in, before anything recognises its lines.

The same evidence reaches hangdoctor wrapped in many ways: copied from a terminal (colour codes),
quoted in a GitHub comment (``> `` on every line), from ``docker compose logs``
(``vllm-1  | ``), ``kubectl logs --timestamps`` (an RFC 3339 time first) or journald
(``Nov 30 10:01:02 host python[46294]: ``). The recognisers anchor at the start of a line, so a
wrapper on every line hid an nvidia-smi table or a log header that they know. A wrapper is taken
off when it is on most lines (a stray ``| `` in prose is not a wrapper); what was taken off is
said in the pasted entry's notes. Kernel lines keep their journald / syslog prefix: the kernel
log parser reads it.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re

from hangdoctor.snapshot.loglines import strip_ansi

_QUOTE = re.compile(r"^ {0,3}>(?: |$)")
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.-]{0,62}\s{1,40}\| ")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d) ")
# TGI's own lines (Rust tracing) start with such a time too, then the level padded to five and a
# target: "2024-05-01T10:00:00.123Z  INFO text_generation_launcher: ...". Those are the log.
_RFC3339_WRAPS = re.compile(_RFC3339.pattern + r"(?! ?(?:INFO|WARN|ERROR|DEBUG|TRACE) [\w:]+: )")
_JOURNAL = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]{1,64} (?P<ident>[\w.@/-]{1,64})(?:\[\d+\])?: ")

# (what it is, what most lines show when it is there, what comes off, how much of the non-blank
# lines must show it)
WRAPPERS = (
    ("a Markdown quote ('> ')", _QUOTE, _QUOTE, 0.8),
    ("docker compose logs prefixes", _COMPOSE, _COMPOSE, 0.6),
    ("kubectl --timestamps times", _RFC3339_WRAPS, _RFC3339, 0.6),
    ("journald / syslog prefixes", _JOURNAL, _JOURNAL, 0.6),
)
MIN_LINES = 1
MAX_QUOTE_DEPTH = 4


def _share(lines: list[str], rx: re.Pattern[str]) -> float:
    filled = [ln for ln in lines if ln.strip()]
    if len(filled) < MIN_LINES:
        return 0.0
    return sum(1 for ln in filled if rx.match(ln)) / len(filled)


def _strip(lines: list[str], rx: re.Pattern[str]) -> list[str]:
    out = []
    for ln in lines:
        m = rx.match(ln)
        if m is None or (rx is _JOURNAL and m.group("ident") == "kernel"):
            out.append(ln)
        else:
            out.append(ln[m.end():])
    return out


_MD_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$")
_MD_ROW = re.compile(r"^\s*\|.*\|\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(row: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(row.strip().strip("|"))]


def _untabulate(lines: list[str]) -> list[str] | None:
    """Output pasted into a Markdown table, one line a row (``| 12 | INFO ... |``): the rows'
    cells joined again, the header, the separator and a row-number column dropped. A table of a
    person's (a few rows among prose) or a tool's own (nvidia-smi draws ``+---+`` borders) is left."""
    filled = [ln for ln in lines if ln.strip()]
    seps = [i for i, ln in enumerate(lines) if _MD_SEP.match(ln)]
    if len(seps) != 1 or len(filled) < 4:
        return None
    rows = [ln for ln in filled if _MD_ROW.match(ln)]
    if len(rows) < 0.8 * len(filled):
        return None
    sep = seps[0]
    width = len(_cells(lines[sep]))
    out: list[str] = []
    for i, ln in enumerate(lines):
        if i <= sep and _MD_ROW.match(ln) or i == sep:
            continue  # the header and its separator
        if not _MD_ROW.match(ln):
            out.append(ln)
            continue
        cells = _cells(ln)
        if len(cells) == width and width > 1 and re.fullmatch(r"\d{1,7}", cells[0] or ""):
            cells = cells[1:]  # a row number
        out.append(" ".join(c for c in cells if c))
    return out


_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                        "Nov", "Dec"), 1)}
_STAMP = re.compile(r"(?:(?P<y>\d{4})[-/](?P<mo>\d\d)[-/](?P<d>\d\d)[T ]|(?P<mon>[A-Z][a-z]{2}) +(?P<d2>\d{1,2}) |"
                    r"(?P<mo3>\d\d)-(?P<d3>\d\d) )?(?P<t>\d\d:\d\d:\d\d)")


def _stamp(line: str) -> tuple | None:
    m = _STAMP.search(line[:120])
    if not m:
        return None
    if m.group("y"):
        day = (int(m.group("mo")), int(m.group("d")))
    elif m.group("mon"):
        day = (_MONTHS.get(m.group("mon"), 0), int(m.group("d2")))
    elif m.group("mo3"):
        day = (int(m.group("mo3")), int(m.group("d3")))
    else:
        day = (0, 0)
    return day + (m.group("t"),)


def _newest_first(lines: list[str]) -> bool:
    """A log pasted newest first (``journalctl -r``, a web console): its timestamps mostly fall."""
    stamps = [st for st in (_stamp(ln) for ln in lines) if st is not None]
    if len(stamps) < 4:
        return False
    down = sum(1 for a, b in zip(stamps, stamps[1:]) if b < a)
    up = sum(1 for a, b in zip(stamps, stamps[1:]) if b > a)
    return down >= 3 and down >= 4 * max(up, 1)


# a record a program printed over several lines, one field a line (torch's WorkNCCL when
# ProcessGroupNCCL's watchdog reports it: "WorkNCCL(\n  SeqNum=6,\n  OpType=ALLREDUCE,\n ...)")
_RECORD_OPEN = re.compile(r"^(?P<head>.*\b[A-Z]\w*)\(\s*$")
_RECORD_FIELD = re.compile(r"^\s+\w+(?:\(\w+\))?\s*[=:]\s*[^=()]*?,?\s*$")
_RECORD_CLOSE = re.compile(r"^\s*\)(?P<tail>.*)$")


def _fold_records(lines: list[str]) -> tuple[list[str], int]:
    """A multi-line printed record folded back onto one line, as the program prints it elsewhere."""
    out: list[str] = []
    folded = 0
    i = 0
    n = len(lines)
    while i < n:
        m = _RECORD_OPEN.match(lines[i])
        if m:
            j = i + 1
            while j < n and j - i <= 32 and _RECORD_FIELD.match(lines[j]):
                j += 1
            c = _RECORD_CLOSE.match(lines[j]) if j < n else None
            if c and j - i >= 3:
                fields = [lines[k].strip().rstrip(",").strip() for k in range(i + 1, j)]
                out.append(f"{m.group('head')}({', '.join(fields)}){c.group('tail')}")
                folded += 1
                i = j + 1
                continue
        out.append(lines[i])
        i += 1
    return out, folded


def _common_indent(lines: list[str]) -> str:
    """The indent every non-blank line shares when it is a Markdown indented block (4 spaces or
    a tab at least): the text as printed had it at column 0. '' otherwise."""
    body = [x for x in lines if x.strip()]
    if len(body) < 2:
        return ""
    lead = [x[:len(x) - len(x.lstrip(" \t"))] for x in body]
    common = lead[0]
    for w in lead[1:]:
        while not w.startswith(common):
            common = common[:-1]
    return common if common.startswith("\t") or len(common) >= 4 else ""


_BARE_FENCE = re.compile(r"^\s*(```|~~~)\s*$")
_ANY_FENCE = re.compile(r"^\s*(```|~~~)")


def _outer_fence(lines: list[str]) -> list[str] | None:
    """The lines inside one fence that wraps the whole text, when fences open and close inside
    it: a whole post or file fenced once more (a fence cannot hold fences, so the outer one is
    wrapping, not a block). None when the text is not wrapped so."""
    idx = [i for i, x in enumerate(lines) if x.strip()]
    if len(idx) < 3:
        return None
    first, last = idx[0], idx[-1]
    if not (_ANY_FENCE.match(lines[first]) and _BARE_FENCE.match(lines[last])):
        return None
    if not any(_ANY_FENCE.match(x) for x in lines[first + 1:last]):
        return None
    return lines[:first] + lines[first + 1:last] + lines[last + 1:]


def unwrap(text: str) -> tuple[str, list[str]]:
    """(the text without its wrapping, what was taken off)."""
    said: list[str] = []
    if "\x1b" in text:
        text = strip_ansi(text)
        said.append("terminal colour codes")
    lines = text.split("\n")
    newest_first = _newest_first(lines)  # before a wrapper that carries the times comes off
    untab = _untabulate(lines)
    if untab is not None:
        lines = untab
        said.append("a Markdown table of output lines")
    for name, seen, rx, share in WRAPPERS:
        depth = MAX_QUOTE_DEPTH if rx is _QUOTE else 1
        taken = False
        while depth and _share(lines, seen) >= share:
            lines = _strip(lines, rx)
            depth -= 1
            taken = True
        if taken:
            said.append(name)
    indent = _common_indent(lines)
    if indent:
        lines = [x[len(indent):] if x.startswith(indent) else x.lstrip(" \t") for x in lines]
        said.append("an indent of every line (a Markdown indented block)")
    outer = _outer_fence(lines)
    if outer is not None:
        lines = outer
        said.append("a code fence around the whole text, with fences inside it")
    lines, folded = _fold_records(lines)
    if folded:
        said.append(f"{folded} record(s) printed one field a line (folded onto one line)")
    if newest_first or _newest_first(lines):
        # read it oldest first, as every log is: its last line is where it stopped
        lines = lines[::-1]
        said.append("newest-first order (read oldest first)")
    return "\n".join(lines), said
