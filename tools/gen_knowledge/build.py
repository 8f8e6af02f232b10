"""The pure part: sources + selectors -> the two documents. No downloads, no clock, no
randomness: the same inputs give the same bytes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

from tools.gen_knowledge import extract_native as N
from tools.gen_knowledge import extract_py as P
from tools.gen_knowledge import templates as T
from tools.gen_knowledge.sources import Source

SCHEMA = 1
GENERATED_BY = "tools/gen_knowledge (python -m tools.gen_knowledge; docs/knowledge-generation.md)"
WAIT_CLASSES = ("collective", "comm-init", "store", "gpu-sync", "kernel", "cuda-ipc", "ipc-queue",
                "lock", "file-read", "network", "compile", "graph-capture", "event-loop",
                "sleep-poll", "import", "idle-wait")
PHASES = ("import", "init", "rendezvous", "load", "compile", "warmup", "graph-capture", "serving",
          "shutdown", "any")
KINDS = ("mechanism", "symptom", "progress", "state")
LEVELS = ("error", "warning", "info", "debug", "exception")


@dataclass
class Wait:
    """Functions (Python: by qualname / decorator / what they call; native: symbols exported
    by a shared object, or declared by a header) that block, and what they block on."""
    id: str
    src: str  # "torch" or "torch==2.14.1"
    files: list[str]
    wait_class: str
    phase: str
    waits_for: str
    released_by: str
    name: str = ""  # regex, fullmatch on the qualname (Python) or the symbol (native)
    decorator: str = ""  # regex, search in any decorator
    calls: str = ""  # regex, search in any call the function makes
    exclude: str = ""  # regex, fullmatch on the qualname: left out
    native: str = ""  # "" (Python) | "dynsym" | "header"
    root: str = ""  # a repository folder that is the package's root ("server/" in TGI's repo)


@dataclass
class Msg:
    """Messages (log calls, raises, native log macros, or binary strings) and their meaning."""
    id: str
    src: str
    files: list[str]
    event: str
    kind: str
    phase: str
    meaning: str
    causes: list[tuple[str, float]] = field(default_factory=list)
    text: str = ""  # regex, search in the template
    levels: tuple[str, ...] = ()  # empty: any
    via: str = ""  # "log" | "raise" | "warn" | "print" ("" any; a catch-all skips raise / print)
    function: str = ""  # regex, fullmatch on the enclosing function's qualname
    lang: str = "py"  # "py" | "c" | "cxx" (C++ streams / concatenation) | "rust" | "go" | "strings"
    macros: dict[str, tuple[str, int]] = field(default_factory=dict)  # lang "c"
    min_literal: int = 8
    root: str = ""


def _src_matches(spec: str, s: Source) -> bool:
    pkg, _, ver = spec.partition("==")
    return s.package == pkg and (not ver or s.version == ver)


def pick_source(spec: str, sources: list[Source]) -> Source | None:
    return next((s for s in sources if _src_matches(spec, s)), None)


def pick_sources(spec: str, sources: list[Source]) -> list[Source]:
    """``"nccl*"``: every source of the package, in the order listed (newest first);
    otherwise the first that matches."""
    if spec.endswith("*"):
        return [s for s in sources if s.package == spec[:-1]]
    one = pick_source(spec, sources)
    return [one] if one else []


def module_of(path: str) -> str | None:
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts else None


@lru_cache(maxsize=512)
def _parse_py(src: Source, name: str) -> tuple[list[P.PyFunction], list[P.PyMessage]]:
    try:
        return P.parse(src.text(name), name)
    except SyntaxError:
        return [], []


@lru_cache(maxsize=16)
def _strings(src: Source, name: str) -> tuple[str, ...]:
    return tuple(sorted(set(N.printable_strings(src.read(name)))))


@lru_cache(maxsize=16)
def _dynsym(src: Source, name: str) -> tuple[str, ...]:
    out = {N.qualified_name(s) for s in N.elf_dynamic_symbols(src.read(name))}
    return tuple(sorted(x for x in out if x))


def _rel(root: str, f: str) -> str:
    """The file's path in the installed package: ``root`` "server/" strips a repository
    folder; "op_builder/=deepspeed/ops/op_builder/" maps one to where it is installed."""
    old, _, new = root.partition("=")
    return new + f[len(old):] if old and f.startswith(old) else f


def _files(sel: Wait | Msg, src: Source, missing: list[str]) -> list[str]:
    out: list[str] = []
    for pat in sel.files:
        got = src.match(pat)
        if not got:
            missing.append(pat)
        out += got
    return sorted(set(out))


def _missing_error(sel: Wait | Msg, srcs: list[Source], missing: list[str], errors: list[str]) -> None:
    """A file pattern is an error when no source of the selector has it (a file an older
    version of the package does not have yet is fine)."""
    for pat in sorted(set(missing)):
        if missing.count(pat) == len(srcs):
            errors.append(f"{sel.id}: {srcs[0].origin} has no file matching {pat}")


def _wait_points(sel: Wait, src: Source, missing: list[str]) -> list[dict]:
    out: list[dict] = []
    for f in _files(sel, src, missing):
        if sel.native == "dynsym":
            found = [(name, 0) for name in _dynsym(src, f) if re.fullmatch(sel.name, name)]
        elif sel.native == "header":
            found = N.header_functions(src.text(f), sel.name)
        else:
            found = []
            for fn in _parse_py(src, f)[0]:
                if sel.name and not re.fullmatch(sel.name, fn.qualname):
                    continue
                if sel.exclude and re.fullmatch(sel.exclude, fn.qualname):
                    continue
                if sel.decorator and not any(re.search(sel.decorator, d) for d in fn.decorators):
                    continue
                if sel.calls and not any(re.search(sel.calls, c) for c in fn.calls):
                    continue
                found.append((fn.qualname, fn.line))
        rel = _rel(sel.root, f)
        for qual, line in found:
            native = bool(sel.native)
            out.append({
                "id": f"{src.package}@{src.version}:{rel}:{qual}",
                "package": src.package, "version": src.version, "file": rel, "line": line,
                "module": None if native else module_of(rel),
                "function": qual if native else qual.rpartition(".")[2],
                "qualname": qual, "native": native,
                "wait_class": sel.wait_class, "phase": sel.phase,
                "waits_for": sel.waits_for, "released_by": sel.released_by, "selector": sel.id,
            })
    return out


def _raw_messages(sel: Msg, src: Source, f: str) -> list[tuple[int, str, str, str, list[T.Token]]]:
    """(line, level, via, function, tokens) of every message in one file, for the selector's
    language."""
    if sel.lang == "py":
        return [(m.line, m.level, m.via, m.function, m.tokens) for m in _parse_py(src, f)[1]]
    if sel.lang == "c":
        return [(m.line, m.level, m.macro, "", m.tokens) for m in N.c_messages(src.text(f), sel.macros)]
    if sel.lang == "cxx":
        return [(m.line, m.level, m.macro, "", m.tokens) for m in N.stream_messages(src.text(f))]
    if sel.lang == "rust":
        return [(m.line, m.level, m.macro, "", m.tokens) for m in N.rust_messages(src.text(f))]
    if sel.lang == "go":
        return [(m.line, m.level, m.macro, "", m.tokens) for m in N.go_messages(src.text(f))]
    if sel.lang == "strings":
        # a binary's strings: only those the selector names; printf fields become wildcards
        lvl = sel.levels[0] if sel.levels else "error"
        # Rust packs its literals into one run: the message starts where the selector matched
        out = []
        for s in _strings(src, f):
            m = re.search(sel.text, s)
            if m:
                s = s[m.start():]
                out.append((0, lvl, "string", "", T.brace_tokens(s) if "{}" in s else T.percent_tokens(s)))
        return out
    raise ValueError(sel.lang)


def _messages(sel: Msg, src: Source, missing: list[str], taken: set, known: set,
              first: bool = True) -> list[dict]:
    """``known``: (package, template) recorded from a newer version of the package (sources
    are listed newest first for a package read at several versions)."""
    out: list[dict] = []
    mine: set = set()
    for f in _files(sel, src, missing):
        for line, level, via, func, toks in _raw_messages(sel, src, f):
            template = T.to_template(toks)
            if sel.text and not re.search(sel.text, template):
                continue
            if sel.levels and level not in sel.levels and sel.lang != "strings":
                continue
            # a progress line is an info / debug log; a raise is never "progress" or "state"
            # unless the selector says so (a catch-all must not file errors as progress)
            if sel.kind == "progress" and not sel.levels and level not in ("info", "debug"):
                continue
            if sel.via and via != sel.via:
                continue
            if not sel.via and not sel.text and via in ("raise", "print") and sel.kind in ("progress", "state"):
                continue  # a catch-all takes logs; raises and prints only when named
            if sel.function and not re.fullmatch(sel.function, func):
                continue
            line_toks = T.first_line(toks, sel.min_literal)  # logs are matched a line at a time
            if line_toks is None:
                continue
            head = T.prefix(line_toks)
            syntax = T.syntax_of(toks)
            rel = _rel(sel.root, f)
            key = (src.package, src.version, rel, line, template)
            if key in taken:  # an earlier, more specific selector claimed it
                continue
            if not first and (src.package, template) in known and (src.package, template) not in mine:
                continue  # an older version of the package printing what the newer one does
            taken.add(key)
            mine.add((src.package, template))
            out.append({
                "id": "", "package": src.package, "version": src.version, "file": rel,
                "line": line, "function": func or None, "via": via, "level": level, "syntax": syntax,
                "template": template, "regex": T.to_regex(head), "regex_full": T.to_regex(line_toks),
                "literal": T.longest_literal(head), "key": T.key_word(head),
                "event": sel.event, "phase": sel.phase, "kind": sel.kind,
                "causes": [{"cause": c, "weight": w} for c, w in sel.causes],
                "meaning": sel.meaning, "selector": sel.id,
            })
    return out


def build(sources: list[Source], waits: list[Wait], msgs: list[Msg]) -> tuple[dict, dict, list[str]]:
    """(wait_points document, messages document, errors). An error is a selector that names a
    source that is absent, a file that is not there, or finds nothing."""
    errors: list[str] = []
    wps: dict[str, dict] = {}
    used: set[str] = set()
    for sel in waits:
        srcs = pick_sources(sel.src, sources)
        if not srcs:
            errors.append(f"{sel.id}: no source {sel.src}")
        seen_fn: set = set()
        missing: list[str] = []
        for src in srcs:
            got = _wait_points(sel, src, missing)
            if not got and src is srcs[0]:
                errors.append(f"{sel.id}: found nothing in {src.origin} {sel.files}")
            fresh = {(w["package"], w["file"], w["qualname"]) for w in got} - seen_fn
            for wp in got:
                if (wp["package"], wp["file"], wp["qualname"]) in fresh:
                    wps.setdefault(wp["id"], wp)  # the first selector that names a function wins
            seen_fn |= fresh
            used.add(src.origin)
        _missing_error(sel, srcs, missing, errors)
    taken: set = set()
    messages: list[dict] = []
    for sel in msgs:
        srcs = pick_sources(sel.src, sources)
        if not srcs:
            errors.append(f"{sel.id}: no source {sel.src}")
        known = {(m["package"], m["template"]) for m in messages}
        missing = []
        for src in srcs:
            got = _messages(sel, src, missing, taken, known, src is srcs[0])
            if not got and src is srcs[0]:
                errors.append(f"{sel.id}: found nothing in {src.origin} {sel.files}")
            messages += got
            known |= {(m["package"], m["template"]) for m in got}
            used.add(src.origin)
        _missing_error(sel, srcs, missing, errors)
    messages.sort(key=lambda m: (m["package"], m["version"], m["file"], m["line"], m["template"]))
    seen: dict[str, int] = {}
    for m in messages:
        base = f"{m['package']}@{m['version']}:{m['file']}:{m['line']}"
        n = seen.get(base, 0)
        seen[base] = n + 1
        m["id"] = base if n == 0 else f"{base}#{n}"
    srcs = sorted((s.describe() for s in sources if s.origin in used),
                  key=lambda d: (d["package"], d["version"]))
    head = {"schema": SCHEMA, "generated_by": GENERATED_BY, "sources": srcs}
    wdoc = dict(head, wait_points=[wps[k] for k in sorted(wps)])
    mdoc = dict(head, messages=messages)
    return wdoc, mdoc, errors


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=True) + "\n"
