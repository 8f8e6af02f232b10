"""The matcher: evaluates the rules and known issues (JSON data beside this module) against the
typed lines and facts of one piece of evidence.

A matcher (``when``) is ``{"all": [...], "any": [...], "not": [...]}``; each condition is

- ``{"line": REGEX, "in": [KINDS], "min": N, "context": true}``: a line of one of the kinds matches
  (at least N lines); ``context`` lets it read the poster's sentences too, for what is context
  (a version, a model, a setting), never for a symptom; kinds: ``text`` (any pasted or log line), ``log``, ``kernel``, ``frame`` (a stack frame,
  ``name (file)``), ``top`` (the innermost frame of a thread), ``env`` (``KEY=VALUE``), ``cmd``
  (a command line), ``tail`` (the last lines of each input or log: where it stopped), ``last``
  (the last line of each);
- ``{"fact": NAME}`` (present and true), with ``"eq"``, ``"re"``, ``"lt"``/``"le"``/``"ge"``/
  ``"gt"`` (versions compare part by part; a list fact matches when any element does);
- ``{"all"|"any"|"not": [...]}``: nesting.

Layer: knowledge; may import: the standard library, hangdoctor.knowledge and the foundation.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Iterator

from hangdoctor.knowledge import packs
from hangdoctor.knowledge.audit import derive
from hangdoctor.knowledge.facts import extract, version_tuple

KINDS = ("text", "tail", "last", "log", "kernel", "frame", "top", "env", "cmd", "prose", "script")
TAIL_LINES = 5  # "the last thing it printed": the last lines of each input / log
_NOT_CONTENT = re.compile(r"^\s*(?:```\w*|\.\.\.|…|\[\.\.\..*\.\.\.\]|<details>.*|</details>)?\s*$")
MAX_LINES = 30000  # per kind: bounds the time on a huge paste
MAX_LINE_CHARS = 4000  # a 50 MB line is read by its start, like every other line
SYMPTOM_CAP = 0.2  # a downstream symptom points the search; it never decides it


@dataclass
class View:
    """The lines of the evidence by kind, and the facts read from them."""

    lines: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    facts: dict[str, Any] = field(default_factory=dict)
    _seen: dict[str, set[str]] = field(default_factory=dict, repr=False)

    def add(self, kind: str, line: str) -> None:
        bucket = self.lines[kind]
        if len(bucket) < MAX_LINES:
            line = line[:MAX_LINE_CHARS]
            # a line seen twice counts once (_line_hits): a paste of one line repeated a million
            # times is matched, and its facts read, once
            seen = self._seen.setdefault(kind, set())
            if line in seen:
                return
            seen.add(line)
            bucket.append(line)


def _tail(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in reversed(lines):
        if _NOT_CONTENT.match(line):
            continue  # fences, blank lines, "..." and excerpt markers are not where it stopped
        out.append(line)
        if len(out) >= TAIL_LINES:
            break
    return out[::-1]


def view_of_lines(text_lines: Iterable[str]) -> View:
    v = View()
    for line in text_lines:
        v.add("text", line)
    v.lines["tail"] = _tail(v.lines["text"])
    v.lines["last"] = v.lines["tail"][-1:]
    v.facts = derive(extract(v.lines["text"]))
    return v


def view_of_evidence(ev: Any) -> View:
    """Every line the evidence carries, live or pasted: log tail, kernel log, stacks, process
    command lines and environments, versions, and (pasted) the raw text of each input."""
    v = View()
    context: list[str] = []
    for s in ev.snapshots:
        for item in s.get("pasted_text") or []:
            if not isinstance(item, dict) or not isinstance(item.get("lines"), list):
                continue
            lines = [x for x in item["lines"] if isinstance(x, str)]
            for line in lines:
                v.add("text", line)
            v.lines["tail"].extend(_tail(lines))
            v.lines["last"].extend(_tail(lines)[-1:])
        for item in s.get("pasted_prose") or []:
            if isinstance(item, dict) and isinstance(item.get("lines"), list):
                # in a written document a sentence is a sentence; in a paste a bare program
                # message reads like one and goes back to the evidence
                bare_ok = not item.get("document")
                for line in item["lines"]:
                    if not isinstance(line, str):
                        continue
                    if item.get("script"):
                        v.add("script", line)  # a rule that reads code says so: "in": ["script"]
                        continue
                    v.add("text" if bare_ok and _message_at_start(line) else "prose", line)
                    context.append(line)
        log_tail = [x for x in (s.get("log") or {}).get("tail") or [] if isinstance(x, str)]
        if not s.get("pasted_text"):
            v.lines["tail"].extend(_tail(log_tail))
            v.lines["last"].extend(_tail(log_tail)[-1:])
        for line in log_tail:
            v.add("log", line)
        for line in (s.get("kernel_log") or {}).get("lines") or []:
            v.add("kernel", line)
        for k, val in (s.get("versions") or {}).items():
            v.add("env", f"{k}: {val}")
        for k, val in (s.get("env") or {}).items():
            v.add("env", f"{k}={val}")
    for ps in ev.stacks.values():
        if not ps.ok:
            continue
        for t in ps.threads:
            if t.frames:
                f0 = t.frames[0]
                v.add("top", f"{f0.name} ({f0.file})")
            for f in t.frames:
                v.add("frame", f"{f.name} ({f.file})")
    # the NCCL each process mapped (live: /proc/PID/maps, the wheel's dist-info), as a paste says it
    for lib in ev.nccl.libraries:
        if lib.get("version"):
            v.add("env", f"NCCL version {lib['version']}")
        src = str(lib.get("source") or "")
        if src.startswith("pip wheel "):
            v.add("env", src[len("pip wheel "):].replace("_", "-").split(".dist-info")[0])
        if lib.get("path"):
            v.add("env", str(lib["path"]))
    for p in ev.processes:
        if p.cmdline_text:
            v.add("cmd", p.cmdline_text)
        for k, val in p.env.items():
            v.add("env", f"{k}={val}")
    # the live path has no raw text: its log and kernel lines are its text
    if not v.lines["text"]:
        v.lines["text"] = v.lines["log"] + v.lines["kernel"]
    # a poster's sentences are context: the settings and versions they name are read (rules that
    # key only on those are risk factors and never lead alone; see triage)
    v.facts = derive(extract(v.lines["text"] + v.lines["env"] + v.lines["cmd"] + context))
    v.facts["prose_only"] = not (v.lines["text"] or v.lines["frame"] or v.lines["env"] or v.lines["cmd"]
                                 or v.lines["kernel"]) and bool(v.lines["prose"])
    # what only a live collection knows: a health endpoint that answered, a log still growing
    if any(isinstance(h, dict) and h.get("ok") for h in ev.http):
        v.facts["health_ok"] = True
    if ev.has_timing and (ev.log_meta.get("grew_bytes") or 0) > 0:
        v.facts["log_growing"] = True
    return v


_LEAD = re.compile(r"^\s*(?:>\s*)*(?:[-*+]\s+|\d+[.)]\s+)?")


def _message_at_start(line: str) -> bool:
    """A line read as prose that a rule's pattern matches from its first characters is a program
    message pasted without its prefix ("No available shared memory broadcast block found in 60
    seconds."), not a sentence about one: it goes back to the evidence."""
    body = _LEAD.sub("", line, count=1)
    if body.startswith("`"):
        return False  # a message in backticks is a mention of it
    for e in rules():
        for rx in _line_patterns(e.get("when") or {}):
            m = rx.search(body)
            # at the start, or after a short lead-in of the same message ("Failed to initialize
            # NVML: Driver/library version mismatch"), never after a sentence of the poster's
            if m and (m.start() <= 2 or (m.start() <= 40 and not re.search(r"[.!?;]\s", body[: m.start()]))):
                return True
    return False


def _line_patterns(cond: dict[str, Any]) -> list[re.Pattern[str]]:
    out = []
    if "line" in cond and set(cond.get("in") or ["text"]) & {"text", "log", "tail", "last"}:
        out.append(_rx(cond["line"]))
    for key in ("all", "any"):
        for c in cond.get(key) or []:
            if isinstance(c, dict):
                out.extend(_line_patterns(c))
    return out


@lru_cache(maxsize=4096)
def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _cmp(have: Any, op: str, want: Any) -> bool:
    if isinstance(want, str) and re.match(r"^\d+(\.\d+)*$", want):
        a, b = version_tuple(have), version_tuple(want)
        if not a:
            return False
        b = b[: max(len(a), 1)] if op in ("eq",) else b
    else:
        try:
            a, b = float(have), float(want)
        except (TypeError, ValueError):
            return False
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b}[op]


