"""Admission of knowledge: every rule and known issue names where it comes from.

An entry stays only with a ``source``: a library's own code (package, version, file and what was
read there), a library's docs (package, URL, what they say), or ``cases``: at least two corpus
reports from different threads, each of which the entry fires on. It also says which corpus
cases it was written from (``written_from``) and whether it is ``stable`` or ``experimental``.
The corpus part runs on ``../shared/corpus`` (or HANGDOCTOR_CORPUS); without a corpus it skips on
a developer machine and fails under CI=true.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import need

from hangdoctor.knowledge import matcher

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import accuracy  # noqa: E402
import rule_audit  # noqa: E402

CORPUS = os.environ.get("HANGDOCTOR_CORPUS", accuracy.DEFAULT_CORPUS)
STATUSES = ("stable", "experimental")


def _entries() -> list[tuple[str, dict[str, Any]]]:
    return [("rule", e) for e in matcher.rules()] + [("known issue", e) for e in matcher.known_issues()]


def _problems(e: dict[str, Any]) -> list[str]:
    out = rule_audit.source_problems(e)
    wf = e.get("written_from")
    if not isinstance(wf, list) or not all(isinstance(c, str) and c for c in wf):
        out.append("written_from is not a list of case folders")
    if e.get("status") not in STATUSES:
        out.append(f"status {e.get('status')!r} is not one of {STATUSES}")
    return out


def test_every_entry_names_a_valid_source() -> None:
    bad = {f"{kind} {e['id']}": p for kind, e in _entries() if (p := _problems(e))}
    assert bad == {}, bad


@pytest.mark.parametrize("entry,why", [
    ({"id": "x"}, "no-source"),
    ({"id": "x", "source": {"kind": "blog", "url": "https://example.org"}}, "no-source"),
    ({"id": "x", "source": {"kind": "library", "package": "nccl", "version": "2.20.5", "what": "w"}}, "source lacks file"),
    ({"id": "x", "source": {"kind": "docs", "package": "nccl", "url": "docs.nvidia.com", "what": "w"}}, "docs url is not a URL"),
    ({"id": "x", "source": {"kind": "cases", "cases": ["a01-x"]}}, "cases<2"),
    ({"id": "x", "source": {"kind": "cases", "cases": ["a01-x", "a01-x"]}}, "cases<2"),
])
def test_the_admission_check_refuses(entry: dict[str, Any], why: str) -> None:
    """The check above can fail: each of these entries is refused, for its reason."""
    assert why in rule_audit.source_problems(entry)


@pytest.fixture(scope="module")
def fired() -> dict[str, dict[str, Any]]:
    need(os.path.isdir(CORPUS) and bool(accuracy.cases_of(CORPUS)), f"the field corpus ({CORPUS})")
    return rule_audit.fires_per_case(CORPUS)


def test_cases_sources_fire_on_their_cases_from_different_threads(fired) -> None:
    """A ``cases`` source is the entry firing on two independent reports: each case listed exists,
    the entry fires on it, and the cases come from at least two threads."""
    bad = {e["id"]: p for kind, e in _entries()
           if (p := rule_audit.cases_problems(e, "rules" if kind == "rule" else "issues", fired))}
    assert bad == {}, bad


def test_written_from_names_corpus_cases(fired) -> None:
    bad = {e["id"]: [c for c in e["written_from"] if c not in fired]
           for _kind, e in _entries() if any(c not in fired for c in e.get("written_from") or [])}
    assert bad == {}, bad


def test_the_corpus_check_refuses(fired) -> None:
    """The corpus check can fail: a rule listing cases it does not fire on, or two cases of one
    thread, is refused."""
    names = sorted(fired)
    quiet = [c for c in names if "nccl.shm-segment-failed" not in fired[c]["rules"]][:2]
    entry = {"id": "nccl.shm-segment-failed", "source": {"kind": "cases", "cases": quiet}}
    assert any(p.startswith("cases-not-fired") for p in rule_audit.cases_problems(entry, "rules", fired))
    entry = {"id": "x", "source": {"kind": "cases", "cases": ["no-such-case", names[0]]}}
    problems = rule_audit.cases_problems(entry, "rules", fired)
    assert any(p.startswith("cases-not-in-corpus") for p in problems) and "one-thread" in problems
