"""Admission audit of the knowledge: on which corpus cases each rule and known issue fires.

    python benchmarks/rule_audit.py [CORPUS_DIR] [--markdown FILE] [--json FILE]

Every case of the corpus is analysed in-process as ``benchmarks/accuracy.py`` does (the same
reading, parsing, checks and triage). A rule fires on a case when a signal of the analysis carries
its reference (``rule:ID``, ``known-issue:ID``: the refs ``checks/knowledge.py`` gives every
signal of a matched entry) or the knowledge check lists it among the rules matched; a known issue
fires when it is linked in the analysis' ``known_issues``.

Per entry the audit prints its source kind (``library``, ``docs``, ``cases`` or ``none``), the
cases it fires on, how many of them have the entry's cause as their truth, and flags:

- ``fires-0`` / ``fires-1`` / ``fires-2+``: how many cases it fires on;
- ``no-source``: no valid ``source`` (the admission rule: a library file or docs page named, or at
  least two corpus cases);
- ``cases<2``: a ``cases`` source naming fewer than two cases;
- ``cases-not-fired``: a ``cases`` source naming a case the entry does not fire on;
- ``one-thread``: a ``cases`` source whose cases all come from one thread (same URL in source.md).

Only the evidence files of a case are read; ``source.md`` is read for its first URL (to tell
threads apart) and ``truth.txt`` for the column of right fires, never by the analysis.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import accuracy  # noqa: E402

SOURCE_KINDS = ("library", "docs", "cases")
_URL = re.compile(r"https?://\S+?(?=[\s)>\]]|$)")


def source_problems(entry: dict[str, Any]) -> list[str]:
    """What makes an entry's ``source`` invalid under the admission rule (empty when valid);
    the corpus is not consulted (see :func:`audit` for that)."""
    src = entry.get("source")
    if not isinstance(src, dict) or src.get("kind") not in SOURCE_KINDS:
        return ["no-source"]
    kind = src["kind"]
    need = {"library": ("package", "version", "file", "what"), "docs": ("package", "url", "what"),
            "cases": ("cases",)}[kind]
    missing = [k for k in need if not src.get(k)]
    if missing:
        return [f"source lacks {', '.join(missing)}"]
    if kind == "cases":
        cases = src["cases"]
        if not isinstance(cases, list) or len(set(cases)) < 2:
            return ["cases<2"]
    if kind == "docs" and not str(src["url"]).startswith(("http://", "https://")):
        return ["docs url is not a URL"]
    return []


def cases_problems(entry: dict[str, Any], key: str, per_case: dict[str, dict[str, Any]]) -> list[str]:
    """What is wrong with a ``cases`` source on this corpus (``key``: "rules" or "issues", the
    list of :func:`fires_per_case` the entry appears in): a case not in the corpus, a case it
    does not fire on, cases all from one thread. Empty for other source kinds."""
    src = entry.get("source")
    if not isinstance(src, dict) or src.get("kind") != "cases" or not isinstance(src.get("cases"), list):
        return []
    out = []
    unknown = [c for c in src["cases"] if c not in per_case]
    if unknown:
        out.append("cases-not-in-corpus: " + ", ".join(map(str, unknown)))
    silent = [c for c in src["cases"] if c in per_case and entry.get("id") not in per_case[c][key]]
    if silent:
        out.append("cases-not-fired: " + ", ".join(silent))
    if len({per_case[c]["thread"] for c in src["cases"] if c in per_case}) < 2:
        out.append("one-thread")
    return out


def thread_of(case_dir: str) -> str:
    """The thread a case comes from: the first URL its source.md names (the folder otherwise)."""
    try:
        with open(os.path.join(case_dir, "source.md"), encoding="utf-8") as f:
            m = _URL.search(f.read())
    except OSError:
        m = None
    return m.group(0).rstrip(".,") if m else os.path.basename(case_dir)


def fired_in(analysis: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(rule ids, known-issue ids) that fired in one analysis."""
    rules: set[str] = set()
    issues: set[str] = set()
    for c in analysis.get("checks") or []:
        for s in c.get("signals") or []:
            for ref in s.get("refs") or []:
                if isinstance(ref, str) and ref.startswith("rule:"):
                    rules.add(ref[5:])
                elif isinstance(ref, str) and ref.startswith("known-issue:"):
                    issues.add(ref[12:])
    for k in analysis.get("known_issues") or []:
        if k.get("id"):
            issues.add(k["id"])
        # an entry with no signal of its own (weight 0, nothing for or against) is still named
        # in the knowledge check's summary, "N rule(s) matched: a, b, …"
    for c in analysis.get("checks") or []:
        if c.get("id") == "knowledge.rules" and "rule(s) matched: " in (c.get("summary") or ""):
            names = c["summary"].split("rule(s) matched: ", 1)[1].split(", ")
            rules.update(n for n in names if n not in issues)
    return rules, issues


