"""Reading and writing snapshots: versioned JSON, validated on the way in.

Layer: snapshot; may import: the standard library, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

import json
from typing import Any

from hangdoctor import bounded
from hangdoctor.errors import InputError

SCHEMA_VERSION = 1


def validate(doc: Any, name: str = "snapshot") -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise InputError(f"{name}: a snapshot must be a JSON object", "give a file written by hangdoctor --save-snapshot")
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise InputError(f"{name}: no schema_version: not a hangdoctor snapshot", "give a file written by hangdoctor")
    if version > SCHEMA_VERSION:
        raise InputError(f"{name}: schema_version {version} is newer than this hangdoctor understands ({SCHEMA_VERSION})",
                         "upgrade hangdoctor (pip install -U hangdoctor)")
    sections = (("processes", list), ("stacks", dict), ("manifest", list), ("gpus", dict),
                ("log", dict), ("kernel_log", dict), ("host", dict), ("targets", dict),
                ("host_memory", dict), ("shm", dict), ("versions", dict), ("http", list),
                ("notes", list), ("pasted", list))
    for key, kind in sections:
        if key in doc and doc[key] is None:
            del doc[key]  # an absent section, written as null
        elif key in doc and not isinstance(doc[key], kind):
            raise InputError(f"{name}: '{key}' should be a JSON {kind.__name__}: the snapshot is malformed",
                             "re-take it, or remove the broken section")
    for key in ("log", "kernel_log"):
        sec = doc.get(key)
        field = "tail" if key == "log" else "lines"
        if sec is not None and not isinstance(sec.get(field, []), list):
            raise InputError(f"{name}: '{key}.{field}' should be a list of lines", "re-take the snapshot")
    # Entries of the wrong shape inside the sections are dropped (and said so) by
    # snapshot/normalize.py, which every snapshot goes through before analysis.
    doc.setdefault("manifest", [])
    doc.setdefault("origin", "live")
    return doc


NOT_REDACTED = ("NOT REDACTED (--no-redact): this report may contain tokens and keys; "
                "do not share it")
REDACTED_ON_LOAD = ("the snapshot was taken with --no-redact; its secrets were redacted when it "
                    "was read (pass --no-redact to keep them, for private use only)")
# Snapshots are read whole: 64 processes x 200 threads with --native is 61 MB already, past
# the 64 MiB that pasted text is cut to.
MAX_SNAPSHOT_BYTES = bounded.MAX_JSON_BYTES


def load_snapshot_text(text: str, name: str = "snapshot", redact: bool = True) -> list[dict[str, Any]]:
    """One snapshot, or a multi-host document ``{"schema_version": 1, "hosts": [...]}``.

    A snapshot taken with ``--no-redact`` is redacted here unless ``redact`` is false (F15: a
    re-rendered report must not carry what the live run kept for private use)."""
    try:
        # bounded: a byte cap, a value count and a depth (R10: 900 levels was a RecursionError)
        doc = bounded.loads(text, name)
    except ValueError as exc:
        raise InputError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno})",
                         "the file is truncated or not a snapshot") from None
    if isinstance(doc, dict) and isinstance(doc.get("hosts"), list) and "processes" not in doc:
        docs = [validate(h, f"{name} host {i}") for i, h in enumerate(doc["hosts"])]
    else:
        docs = [validate(doc, name)]
    return [redact_loaded(d) if redact else d for d in docs]


def redact_loaded(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` redacted when it says it was not (or says nothing), with a note saying so."""
    if doc.get("redacted") is True:
        return doc
    from hangdoctor.redact import redact_obj

    was = doc.get("redacted")
    out = redact_obj(doc)
    out["redacted"] = True
    if was is False:
        notes = out.get("notes") if isinstance(out.get("notes"), list) else []
        out["notes"] = [REDACTED_ON_LOAD] + notes
    return out


def mark_unredacted(analysis: dict[str, Any], snapshots: list[dict[str, Any]]) -> None:
    """Put the NOT REDACTED warning first in the analysis when any snapshot kept its secrets."""
    if any(isinstance(s, dict) and s.get("redacted") is False for s in snapshots):
        weakened = analysis.setdefault("weakened", [])
        if isinstance(weakened, list) and NOT_REDACTED not in weakened:
            weakened.insert(0, NOT_REDACTED)


def redact_loaded_analysis(analysis: dict[str, Any]) -> dict[str, Any]:
    """A saved analysis of a --no-redact run, redacted for re-rendering (its marking replaced)."""
    weakened = analysis.get("weakened")
    if not (isinstance(weakened, list) and any(
            isinstance(w, str) and w.startswith("NOT REDACTED") for w in weakened)):
        return analysis
    from hangdoctor.redact import redact_obj

    out = redact_obj(analysis)
    out["weakened"] = [REDACTED_ON_LOAD if isinstance(w, str) and w.startswith("NOT REDACTED")
                       else w for w in out.get("weakened") or []]
    return out


def read_snapshot_file(path: str) -> str | None:
    """The whole text of ``path`` when it is a regular file holding a hangdoctor JSON document
    (its first KiB has ``schema_version``), else None (the caller reads it as evidence)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SNAPSHOT_BYTES:
            return None  # a folder, a FIFO, a device: the evidence reader says what to do
        with os.fdopen(fd, "rb") as f:
            fd = -1
            head = f.read(1024)
            if not head.lstrip().startswith(b"{") or b'"schema_version"' not in head:
                return None
            return (head + f.read()).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def dump_snapshot(snapshot: dict[str, Any]) -> str:
    """Compact JSON: a 64 x 200-thread snapshot is a third smaller than with indentation."""
    return json.dumps(snapshot, separators=(",", ":"), default=str)


def write_snapshot_file(path: str, doc: Any, derived: bool = False) -> None:
    """Write a snapshot document safely (hangdoctor.outfile); ``derived``: the name was made up
    from another path, so a symlink found there is refused rather than followed."""
    from hangdoctor.outfile import write_text

    write_text(path, dump_snapshot(doc), follow_symlink=not derived, what="snapshot")
