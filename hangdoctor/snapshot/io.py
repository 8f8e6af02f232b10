"""Reading and writing snapshots: versioned JSON, validated on the way in."""

from __future__ import annotations

import json
from typing import Any

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


def load_snapshot_text(text: str, name: str = "snapshot") -> list[dict[str, Any]]:
    """One snapshot, or a multi-host document ``{"schema_version": 1, "hosts": [...]}``."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno})",
                         "the file is truncated or not a snapshot") from None
    if isinstance(doc, dict) and isinstance(doc.get("hosts"), list) and "processes" not in doc:
        return [validate(h, f"{name} host {i}") for i, h in enumerate(doc["hosts"])]
    return [validate(doc, name)]


def dump_snapshot(snapshot: dict[str, Any]) -> str:
    return json.dumps(snapshot, indent=1, default=str)
