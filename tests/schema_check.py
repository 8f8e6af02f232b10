"""A validator for the subset of JSON Schema (2020-12) that hangdoctor/schemas/*.json use:
type, const, enum, required, properties, additionalProperties, items, minimum, maximum,
minLength and $ref to "#/$defs/NAME". A keyword outside this subset fails loudly, so a schema
cannot silently use something this validator does not check.

``record(kind, doc)`` asserts a --json document the suite produced is valid; the tests that
run ``--json`` commands call it on what they get (tests/test_schemas.py, test_probe*.py,
test_k8s_shape.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parent.parent / "hangdoctor" / "schemas"
KNOWN = {"$schema", "$id", "title", "description", "type", "const", "enum", "required",
         "properties", "additionalProperties", "items", "minimum", "maximum", "minLength",
         "$ref", "$defs"}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def load(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text())


def errors(doc: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, where: str = "$") -> list[str]:
    """Every way ``doc`` breaks ``schema`` (empty: valid)."""
    root = root if root is not None else schema
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"{where}: schema keywords this validator does not check: {sorted(unknown)}")
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return errors(doc, root["$defs"][name], root, where)
    out: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](doc) for t in types):
            return [f"{where}: {type(doc).__name__} is not {'/'.join(types)}"]
    if "const" in schema and doc != schema["const"]:
        out.append(f"{where}: {doc!r} != {schema['const']!r}")
    if "enum" in schema and doc not in schema["enum"]:
        out.append(f"{where}: {doc!r} not one of {schema['enum']}")
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema and doc < schema["minimum"]:
            out.append(f"{where}: {doc} < {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            out.append(f"{where}: {doc} > {schema['maximum']}")
    if isinstance(doc, str) and len(doc) < schema.get("minLength", 0):
        out.append(f"{where}: shorter than {schema['minLength']}")
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                out.append(f"{where}: no {key!r}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in doc.items():
            if key in props:
                out += errors(value, props[key], root, f"{where}.{key}")
            elif extra is False:
                out.append(f"{where}: unexpected {key!r}")
            elif isinstance(extra, dict):
                out += errors(value, extra, root, f"{where}.{key}")
    if isinstance(doc, list) and "items" in schema:
        for i, value in enumerate(doc):
            out += errors(value, schema["items"], root, f"{where}[{i}]")
    return out


def record(kind: str, doc: Any) -> None:
    """Assert ``doc`` is valid for ``hangdoctor/schemas/KIND.schema.json``."""
    problems = errors(doc, load(kind))
    assert problems == [], f"{kind} --json breaks its schema:\n" + "\n".join(problems[:20])
