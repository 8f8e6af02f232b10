"""Python tracebacks. A ``KeyboardInterrupt`` traceback from Ctrl-C of a hung server shows where
its main thread sat, so it becomes a stack; other tracebacks are crash reports and stay log
evidence (``traceback`` events in the log view)::

    Traceback (most recent call last):
      File "/srv/api_server.py", line 13, in <module>
        run_server()
      File "/usr/lib/python3.11/multiprocessing/connection.py", line 395, in _recv
        chunk = read(handle, remaining)
                ^^^^^^^^^^^^^^^^^^^^^^^
    KeyboardInterrupt

"most recent call last" is outermost first: frames are reversed to innermost first. Chained
tracebacks ("During handling of the above exception ...") are one block; the last one is the
stack.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from hangdoctor.parsers.frames import PastedDump, make_frame, make_thread
from hangdoctor.parsers.text import clip_lines

START = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+), in (?P<func>\S+)')
CHAIN = re.compile(
    r"^\s*(?:During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)\s*$"
)
EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
# Exceptions a signal raises in the main thread of a process that was waiting.
INTERRUPT_TYPES = ("KeyboardInterrupt", "SystemExit", "TimeoutError", "bdb.BdbQuit")


@dataclass
class ParsedTraceback:
    """One traceback (the last of a chain): frames innermost first, and the final exception."""

    frames: list = field(default_factory=list)
    exc_type: Optional[str] = None
    message: str = ""
    chained: int = 0
    complete: bool = False
    start_line: int = 0


def parse_tracebacks(lines: Iterable[str]) -> list[ParsedTraceback]:
    """Every traceback in the lines, in order."""
    out: list[ParsedTraceback] = []
    cur: Optional[ParsedTraceback] = None
    chain_pending = False
    for i, raw in enumerate(clip_lines(lines)):
        line = raw.rstrip("\r\n")
        if START.match(line):
            if cur is not None and chain_pending:
                chained = cur.chained + 1
                out.pop()
                cur = ParsedTraceback(chained=chained, start_line=i)
            else:
                cur = ParsedTraceback(start_line=i)
            out.append(cur)
            chain_pending = False
            continue
        if cur is None:
            continue
        if CHAIN.match(line):
            chain_pending = True
            continue
        if cur.complete or chain_pending:
            if line.strip() and not CHAIN.match(line):
                if not chain_pending:
                    cur = None
            continue
        m = FRAME.match(line)
        if m:
            cur.frames.insert(0, make_frame(m.group("func"), m.group("file"), int(m.group("line"))))
            continue
        if not line.strip() or line[:1] in (" ", "\t"):
            continue  # source line, caret line, or blank
        m = EXC.match(line.strip())
        if m:
            cur.exc_type = m.group("type")
            cur.message = (m.group("msg") or "")[:500]
        else:
            cur.message = line.strip()[:500]
        cur.complete = True
    return out


def is_interrupt(tb: ParsedTraceback) -> bool:
    """True when the traceback shows a process interrupted while waiting (Ctrl-C, a signal)."""
    return tb.exc_type in INTERRUPT_TYPES or (tb.exc_type or "").endswith("KeyboardInterrupt")


def dumps_from_tracebacks(tbs: list[ParsedTraceback]) -> list[PastedDump]:
    """Interrupt tracebacks as stacks of the main thread (pid unknown)."""
    out = []
    for tb in tbs:
        if not is_interrupt(tb) or not tb.frames:
            continue
        thread = make_thread(
            tb.frames,
            name="MainThread",
            exception=(tb.exc_type or "") + (": " + tb.message if tb.message else ""),
        )
        out.append(PastedDump(kind="traceback", threads=[thread], truncated=not tb.complete))
    return out
