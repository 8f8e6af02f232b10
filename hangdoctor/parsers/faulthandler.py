"""faulthandler dumps: ``faulthandler.dump_traceback()``, ``SIGUSR1`` via ``faulthandler.register``,
``dump_traceback_later`` and fatal errors (``Fatal Python error: Segmentation fault``)::

    Fatal Python error: Aborted

    Thread 0x00007fe1b37fe6c0 (most recent call first):
      File "/usr/lib/python3.11/threading.py", line 327 in wait
      File "/tmp/engine.py", line 9 in heartbeat

    Current thread 0x00007fe1b9c5fb80 (most recent call first):
      File "/tmp/engine.py", line 16 in run_engine_loop
      <no Python frame>

    Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)

"most recent call first" is innermost first already. faulthandler names no pid and no thread
names, so the dump is given a synthetic process; a second dump of the same thread ids (a
repeating ``dump_traceback_later``) is a second sample of it.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from hangdoctor.parsers.frames import PastedDump, make_frame, make_thread
from hangdoctor.parsers.text import clip_lines

THREAD_HEAD = re.compile(
    r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])? "
    r"\(most recent call first\):\s*$"
)
STACK_HEAD = re.compile(r"^Stack \(most recent call first\):\s*$")
FATAL = re.compile(r"^Fatal Python error: (?P<what>.*)$")
FRAME = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<func>\S+)')
NO_FRAME = re.compile(r"^\s+<no Python frame>\s*$")


def _new_dump(fatal: Optional[str]) -> PastedDump:
    d = PastedDump(kind="faulthandler")
    if fatal:
        d.notes.append("Fatal Python error: " + fatal)
    return d


def parse_faulthandler(lines: Iterable[str]) -> list[PastedDump]:
    """Parse faulthandler output into dumps (one per dump block; pid unknown)."""
    dumps: list[PastedDump] = []
    cur: Optional[PastedDump] = None
    thread: Optional[dict] = None
    seen_ids: set = set()
    fatal: Optional[str] = None
    for raw in clip_lines(lines):
        line = raw.rstrip("\r\n")
        m = FATAL.match(line)
        if m:
            fatal = m.group("what").strip()
            cur = None
            thread = None
            seen_ids = set()
            continue
        m = THREAD_HEAD.match(line)
        if m or STACK_HEAD.match(line):
            tid = int(m.group("id"), 16) if m else None
            # a thread id seen again means a new dump of the same process has begun
            if cur is None or (tid is not None and tid in seen_ids) or (m is None and cur.threads):
                cur = _new_dump(fatal)
                fatal = None
                dumps.append(cur)
                seen_ids = set()
            if tid is not None:
                seen_ids.add(tid)
            current = m is None or m.group("current") == "Current thread"
            thread = make_thread(
                [],
                name=(m.group("name") if m else None) or None,
                thread_id=tid,
                is_current=current,
            )
            cur.threads.append(thread)
            continue
        if thread is None:
            if not FRAME.match(line):
                continue
            # frames pasted without their "Thread 0x… (most recent call first):" line: one
            # thread of a process not named, innermost first as faulthandler prints them
            cur = _new_dump(fatal)
            fatal = None
            cur.notes.append("faulthandler frames pasted without their thread line")
            dumps.append(cur)
            seen_ids = set()
            thread = make_thread([], name=None, thread_id=None, is_current=True)
            cur.threads.append(thread)
        m = FRAME.match(line)
        if m:
            ln = m.group("line")
            thread["frames"].append(
                make_frame(m.group("func"), m.group("file"), int(ln) if ln.isdigit() else None)
            )
            continue
        if NO_FRAME.match(line) or line.strip() in ("...", ""):
            continue
        thread = None  # "Extension modules: ..." or anything else ends the block
    for i, d in enumerate(dumps):
        ids = sorted(hex(t["thread_id"]) for t in d.threads if t["thread_id"] is not None)
        d.group = "faulthandler:" + (",".join(ids) if ids else str(i))
        if d.threads and not d.threads[-1]["frames"]:
            d.truncated = True
    return dumps
