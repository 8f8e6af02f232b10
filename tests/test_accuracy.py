"""Field accuracy may not fall back: the corpus of real reports (../shared/corpus, or
HANGDOCTOR_CORPUS) is analysed case by case as `hangdoctor analyze` does; no case may crash and
top-1 / top-3 may not drop below the figures the README publishes (its "Field accuracy" table,
written by `python benchmarks/accuracy.py --markdown`). Time per case is measured by the runner,
never asserted here.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import accuracy  # noqa: E402

CORPUS = os.environ.get("HANGDOCTOR_CORPUS", accuracy.DEFAULT_CORPUS)
# the rows of the README's table: | NAME | cases | top-1 | top-3 | ... (NAME: all, a+b, c+d, ...)
ROW = re.compile(r"^\| (?P<name>[\w.+-]+) \| (?P<cases>\d+) \| (?P<top1>\d+)/\d+ \([^)]*\) \| (?P<top3>\d+)/\d+ "
                 r"\([^)]*\) \|(?: (?P<no_cause>\d+) \|)?")
# the leave-one-source-out row: | leave-one-source-out | cases | top-1 | top-3 |
LOSO = "leave-one-source-out"


def published() -> dict[str, dict[str, int]]:
    """Every row of the README's 'Field accuracy' tables, by name (the first one wins)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Field accuracy", 1)
    assert len(section) == 2, "README has no 'Field accuracy' section"
    rows: dict[str, dict[str, int]] = {}
    for line in section[1].split("\n## ", 1)[0].splitlines():
        m = ROW.match(line)
        if m and m.group("name") not in rows:
            rows[m.group("name")] = {k: int(m.group(k)) for k in ("cases", "top1", "top3")}
            if m.group("no_cause") is not None:
                rows[m.group("name")]["no_cause"] = int(m.group("no_cause"))
    assert "all" in rows, "no 'all' row in the README's 'Field accuracy' section"
    return rows


def _corpus_or_fail() -> None:
    if os.path.isdir(CORPUS) and accuracy.cases_of(CORPUS):
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"no corpus at {CORPUS}: CI runs with ../shared beside the checkout, so the "
                    "accuracy guard may not go quiet")
    pytest.skip(f"no corpus at {CORPUS}")


@pytest.fixture(scope="module")
def scored():
    _corpus_or_fail()
    return accuracy.run(CORPUS)


@pytest.fixture(scope="module")
def scored_loso():
    _corpus_or_fail()
    return accuracy.run(CORPUS, loso=True)


def test_no_case_crashes_and_every_case_is_answered(scored) -> None:
    summary, results = scored
    assert summary["crashes"] == 0, [(r["case"], r["error"]) for r in results if r["error"]]
    assert all(r["verdict"] for r in results)


def _guard(name: str, have: dict[str, int], pub: dict[str, dict[str, int]], misses: list) -> None:
    want = pub.get(name)
    if want is None:
        return  # a batch not published yet: its first-sight figure is taken before it is read
    assert have["cases"] >= want["cases"], f"{name}: {have['cases']} cases, the README publishes {want['cases']}"
    if have["cases"] != want["cases"]:
        return  # the corpus grew inside a batch: re-measure and publish (the batch rows still guard)
    assert have["top1"] >= want["top1"], (name, "top-1", have["top1"], want["top1"], misses)
    assert have["top3"] >= want["top3"], (name, "top-3", have["top3"], want["top3"], misses)
    if "no_cause" in want and "no_cause" in have:
        assert have["no_cause"] <= want["no_cause"], (name, "cases with no cause", have["no_cause"], want["no_cause"])


def test_score_does_not_fall_below_the_published_figures(scored) -> None:
    """Per batch and for the whole corpus: a figure below the README's fails."""
    summary, results = scored
    pub = published()
    misses = [(r["case"], r["truth"], [c[0] for c in r["ranked"][:3]]) for r in results if not r["top1"]]
    _guard("all", summary, pub, misses)
    for name, b in summary["batches"].items():
        _guard(name, b, pub, [m for m in misses if accuracy.batch_of(m[0]) == name])


def test_cases_left_without_a_cause_do_not_grow(scored) -> None:
    """The goal is none; the guard is the README's figure (per batch and in all), which may
    only fall."""
    summary, results = scored
    pub = published()
    left = [r["case"] for r in results if not r["ranked"] and not r["error"]]
    if "no_cause" in pub["all"] and pub["all"]["cases"] == summary["cases"]:
        assert summary["no_cause"] <= pub["all"]["no_cause"], left


def test_leave_one_source_out_does_not_fall_below_the_published_figure(scored_loso) -> None:
    summary, results = scored_loso
    pub = published()
    misses = [(r["case"], r["truth"], [c[0] for c in r["ranked"][:3]]) for r in results if not r["top3"]]
    _guard(LOSO, summary, pub, misses)


def test_other_cases_score_only_by_their_alternative(tmp_path) -> None:
    """An 'other: NAME' case never matches NAME, even when a cause id is spelt like it."""
    assert not accuracy._matches("cuda-interposer-deadlock", "other: cuda-interposer-deadlock")
    assert accuracy._matches("lock-contention", "lock-contention")
    assert accuracy.batch_of("/x/c07-foo") == "c+d" and accuracy.batch_of("b01") == "a+b"


def test_analysis_never_reads_the_answer(tmp_path) -> None:
    """The runner hands the analysis only the evidence files: a case whose truth.txt and
    source.md name a cause the evidence does not support must not score."""
    case = tmp_path / "c1"
    case.mkdir()
    (case / "log.txt").write_text("INFO 10:00:00 server started\n")
    (case / "truth.txt").write_text("gpu-fault\n")
    (case / "source.md").write_text("NVRM: Xid 79 GPU has fallen off the bus; nvidia-smi hangs\n")
    assert accuracy.evidence_files(str(case)) == [str(case / "log.txt")]
    r = accuracy.score_case(str(case))
    assert not r["top1"] and not r["error"]


def test_markdown_table_round_trips_through_the_parser(scored) -> None:
    summary, results = scored
    md = accuracy.markdown(summary, results, "all")
    m = ROW.match(md.splitlines()[2])
    assert m and int(m.group("top1")) == summary["top1"] and int(m.group("top3")) == summary["top3"]
