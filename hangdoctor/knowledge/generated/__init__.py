"""Wait points and message templates generated from the libraries' own source.

``wait_points.json`` and ``messages.json`` beside this file are written by
``python -m tools.gen_knowledge`` (docs/knowledge-generation.md); every entry names the package,
version and file it came from. This module only reads them:

- ``classify_frame(function, module_or_file)``: the wait point a stack frame is in, for a
  Python frame (``recv_bytes`` in ``multiprocessing/connection.py``) or a native symbol as
  py-spy / gdb print it (``c10d::TCPStore::doWait(...)``, ``ncclCommInitRank+0x1f``).
- ``match_message(line)``: the templates a log line was printed from. Only templates keyed on
  a word of the line are tried; a template's regex is its identifying head, so a line the
  poster cut short still matches, and a template the whole line matches ranks first.

Layer: knowledge; may import: the standard library and hangdoctor.knowledge.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# a native frame as printed: "ns::Cls::fn(args) const", "fn+0x1f", "fn [clone .cold]", "0x7f.. in fn"
_NATIVE_TAIL = re.compile(r"\s*(?:\(.*\)\s*(?:const)?\s*|\+0x[0-9a-fA-F]+|\s\[clone [^\]]*\])+$")
_UNVERSIONED = re.compile(r"(?:_v\d+)?(?:_ptsz|_ptds)?$")
_GDB_PREFIX = re.compile(r"^(?:#\d+\s+)?(?:0x[0-9a-fA-F]+\s+in\s+)?")


@lru_cache(maxsize=1)
def wait_points() -> list[dict[str, Any]]:
    return json.loads((HERE / "wait_points.json").read_text(encoding="utf-8"))["wait_points"]


@lru_cache(maxsize=1)
def messages() -> list[dict[str, Any]]:
    return json.loads((HERE / "messages.json").read_text(encoding="utf-8"))["messages"]


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(Python function name -> entries, native symbol -> entries). Several versions of one
    package may name the same function: the newest comes first."""
    py: dict[str, list[dict]] = {}
    native: dict[str, list[dict]] = {}
    for wp in wait_points():
        (native if wp["native"] else py).setdefault(wp["function"], []).append(wp)
    for table in (py, native):
        for entries in table.values():
            entries.sort(key=lambda w: _version_key(w["version"]), reverse=True)
    return py, native


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.+-]", v))


def native_symbol(text: str) -> str:
    """``#3 0x7f.. in c10d::TCPStore::doWait(c10::ArrayRef<...>, ...) const`` -> the bare
    qualified name ``c10d::TCPStore::doWait``."""
    s = _GDB_PREFIX.sub("", text.strip())
    s = re.sub(r"\s+(?:from|at)\s+\S+$", "", s)  # gdb's "from /lib/libx.so" / "at file.cc:12"
    # cut at the argument list: the first '(' that is not part of "(anonymous namespace)"
    depth_cut = re.search(r"\((?!anonymous namespace\))", s)
    if depth_cut:
        s = s[: depth_cut.start()]
    s = _NATIVE_TAIL.sub("", s)
    return s.strip()


def _path_matches(file: str, module: str | None, where: str) -> bool:
    w = where.replace("\\", "/").strip()
    w = re.sub(r":\d+$", "", w)  # "connection.py:430"
    w = re.sub(r"^<frozen (.+)>$", r"\1", w)  # py-spy's "<frozen importlib._bootstrap>"
    if w.endswith(".py"):
        return w.endswith(file) or file.endswith(w.lstrip("./"))
    # a dotted module name ("multiprocessing.connection")
    return bool(module) and (w == module or w.endswith("." + module) or module.endswith("." + w))


def classify_frame(function: str, module_or_file: str | None = None) -> dict[str, Any] | None:
    """The wait point a frame is in, or None. A Python frame matches by function name and by
    its file (a path suffix) or dotted module; a native frame by symbol, with or without its
    argument list, offset or library. Without a file, only a native symbol (or a qualified
    ``Class.method`` that one entry alone has) is trusted."""
    py, native = _index()
    fn = function.strip()
    if module_or_file:
        name = fn.rpartition(".")[2] if "." in fn and "::" not in fn and "(" not in fn else fn
        for wp in py.get(name, []):
            if _path_matches(wp["file"], wp["module"], module_or_file):
                if "." in fn and "::" not in fn and wp["qualname"] != fn and not wp["qualname"].endswith("." + fn):
                    continue
                return wp
    sym = native_symbol(fn)
    # the driver exports versioned entry points the header names without the suffix
    # (cuda.h: #define cuIpcOpenMemHandle cuIpcOpenMemHandle_v2; per-thread-stream _ptsz)
    for cand in (sym, _UNVERSIONED.sub("", sym)):
        if cand in native:
            return native[cand][0]
    if "." in fn and "::" not in fn and "(" not in fn:
        hits = [wp for entries in py.values() for wp in entries if wp["qualname"] == fn]
        if len({(w["package"], w["file"]) for w in hits}) == 1:
            return hits[0]
    return None


@lru_cache(maxsize=1)
def _message_index() -> tuple[dict[str, list[tuple[str, re.Pattern[str], dict]]], list[tuple[str, re.Pattern[str], dict]]]:
    """(key word -> [(literal, regex, entry)], entries without a key word). The generator
    records for each template a whole word its line must contain ("key"): a line is split into
    words once and only the templates keyed on one of them are tried."""
    keyed: dict[str, list[tuple[str, re.Pattern[str], dict]]] = {}
    rest: list[tuple[str, re.Pattern[str], dict]] = []
    for m in messages():
        item = (m["literal"], re.compile(m["regex"]), m)
        if m.get("key"):
            keyed.setdefault(m["key"], []).append(item)
        else:
            rest.append(item)
    return keyed, rest


# punctuation -> space, so that str.split() yields the \w+ words of a line (fast, in C)
_SPLIT = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isalnum() or c == "_")})


@lru_cache(maxsize=1)
def _keys() -> frozenset[str]:
    return frozenset(_message_index()[0])


def match_message(line: str) -> list[dict[str, Any]]:
    """Every template the line could have been printed from, most specific (longest literal
    text) first."""
    if not line:
        return []
    keyed, rest = _message_index()
    words = _keys().intersection(line.translate(_SPLIT).split())
    cands = [item for w in words for item in keyed[w]]
    hits = [entry for lit, rx, entry in cands + rest if lit in line and rx.search(line)]
    # the regex is the template's head (posted lines are often cut); where the whole line is
    # there, the template it fully matches comes first ("... - Init START" vs "- Init COMPLETE")
    hits.sort(key=lambda e: (not _full(e["regex_full"]).search(line), -len(e["literal"]), e["id"]))
    return hits


@lru_cache(maxsize=4096)
def _full(regex: str) -> re.Pattern[str]:
    return re.compile(regex)
