"""py-spy text dumps (``py-spy dump --pid PID``), one or many processes in one paste.

Recognised, with or without the shell prompt line before each dump::

    root@host:~# py-spy dump --pid 8003 --native --locals
    Pyspy dump for PID 8003:                       <- SGLang's watchdog prefix
    Process 8003: python3 serve_tp.py --rank 3
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 8003 (idle): "MainThread"
        cuCtxSynchronize (libcuda.so.1)            <- --native frame (no .py, no line)
        0x7f31cd7cfb80 (libc.so.6)
        all_reduce (torch/distributed/distributed_c10d.py:3252)
            Arguments:                             <- --locals
                tensor: <Tensor at 0x7f...>
    Thread 0x7F1A2B3C4D5E (active+gil): "worker"

py-spy prints frames innermost first, as the snapshot wants them. A paste cut short keeps what
it had and is marked ``truncated``.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from hangdoctor.parsers.frames import PastedDump, make_frame, make_thread, rank_from_text
from hangdoctor.parsers.text import clip_lines

PROMPT_ANY = re.compile(r"^(?:.*[$#%>]\s*)?(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?py-spy\s+dump\b")
_PID_ARG = re.compile(r"(?:--pid|-p)[= ](\d+)")
SGLANG_HEAD = re.compile(r"Pyspy dump for PID (?P<pid>\d+):?\s*$")
PROCESS = re.compile(r"^Process (?P<pid>\d+): ?(?P<cmd>.*)$")
PYTHON = re.compile(r"^Python v(?P<ver>\S+)(?: \((?P<exe>.*)\))?\s*$")
THREAD = re.compile(
    r"^Thread (?P<id>0[xX][0-9a-fA-F]+|\d+) \((?P<status>[\w+]+)\)(?:: \"(?P<name>.*)\")?\s*$"
)
FRAME = re.compile(r"^(?P<indent>[ \t]+)(?P<name>\S.*?) \((?P<where>[^()]*)\)\s*$")
# what posters make of dumps: a thread header with their own label instead of py-spy's status
# ('Thread "SchedulerMain"    (3 of 4 ranks)'), and frames whose indentation the paste lost
LABELLED_THREAD = re.compile(r'^Thread (?:(?P<id>0[xX][0-9a-fA-F]+|\d+) )?"(?P<name>[^"]+)"\s*(?P<label>.*)$')
BARE_FRAME = re.compile(
    r"^(?P<indent>)(?P<name>[\w.<>\[\]-]+) \((?P<where>[^()\s]*\.(?:py|pyx|so[.\d]*|dylib)(?::\d+)?)\)\s*$"
)
# frames a poster pasted without any header: aligned columns, maybe their own "# note" after
# each, maybe outermost first (the evidence layer decides the order from the wait points)
HEADERLESS_FRAME = re.compile(
    r"^(?P<indent>\s*)(?P<name>[\w.<>\[\]-]+)\s+\((?P<where>[^()\s]*\.(?:py|pyx)(?::\d+)?)\)\s*(?:#.*)?$"
)
# a frame line the paste cut off inside its file name ("broadcast (torch/distributed/distribu"):
# kept, with the part of the path it still has, when it stands where a frame would
CUT_FRAME = re.compile(r"^(?P<indent>[ \t]+)(?P<name>[\w.<>\[\]-]+) \((?P<where>[\w./-]{3,})$")
LOCALS_HEAD = re.compile(r"^[ \t]+(?P<which>Arguments|Locals):\s*$")
LOCAL_VAR = re.compile(r"^[ \t]+(?P<name>[^:\s][^:]*?): (?P<repr>.*)$")
_WHERE = re.compile(r"^(?P<file>.*?):(?P<line>\d+)$")


def _new_thread(m: re.Match) -> dict:
    tid = m.group("id")
    status = m.group("status").lower()
    thread_id = os_tid = None
    if tid.lower().startswith("0x"):
        thread_id = int(tid, 16)
    else:
        os_tid = int(tid)
    return make_thread(
        [],
        name=m.group("name"),
        thread_id=thread_id,
        os_thread_id=os_tid,
        active=status.startswith("active"),
        owns_gil="gil" in status,
    )


def _frame(m: re.Match) -> dict:
    where = m.group("where")
    wm = _WHERE.match(where)
    if wm and not wm.group("file").endswith((".so", ".dylib")) and ".so." not in wm.group("file"):
        return make_frame(
            m.group("name"), wm.group("file"), int(wm.group("line")), short=wm.group("file")
        )
    if where.endswith((".py", ".pyx")) or (m.re is CUT_FRAME and "/" in where and ".so" not in where):
        # a Python frame the poster pasted without its line number, or cut inside its path
        frame = make_frame(m.group("name"), where, None, short=where)
        if not where.endswith((".py", ".pyx")):
            frame["cut"] = True
        return frame
    # --native frame: "cuCtxSynchronize (libcuda.so.1)" / "0x7f... (libc.so.6)"
    return make_frame(m.group("name"), where, None, native=True, short=where)


class _State:
    def __init__(self) -> None:
        self.dumps: list[PastedDump] = []
        self.cur: Optional[PastedDump] = None
        self.thread: Optional[dict] = None
        self.pending_pid: Optional[int] = None  # from a prompt line or SGLang's header
        self.locals_kind: Optional[str] = None
        self.frame_indent: Optional[int] = None
        self.last_was_frame_line = False

    def dump(self) -> PastedDump:
        if self.cur is None:
            self.cur = PastedDump(kind="pyspy-text", pid=self.pending_pid)
            self.pending_pid = None
            self.dumps.append(self.cur)
        return self.cur

    def close(self) -> None:
        self.cur = None
        self.thread = None
        self.locals_kind = None
        self.frame_indent = None


def parse_pyspy_text(lines: Iterable[str]) -> list[PastedDump]:
    """Parse py-spy text dump lines into one :class:`PastedDump` per dumped process."""
    st = _State()
    for raw in clip_lines(lines):
        line = raw.rstrip("\r\n")
        if not line.strip():
            st.locals_kind = None
            continue
        _feed(st, line)
    for d in st.dumps:
        if d.threads and not d.threads[-1]["frames"]:
            d.truncated = True
        if d.rank is None:
            d.rank = rank_from_text(d.cmdline)[0]
    return st.dumps


def _feed(st: _State, line: str) -> None:
    if "py-spy" in line and PROMPT_ANY.match(line[:1000]):
        st.close()
        m = _PID_ARG.search(line)
        st.pending_pid = int(m.group(1)) if m else None
        return
    m = SGLANG_HEAD.search(line)
    if m:
        st.close()
        st.pending_pid = int(m.group("pid"))
        return
    m = PROCESS.match(line)
    if m:
        pid = int(m.group("pid"))
        if st.cur is None or st.cur.pid not in (None, pid) or st.cur.threads or st.cur.cmdline:
            st.close()
        d = st.dump()
        d.pid = pid
        d.cmdline = m.group("cmd").strip() or None
        return
    m = PYTHON.match(line)
    if m:
        d = st.dump()
        if d.threads:  # a new dump without a Process line: start over
            st.close()
            d = st.dump()
        d.python = m.group("ver")
        return
    m = THREAD.match(line)
    if m:
        st.thread = _new_thread(m)
        st.dump().threads.append(st.thread)
        st.locals_kind = None
        st.frame_indent = None
        return
    m = LABELLED_THREAD.match(line)
    if m:
        # each labelled fragment stands for its own process (the poster shows one rank's stack)
        st.close()
        d = st.dump()
        label = m.group("label").strip()
        if label:
            d.notes.append(f"the poster's label for this stack: {label[:120]}")
        st.thread = make_thread([], name=m.group("name"), active=False)
        d.threads.append(st.thread)
        return
    if st.thread is None:
        m = HEADERLESS_FRAME.match(line)
        if m is None:
            return
        # frames with no Process / Thread line above them: one thread of a process not named
        st.close()
        d = st.dump()
        d.notes.append("frames pasted without py-spy's header (order as pasted)")
        st.thread = make_thread([], name="(pasted frames)", active=False)
        st.thread["order"] = "as-pasted"
        d.threads.append(st.thread)
        st.thread["frames"].append(_frame(m))
        st.frame_indent = len(line) - len(line.lstrip(" \t"))
        return
    m = LOCALS_HEAD.match(line)
    if m:
        st.locals_kind = m.group("which")
        return
    indent = len(line) - len(line.lstrip(" \t"))
    if st.locals_kind and (st.frame_indent is None or indent > st.frame_indent):
        lm = LOCAL_VAR.match(line)
        frames = st.thread["frames"]
        if lm and frames:
            if frames[-1]["locals"] is None:
                frames[-1]["locals"] = []
            frames[-1]["locals"].append(
                {
                    "name": lm.group("name").strip(),
                    "repr": lm.group("repr"),
                    "arg": st.locals_kind == "Arguments",
                }
            )
        return
    m = FRAME.match(line) or (BARE_FRAME.match(line) if indent == 0 else None)
    if m is None and st.thread.get("order") == "as-pasted":
        m = HEADERLESS_FRAME.match(line)
    if m is None and indent > 0 and (st.frame_indent is None or indent == st.frame_indent):
        m = CUT_FRAME.match(line)
    if m and (st.frame_indent is None or indent <= st.frame_indent + 1):
        if st.frame_indent is None:
            st.frame_indent = indent
        st.locals_kind = None
        st.thread["frames"].append(_frame(m))
        return
    if indent == 0:
        # something else starts: a cut paste or an error line from py-spy
        if st.cur is not None and not line.startswith("Error"):
            st.cur.truncated = st.cur.truncated or not st.thread["frames"]
        st.thread = None
        if line.startswith("Error") and st.cur is not None:
            st.cur.notes.append(line.strip()[:300])


def looks_like_pyspy_line(line: str) -> bool:
    """True for lines that only a py-spy text dump has (used by detect)."""
    line = line[:1000]
    return bool(
        PROCESS.match(line)
        or THREAD.match(line)
        or LABELLED_THREAD.match(line)
        or SGLANG_HEAD.search(line)
        or ("py-spy" in line and PROMPT_ANY.match(line))
        or (PYTHON.match(line) and "(" in line)
    )
