"""Typed view of an inference server's log: vLLM, SGLang, TGI, NCCL and torch.distributed lines.

Used for the live log tail (``snapshot["log"]["tail"]``) and for pasted logs alike. Each
recognised line becomes a :class:`LogEvent` of one *kind* (the recognisers and their kinds:
:mod:`hangdoctor.evidence.log_signatures`); unrecognised lines are kept as text only. One line
may give several events (an ``ERROR`` line that is also a CUDA OOM). The view follows what spans
lines: a Python traceback up to its exception line, per writing process, and a watchdog's
follow-up lines that name no collective. A file of any size is read in bounded memory.

Layer: evidence; may import: the standard library, hangdoctor.snapshot.loglines and
hangdoctor.evidence.log_signatures.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Optional

from hangdoctor.evidence.log_signatures import (
    EXC_LINE,
    MATCH_CHARS,
    NOISE_KINDS,
    TB_CHAIN,
    TB_START,
    candidate_kinds,
    in_order,
    nccl_data,
    recognise,
)
from hangdoctor.snapshot.loglines import MAX_LINE_CHARS, LinePrefix, split_prefix, strip_ansi

# --- line cleaning ---------------------------------------------------------------------------

def clean_line(raw: str) -> str:
    """Strip the newline, ANSI colours and carriage-return overwrites (keep the last state)."""
    line = raw.rstrip("\n")
    if line.endswith("\r"):
        line = line.rstrip("\r")
    if "\r" in line:
        # tqdm redraws a bar with '\r': the text after the last '\r' is what the terminal shows.
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    line = strip_ansi(line)
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + f" …[cut {len(line) - MAX_LINE_CHARS} chars]"
    return line


# --- events -----------------------------------------------------------------------------------


@dataclass
class LogEvent:
    """One recognised log line: ``kind`` is one of
    :data:`~hangdoctor.evidence.log_signatures.EVENT_KINDS`; ``line_no`` is 1-based."""

    kind: str
    line_no: int
    text: str
    rank: Optional[int] = None
    pid: Optional[int] = None
    data: dict = field(default_factory=dict)


# --- the view ---------------------------------------------------------------------------------

_RANK_EQ = re.compile(r"\brank=(\d+)\b")


def _rank_of(pref: LinePrefix, data: dict) -> Optional[int]:
    if pref.rank is not None:
        return pref.rank
    r = data.get("rank")
    if isinstance(r, int):
        return r
    m = _RANK_EQ.search(pref.rest)  # TGI puts "rank=N" at the end of the line
    return int(m.group(1)) if m else None


class LogView:
    """Events and (the kept tail of) cleaned lines of one log; see :func:`parse_log`."""

    def __init__(
        self, events: list[LogEvent], lines: list[str], counts: dict, total_lines: int
    ) -> None:
        self.events = events
        self.lines = lines
        self.counts: dict[str, int] = dict(counts)  # every event seen per kind, even if dropped
        self.total_lines = total_lines

    def of(self, *kinds: str) -> list[LogEvent]:
        """Events of the given kinds, in line order."""
        return [e for e in self.events if e.kind in kinds]

    def last(self, *kinds: str) -> Optional[LogEvent]:
        """The last event of any of the given kinds (of any kind when none given)."""
        for e in reversed(self.events):
            if not kinds or e.kind in kinds:
                return e
        return None

    def last_meaningful(self) -> Optional[LogEvent]:
        """The last event that tells something about the server's state (not NCCL chatter or
        an idle zero-throughput stats line)."""
        for e in reversed(self.events):
            if e.kind in NOISE_KINDS or (e.kind == "request" and e.data.get("idle")):
                continue
            return e
        return None

    def ranks(self) -> dict[int, set]:
        """rank -> pids seen writing lines for that rank (from prefixes)."""
        out: dict[int, set] = {}
        for e in self.events:
            if e.rank is not None and e.pid is not None:
                out.setdefault(e.rank, set()).add(e.pid)
        return out

    def __repr__(self) -> str:
        return f"LogView({self.total_lines} lines, {dict(self.counts)})"


class _LogParser:
    """Incremental parser: feed lines, keep bounded state when limits are given."""

    def __init__(self, max_lines_kept: Optional[int], max_events_per_kind: Optional[int]) -> None:
        self.lines: deque = deque(maxlen=max_lines_kept)
        self.max_events = max_events_per_kind
        self.events: dict[str, deque] = {}
        self.counts: Counter = Counter()
        self.line_no = 0
        self.tb_state: dict[Optional[int], str] = {}
        self.wd_optype: dict = {}  # (rank, seqnum) -> OpType  # per writer pid: "frames" | "chain"

    def _emit(self, ev: LogEvent) -> None:
        if ev.kind == "watchdog-timeout":
            self._watchdog_optype(ev)
        self.counts[ev.kind] += 1
        q = self.events.get(ev.kind)
        if q is None:
            q = self.events[ev.kind] = deque(maxlen=self.max_events)
        q.append(ev)

    def _watchdog_optype(self, ev: LogEvent) -> None:
        """Follow-up watchdog lines ("last enqueued NCCL work: N") name no OpType: take it from
        the same rank's earlier line about the same SeqNum, so ranks compare like with like."""
        seq, op = ev.data.get("seqnum"), ev.data.get("optype")
        if seq is None:
            return
        if op is not None:
            if len(self.wd_optype) > 10000:  # bounded memory on endless logs
                self.wd_optype.clear()
            self.wd_optype[(ev.rank, seq)] = op
        elif (ev.rank, seq) in self.wd_optype:
            ev.data["optype"] = self.wd_optype[(ev.rank, seq)]
            ev.data["optype_from_earlier_line"] = True

    def _traceback(self, pref: LinePrefix, text: str) -> None:
        rest = pref.rest
        key = pref.pid
        state = self.tb_state.get(key)
        if TB_START.match(rest):
            self.tb_state[key] = "frames"
            return
        if state is None:
            return
        if not rest.strip():
            if state == "frames":
                return
            return
        if rest[:1] in (" ", "\t"):
            return
        if TB_CHAIN.match(rest):
            self.tb_state[key] = "chain"
            return
        if state == "chain":
            return
        del self.tb_state[key]
        m = EXC_LINE.match(rest)
        exc = m.group("exc") if m else None
        self._emit(
            LogEvent("traceback", self.line_no, text, pref.rank, pref.pid, {"exc_type": exc})
        )

    def feed(self, raw: str) -> None:
        self.line_no += 1
        text = clean_line(raw)
        self.lines.append(text)
        if not text.strip():
            return
        if len(text) > MATCH_CHARS:
            text = text[:MATCH_CHARS]  # events live at the start; keeps regexes cheap
        cands = candidate_kinds(text)
        if not cands and not self.tb_state and "Traceback" not in text:
            return
        pref = split_prefix(text)
        if self.tb_state or "Traceback" in text:
            self._traceback(pref, text)
        rest = pref.rest
        if pref.level in ("ERROR", "CRITICAL"):
            cands.add("error")
        for kind in in_order(cands):
            if kind == "error" and pref.level in ("ERROR", "CRITICAL"):
                data: Optional[dict] = {}
            else:
                data = recognise(kind, rest if kind != "error" else text)
            if data is None:
                continue
            pid = pref.pid if pref.pid is not None else data.get("pid")
            if pid is None and "NCCL" in rest:
                pid = nccl_data(rest)[1].get("pid")
            self._emit(LogEvent(kind, self.line_no, text, _rank_of(pref, data), pid, data))

    def view(self) -> LogView:
        evs = [e for q in self.events.values() for e in q]
        evs.sort(key=lambda e: e.line_no)
        return LogView(evs, list(self.lines), self.counts, self.line_no)