def fires_per_case(corpus: str) -> dict[str, dict[str, Any]]:
    """case name → {rules, issues, truth, alternative, thread} for every case of the corpus."""
    accuracy.warm_up()
    out: dict[str, dict[str, Any]] = {}
    for case in accuracy.cases_of(corpus):
        truth, alt = accuracy.read_truth(case)
        try:
            analysis = accuracy.analyse_in_process(accuracy.evidence_files(case))
            rules, issues = fired_in(analysis)
            error = None
        except Exception as e:  # noqa: BLE001 - a crash is reported, not a stop
            rules, issues, error = set(), set(), f"{type(e).__name__}: {e}"
        out[os.path.basename(case)] = {"rules": sorted(rules), "issues": sorted(issues), "truth": truth,
                                       "alternative": alt, "thread": thread_of(case), "error": error}
    return out


def audit(corpus: str | None) -> list[dict[str, Any]]:
    """One row per rule and known issue, in file order."""
    from hangdoctor.knowledge import matcher

    per_case = fires_per_case(corpus) if corpus else {}
    rows = []
    for kind, entries, key in (("rule", matcher.rules(), "rules"), ("known issue", matcher.known_issues(), "issues")):
        for e in entries:
            cases = sorted(c for c, v in per_case.items() if e["id"] in v[key])
            right = sorted(c for c in cases if e.get("cause") in (per_case[c]["truth"], per_case[c]["alternative"])
                           or per_case[c]["truth"] == f"other: {e.get('cause')}")
            flags = source_problems(e)
            src = e.get("source") if isinstance(e.get("source"), dict) else {}
            if per_case:
                n = len(cases)
                flags.insert(0, "fires-0" if n == 0 else "fires-1" if n == 1 else "fires-2+")
                flags += cases_problems(e, key, per_case)
            rows.append({
                "kind": kind, "id": e["id"], "cause": e.get("cause"),
                "source_kind": src.get("kind") or "none",
                "source": src or None, "written_from": e.get("written_from"), "status": e.get("status"),
                "fires_on": cases, "right_on": right, "flags": flags,
            })
    return rows


def counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def n(pred: Any) -> int:
        return sum(1 for r in rows if pred(r))

    return {
        "entries": len(rows),
        "rules": n(lambda r: r["kind"] == "rule"),
        "known_issues": n(lambda r: r["kind"] == "known issue"),
        "fires_0": n(lambda r: not r["fires_on"]),
        "fires_1": n(lambda r: len(r["fires_on"]) == 1),
        "fires_2plus": n(lambda r: len(r["fires_on"]) >= 2),
        "no_source": n(lambda r: "no-source" in r["flags"]),
        "by_source": {k: n(lambda r, k=k: r["source_kind"] == k) for k in SOURCE_KINDS + ("none",)},
        "invalid": n(lambda r: any(f for f in r["flags"] if not f.startswith("fires-"))),
    }


def _src_text(r: dict[str, Any]) -> str:
    s = r["source"] or {}
    if s.get("kind") == "library":
        return f"library: {s.get('package')} {s.get('version')} `{s.get('file')}`"
    if s.get("kind") == "docs":
        return f"docs: {s.get('package')} <{s.get('url')}>"
    if s.get("kind") == "cases":
        return f"cases: {len(s.get('cases') or [])}"
    return "none"


def markdown(rows: list[dict[str, Any]], c: dict[str, Any], corpus: str) -> str:
    out = [
        f"Knowledge admission audit on `{os.path.basename(os.path.normpath(corpus))}`: "
        f"{c['rules']} rules, {c['known_issues']} known issues; fire on 0 cases: {c['fires_0']}, "
        f"on 1: {c['fires_1']}, on 2 or more: {c['fires_2plus']}; without a valid source: {c['no_source']}; "
        f"entries with a problem: {c['invalid']}.",
        "",
        "| kind | id | cause | source | status | fires on | right | flags |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fires = ", ".join(x.split("-")[0] for x in r["fires_on"]) or "–"
        out.append(f"| {r['kind']} | `{r['id']}` | {r['cause']} | {_src_text(r)} | {r['status'] or '–'} | "
                   f"{len(r['fires_on'])}: {fires} | {len(r['right_on'])} | {'; '.join(r['flags'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="?", default=accuracy.DEFAULT_CORPUS)
    ap.add_argument("--markdown", metavar="FILE", help="write the table as Markdown ('-': stdout)")
    ap.add_argument("--json", metavar="FILE", help="write the rows and counts as JSON ('-': stdout)")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.corpus) or not accuracy.cases_of(args.corpus):
        print(f"rule_audit: {args.corpus}: no cases (folders with truth.txt) there", file=sys.stderr)
        return 2
    rows = audit(args.corpus)
    c = counts(rows)
    if args.markdown:
        md = markdown(rows, c, args.corpus)
        if args.markdown == "-":
            sys.stdout.write(md)
        else:
            with open(args.markdown, "w", encoding="utf-8") as f:
                f.write(md)
    if args.json:
        doc = json.dumps({"counts": c, "entries": rows}, indent=1)
        if args.json == "-":
            print(doc)
        else:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(doc + "\n")
    if not args.markdown and not args.json:
        for r in rows:
            print(f"{r['kind']:11} {r['id']:44} {r['source_kind']:8} {len(r['fires_on']):2} "
                  f"{','.join(x.split('-')[0] for x in r['fires_on'])}  {'; '.join(r['flags'])}")
        print(json.dumps(c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