def _fact_ok(cond: dict[str, Any], facts: dict[str, Any]) -> bool:
    have = facts.get(cond["fact"])
    if have is None or have is False or have == []:
        return False
    values = have if isinstance(have, list) else [have]
    for val in values:
        ok = True
        for op in ("lt", "le", "gt", "ge"):
            if op in cond and not _cmp(val, op, cond[op]):
                ok = False
        if "eq" in cond and str(val) != str(cond["eq"]) and not (
                isinstance(cond["eq"], str) and re.match(r"^\d+(\.\d+)*$", cond["eq"])
                and version_tuple(val)[: len(version_tuple(cond["eq"]))] == version_tuple(cond["eq"])):
            ok = False
        if "re" in cond and not _rx(cond["re"]).search(str(val)):
            ok = False
        if ok:
            return True
    return False


def _line_hits(cond: dict[str, Any], view: View) -> list[str]:
    rx = _rx(cond["line"])
    # "text" already holds the log and kernel lines (pasted: the raw inputs; live: the tails)
    kinds = list(cond.get("in") or ["text", "frame", "env", "cmd"])
    if cond.get("context") and "prose" not in kinds:
        kinds.append("prose")  # a setting or a model the poster names: context, read as such
    hits: list[str] = []
    need = int(cond.get("min", 1))
    for kind in kinds:
        for line in view.lines.get(kind, ()):
            if rx.search(line) and line not in hits:  # a line seen twice counts once
                hits.append(line)
                if len(hits) >= need:
                    return hits
    return hits if len(hits) >= need else []


