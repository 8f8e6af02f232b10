"""gdb backtraces (``bt``, ``thread apply all bt``) as native stacks::

    Thread 3 (Thread 0x7f2c0effd640 (LWP 4711) "python3"):
    #0  0x00007ffd5c5f8b39 in clock_gettime ()
    #7  0x00007faaad48fe39 in cuStreamSynchronize () from /usr/lib/x86_64-linux-gnu/libcuda.so.1
    #1  __pthread_mutex_lock (mutex=0x55) at pthread_mutex_lock.c:80

Frames are innermost first already; every frame is native. gdb names no pid, so a backtrace is
given a synthetic process (``hangdoctor analyze`` says so). A poster's gap (frame numbers that
skip, an excerpt cut mid-frame) is kept as a note.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable

from hangdoctor.parsers.frames import PastedDump, make_frame, make_thread
from hangdoctor.parsers.text import clip_lines

FRAME = re.compile(r"^\s*#(?P<n>\d+)\s+(?:0x[0-9a-fA-F]+(?: in)? )?(?P<rest>\S.*?)\s*$")
THREAD = re.compile(r"^Thread (?P<n>\d+) \(Thread (?P<addr>0x[0-9a-fA-F]+)(?: \(LWP (?P<lwp>\d+)\))?"
                    r"(?: \"(?P<name>[^\"]*)\")?\)\s*:?\s*$")
# a complete frame line ends in its library, its source line or its argument list
_COMPLETE = re.compile(r"(?:\.so(?:\.[\w.]+)?|:\d+|\)|\?\?)\s*$")
_WHERE = re.compile(r"\s(?:from|at) (?P<where>\S+?)(?::(?P<line>\d+))?\s*$")


def is_wrapped(line: str) -> bool:
    """A frame line that does not end like one: the terminal wrapped it, the next line goes on."""
    return bool(FRAME.match(line)) and not _COMPLETE.search(line)


def _join_wrapped(lines: Iterable[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if out and line.strip() and not FRAME.match(line) and not THREAD.match(line) and is_wrapped(out[-1]):
            out[-1] = out[-1].rstrip("\n") + line.strip()
        else:
            out.append(line)
    return out


def _split_name(rest: str) -> tuple[str, str, int | None]:
    where, line = "", None
    m = _WHERE.search(rest)
    if m:
        where = m.group("where")
        line = int(m.group("line")) if m.group("line") else None
        rest = rest[: m.start()]
    name = rest.strip()
    # "func (args...)" or "ns::Class::method(std::string const&)": keep the function name
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0 and not name[:i].endswith("operator"):
            name = name[:i].rstrip()
            break
    return name or "??", where, line


def parse_gdb(lines: Iterable[str]) -> list[PastedDump]:
    """One dump per backtrace block; the threads of one ``thread apply all bt`` share a dump."""
    dump = PastedDump(kind="gdb")
    frames: list = []
    name = None
    tid = None
    last_n = -1

    def flush() -> None:
        nonlocal frames
        if frames:
            dump.threads.append(make_thread(frames, name=name or "gdb thread", os_thread_id=tid,
                                            active=False))
        frames = []

    for line in _join_wrapped(clip_lines(lines, 20000)):
        m = THREAD.match(line)
        if m:
            flush()
            name = m.group("name") or f"Thread {m.group('n')}"
            tid = int(m.group("lwp")) if m.group("lwp") else None
            last_n = -1
            continue
        m = FRAME.match(line)
        if not m:
            continue
        n = int(m.group("n"))
        if n <= last_n:  # numbering restarts: a second backtrace
            flush()
            name, tid = None, None
        elif last_n >= 0 and n > last_n + 1:
            dump.notes.append(f"gdb frames #{last_n + 1}-#{n - 1} are not in the paste")
        last_n = n
        fname, where, ln = _split_name(m.group("rest"))
        frames.append(make_frame(fname, where or "?", ln, native=True, short=where.rsplit("/", 1)[-1]))
    flush()
    return [dump] if dump.threads else []
