"""py-spy JSON dumps (``py-spy dump --pid PID --json``).

Accepted shapes: a list of thread objects (each carries ``pid``); several such lists pasted one
after the other; a dict ``{pid: [threads]}``. Sample thread::

    {"pid": 8750, "thread_id": 1396..., "thread_name": "MainThread", "os_thread_id": 8750,
     "active": false, "owns_gil": false,
     "frames": [{"name": "all_reduce", "filename": "/.../torch/distributed/distributed_c10d.py",
                 "short_filename": "torch/distributed/distributed_c10d.py", "line": 3252,
                 "locals": null, "is_entry": false}]}

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from hangdoctor.parsers.frames import PastedDump, make_frame, make_thread

_DECODER = json.JSONDecoder()


def iter_json_documents(text: str, limit: int = 10000, start: int = 0) -> list[tuple[Any, int, int]]:
    """Decode consecutive JSON documents in ``text`` from offset ``start`` (decoded in place, the
    text is never sliced): (value, start, end) for each, offsets into ``text``; stops at the
    first thing that is not JSON."""
    out = []
    pos = start
    n = len(text)
    while pos < n and len(out) < limit:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] not in "[{":
            break
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            break
        out.append((value, pos, end))
        pos = end
    return out


def is_thread_obj(x: Any) -> bool:
    """True for a dict that looks like one py-spy JSON thread."""
    return (
        isinstance(x, dict)
        and isinstance(x.get("frames"), list)
        and ("thread_id" in x or "thread_name" in x or "os_thread_id" in x)
    )


def is_pyspy_json(value: Any) -> bool:
    """True for a decoded JSON value in one of the accepted py-spy shapes."""
    if isinstance(value, list):
        return bool(value) and all(is_thread_obj(t) for t in value)
    if isinstance(value, dict) and value:
        return all(
            isinstance(v, list) and all(is_thread_obj(t) for t in v) for v in value.values()
        ) and any(value.values())
    return False


def _int(x: Any) -> Optional[int]:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, str) and x.strip().lstrip("-").isdigit():
        return int(x)
    return None


def _frame(f: Any) -> Optional[dict]:
    if not isinstance(f, dict):
        return None
    filename = str(f.get("filename") or "")
    short = f.get("short_filename")
    line = _int(f.get("line"))
    native = not filename.endswith(".py") and (line in (None, 0)) and "<" not in filename
    locals_ = None
    if isinstance(f.get("locals"), list):
        locals_ = [
            {"name": str(v.get("name")), "repr": v.get("repr"), "arg": bool(v.get("arg"))}
            for v in f["locals"]
            if isinstance(v, dict)
        ]
    return make_frame(
        str(f.get("name") or "?"),
        filename,
        None if native else line,
        native=native,
        locals_=locals_,
        short=str(short) if short is not None else None,
    )


def _thread(t: dict) -> dict:
    frames = [fr for fr in (_frame(f) for f in t.get("frames") or []) if fr is not None]
    name = t.get("thread_name", t.get("name"))
    return make_thread(
        frames,
        name=str(name) if name is not None else None,
        thread_id=_int(t.get("thread_id")),
        os_thread_id=_int(t.get("os_thread_id")),
        active=bool(t.get("active")),
        owns_gil=bool(t.get("owns_gil")),
    )


def dumps_from_value(value: Any) -> list[PastedDump]:
    """Turn one decoded py-spy JSON value into dumps, one per pid."""
    groups: list[tuple[Optional[int], list]] = []
    if isinstance(value, dict):
        groups = [(_int(k), v) for k, v in value.items() if isinstance(v, list)]
    elif isinstance(value, list):
        by_pid: dict = {}
        for t in value:
            if is_thread_obj(t):
                by_pid.setdefault(_int(t.get("pid")), []).append(t)
        groups = list(by_pid.items())
    out = []
    for pid, threads in groups:
        ts = [_thread(t) for t in threads if is_thread_obj(t)]
        if pid is None:
            pid = next(
                (_int(t.get("pid")) for t in threads if isinstance(t, dict) and t.get("pid")), None
            )
        out.append(PastedDump(kind="pyspy-json", threads=ts, pid=pid))
    return out


def parse_pyspy_json(text: str) -> list[PastedDump]:
    """Parse py-spy JSON text (one or several concatenated documents) into dumps."""
    out: list[PastedDump] = []
    for value, _start, _end in iter_json_documents(text):
        if is_pyspy_json(value):
            out.extend(dumps_from_value(value))
    return out