def holds(cond: dict[str, Any], view: View, found: list[str]) -> bool:
    """Whether ``cond`` holds; the lines that made it hold are appended to ``found``."""
    if "line" in cond:
        hits = _line_hits(cond, view)
        if hits:
            found.append(hits[0])
        return bool(hits)
    if "fact" in cond:
        return _fact_ok(cond, view.facts)
    ok = True
    if "all" in cond:
        ok = all(holds(c, view, found) for c in cond["all"])
    if ok and "any" in cond:
        ok = any(holds(c, view, found) for c in cond["any"])
    if ok and "not" in cond:
        ok = not any(holds(c, view, []) for c in cond["not"])
    return ok


@dataclass
class Match:
    entry: dict[str, Any]
    lines: list[str]

    @property
    def id(self) -> str:
        return self.entry["id"]


def evaluate(entries: list[dict[str, Any]], view: View) -> list[Match]:
    out = []
    for e in entries:
        found: list[str] = []
        if holds(e["when"], view, found):
            out.append(Match(e, found))
    return out


# Corpus cases whose own rules are switched off: leave-one-source-out scoring
# (benchmarks/accuracy.py --loso) scores each case without the entries written from it.
_HELD_OUT: frozenset[str] = frozenset()


@contextmanager
def holding_out(cases: Iterable[str]) -> Iterator[None]:
    """Within the block, rules and known issues whose ``written_from`` names one of ``cases``
    are not used: the knowledge is scored on cases it was not written from."""
    global _HELD_OUT
    before = _HELD_OUT
    _HELD_OUT = frozenset(cases)
    try:
        yield
    finally:
        _HELD_OUT = before