def parse_log(
    lines: Iterable[str],
    max_lines_kept: Optional[int] = None,
    max_events_per_kind: Optional[int] = None,
) -> LogView:
    """Parse log lines (a list or any iterator of str) into a :class:`LogView`.

    Without limits every line and event is kept; with them, memory stays bounded whatever the
    input's length (``counts`` still counts every event).
    """
    p = _LogParser(max_lines_kept, max_events_per_kind)
    for raw in lines:
        if not isinstance(raw, str):
            raw = (
                bytes(raw).decode("utf-8", "replace")
                if isinstance(raw, (bytes, bytearray))
                else str(raw)
            )
        # one item may hold several lines (a whole paste passed as one string)
        if "\n" in raw.rstrip("\n"):
            for part in raw.split("\n"):
                p.feed(part)
        else:
            p.feed(raw)
    return p.view()


_READ_CHUNK = 1 << 16


def _iter_file_lines(path: str) -> Iterable[str]:
    """Yield decoded lines of a file; a line longer than the chunk is cut, the rest skipped."""
    with open(path, "rb") as f:
        skipping = False
        while True:
            chunk = f.readline(_READ_CHUNK)
            if not chunk:
                return
            complete = chunk.endswith(b"\n")
            if not skipping:
                yield chunk.replace(b"\x00", b"").decode("utf-8", "replace")
            skipping = not complete


def parse_log_file(path: str, max_lines_kept: int = 400, max_events_per_kind: int = 200) -> LogView:
    """Parse a log file of any size in bounded memory: the last ``max_lines_kept`` lines, the
    last ``max_events_per_kind`` events of each kind, and counts of all events."""
    return parse_log(_iter_file_lines(path), max_lines_kept, max_events_per_kind)
