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
    for key, kind in (("processes", list), ("stacks", dict), ("manifest", list), ("gpus", dict)):
        if key in doc and not isinstance(doc[key], kind):
            raise InputError(f"{name}: '{key}' should be a JSON {kind.__name__}: the snapshot is malformed",
                             "re-take it, or remove the broken section")
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