def _not_held_out(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not _HELD_OUT:
        return entries
    return [e for e in entries if not _HELD_OUT.intersection(e.get("written_from") or ())]


_EVENT_KINDS = {"text", "tail", "last", "log", "kernel", "frame", "top", "prose"}


def _has_event(cond: Any) -> bool:
    """Whether a condition reads something that happened (a line, a frame), not only a setting."""
    if not isinstance(cond, dict):
        return False
    if "line" in cond:
        return bool(set(cond.get("in") or ["text", "frame", "env", "cmd"]) & _EVENT_KINDS)
    return any(_has_event(c) for key in ("all", "any") for c in cond.get(key) or [])


def is_risk_factor(entry: dict[str, Any], match: Any = None, view: View | None = None) -> bool:
    """A rule or known issue that keys only on settings (versions, a /dev/shm size, an env
    variable, a flag on the command line, what a poster names) is a risk factor: it supports a
    cause that a symptom points to and never leads alone. With the match and its view, what
    decides is what made it hold this time: no line of program output or stack among them.
    ``"risk": true/false`` in the entry overrides the reading."""
    if "risk" in entry:
        return bool(entry["risk"])
    if not _has_event(entry.get("when") or {}):
        return True
    if match is None or view is None:
        return False
    events = {line for k in ("text", "tail", "last", "log", "kernel", "frame", "top", "script")
              for line in view.lines.get(k, ())}
    return not any(line in events for line in match.lines)


def rules() -> list[dict[str, Any]]:
    """The mechanism rules of every active knowledge pack (:mod:`hangdoctor.knowledge.packs`)."""
    return _not_held_out(packs.merged("rules"))


def known_issues() -> list[dict[str, Any]]:
    return _not_held_out(packs.merged("known_issues"))


def experiments() -> list[dict[str, Any]]:
    return packs.merged("experiments")


def validate(pack: packs.Pack | None = None) -> list[str]:
    """Problems in the data files of one pack (default: every active one): unknown causes, bad
    regexes, missing fields, duplicate ids."""
    from hangdoctor.knowledge.causes import CAUSES

    if pack is None:
        kinds = {k: packs.merged(k) for k in packs.KINDS}
    else:
        kinds = {k: pack.entries(k) for k in packs.KINDS}
    known_experiments = {x.get("id") for x in experiments()} | {x.get("id") for x in kinds["experiments"]}

    problems = []
    seen: set[str] = set()

    def walk(cond: Any, where: str) -> None:
        if not isinstance(cond, dict):
            problems.append(f"{where}: a condition must be an object")
            return
        if "line" in cond:
            try:
                re.compile(cond["line"])
            except re.error as e:
                problems.append(f"{where}: bad regex {cond['line']!r}: {e}")
            for k in cond.get("in") or []:
                if k not in KINDS:
                    problems.append(f"{where}: unknown line kind {k!r}")
        for key in ("all", "any", "not"):
            for c in cond.get(key) or []:
                walk(c, where)

    for kind, entries in (("rule", kinds["rules"]), ("known issue", kinds["known_issues"])):
        for e in entries:
            where = f"{kind} {e.get('id')}"
            for key in ("id", "cause", "weight", "when", "summary"):
                if key not in e:
                    problems.append(f"{where}: missing {key!r}")
            if e.get("id") in seen:
                problems.append(f"{where}: duplicate id")
            seen.add(e.get("id", ""))
            for c in [e.get("cause")] + [x.get("cause") for x in e.get("also", []) + e.get("against", [])]:
                if c not in CAUSES:
                    problems.append(f"{where}: unknown cause {c!r}")
            walk(e.get("when", {}), where)
            if kind == "known issue":
                for key in ("url", "project", "affected", "workaround"):
                    if key not in e:
                        problems.append(f"{where}: missing {key!r}")
                if e.get("experiment") and e["experiment"] not in known_experiments:
                    problems.append(f"{where}: unknown experiment {e['experiment']!r}")
    for x in kinds["experiments"]:
        for key in ("id", "toggle", "confirms", "rules_out", "if_fixed", "if_not"):
            if key not in x:
                problems.append(f"experiment {x.get('id')}: missing {key!r}")
        for c in list(x.get("confirms", [])) + list(x.get("rules_out", [])):
            if c not in CAUSES:
                problems.append(f"experiment {x.get('id')}: unknown cause {c!r}")
        for key in ("when", "unless"):
            if key in x:
                walk(x[key], f"experiment {x.get('id')}")
    return problems
