"""Knowledge packs: folders of field knowledge as data, found the way checks are found.

A pack is a folder holding any of ``rules.json``, ``known_issues.json`` and
``experiments.json`` (the formats of this package's own files), and, beside them,
``samples/rules.txt`` / ``samples/known_issues.txt``: evidence where each entry must fire and a
near miss where it must not (``### fires: ID`` / ``### ok: ID`` headers; :func:`read_samples`).

The built-in pack is this package's folder. The check registry
(``hangdoctor.checkapi.registry``) finds the others through the same mechanism as third-party
checks: a module or package registered in the ``hangdoctor.checks`` entry-point group whose folder
holds a pack, and every ``--checks-dir DIR`` that holds one. Entries are merged by id; the first
wins (a pack cannot silently replace a built-in rule), as with check ids.

Layer: knowledge; may import: the standard library and hangdoctor.knowledge.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("rules", "known_issues", "experiments")
SAMPLE_FILES = {"rules": "rules.txt", "known_issues": "known_issues.txt"}
_HEADER = re.compile(r"^### (fires|ok): (\S+)\s*$")


class PackError(ValueError):
    """A pack file that cannot be read: not JSON, or not in the expected shape."""


@dataclass(frozen=True)
class Pack:
    name: str  # "builtin", an entry point's name, or the --checks-dir path
    folder: str
    origin: str  # "builtin" | "entry point" | "--checks-dir"

    def has(self, kind: str) -> bool:
        return os.path.isfile(os.path.join(self.folder, kind + ".json"))

    def entries(self, kind: str) -> list[dict[str, Any]]:
        return list(_read(self.folder, kind))

    def samples(self, kind: str) -> list[tuple[str, str, str]]:
        path = os.path.join(self.folder, "samples", SAMPLE_FILES[kind])
        return read_samples(path) if os.path.isfile(path) else []

    def counts(self) -> dict[str, int]:
        return {k: len(self.entries(k)) for k in KINDS if self.has(k)}


@lru_cache(maxsize=64)
def _read(folder: str, kind: str) -> tuple[dict[str, Any], ...]:
    path = os.path.join(folder, kind + ".json")
    if not os.path.isfile(path):
        return ()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PackError(f"{path}: not readable as JSON ({exc})") from exc
    entries = data.get(kind) if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise PackError(f'{path}: expected {{"{kind}": [ {{...}}, ... ]}}')
    return tuple(entries)


def read_samples(path: str) -> list[tuple[str, str, str]]:
    """(``fires``|``ok``, id, text) for every sample of one samples file; ``# `` lines before a
    sample's first line are comments."""
    out: list[list[Any]] = []
    cur: list[Any] = []
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            m = _HEADER.match(line)
            if m:
                cur = [m.group(1), m.group(2), []]
                out.append(cur)
            elif cur and not (line.startswith("# ") and not cur[2]):
                cur[2].append(line)
    return [(k, i, "\n".join(t).strip() + "\n") for k, i, t in out]


def pack_in(folder: str, name: str, origin: str) -> Pack | None:
    """The pack in ``folder``, or None when it holds no knowledge file."""
    folder = os.path.abspath(folder)
    pack = Pack(name, folder, origin)
    return pack if any(pack.has(k) for k in KINDS) else None


BUILTIN = Pack("builtin", HERE, "builtin")
_extra: tuple[Pack, ...] = ()


def use(packs: list[Pack]) -> None:
    """Make ``packs`` (beside the built-in one) the knowledge every later evaluation reads."""
    global _extra
    _extra = tuple(p for p in packs if p.folder != BUILTIN.folder)


def active() -> tuple[Pack, ...]:
    return (BUILTIN,) + _extra


def merged(kind: str) -> list[dict[str, Any]]:
    """Every active pack's entries of one kind, de-duplicated by id (the first wins)."""
    return list(_merged(active(), kind))


@lru_cache(maxsize=16)
def _merged(packs: tuple[Pack, ...], kind: str) -> tuple[dict[str, Any], ...]:
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for p in packs:
        for e in p.entries(kind):
            if e.get("id") in seen:
                continue
            seen.add(str(e.get("id")))
            out.append(e if p is BUILTIN else {**e, "pack": p.name})
    return tuple(out)


def duplicates(packs: tuple[Pack, ...]) -> list[str]:
    """Ids that a later pack defines again (it is ignored there), as warnings."""
    problems: list[str] = []
    for kind in KINDS:
        owner: dict[str, str] = {}
        for p in packs:
            for e in p.entries(kind):
                i = str(e.get("id"))
                if i in owner:
                    problems.append(f"knowledge {kind} id {i} defined twice; the one in {p.name} is ignored")
                else:
                    owner[i] = p.name
    return problems
