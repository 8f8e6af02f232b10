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
# the first row of the README's table: | corpus | cases | top-1 | top-3 | ...
ROW = re.compile(r"^\| (?P<name>[\w.-]+) \| (?P<cases>\d+) \| (?P<top1>\d+)/\d+ \([^)]*\) \| (?P<top3>\d+)/\d+ ")


def published() -> dict[str, int]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Field accuracy", 1)
    assert len(section) == 2, "README has no 'Field accuracy' section"
    for line in section[1].splitlines():
        m = ROW.match(line)
        if m:
            return {k: int(m.group(k)) for k in ("cases", "top1", "top3")} | {"name": m.group("name")}  # type: ignore[operator]
    raise AssertionError("no accuracy row in the README's 'Field accuracy' section")


@pytest.fixture(scope="module")
def scored():
    if not os.path.isdir(CORPUS) or not accuracy.cases_of(CORPUS):
        pytest.skip(f"no corpus at {CORPUS}")
    return accuracy.run(CORPUS)


def test_no_case_crashes_and_every_case_is_answered(scored) -> None:
    summary, results = scored
    assert summary["crashes"] == 0, [(r["case"], r["error"]) for r in results if r["error"]]
    assert all(r["verdict"] for r in results)


def test_score_does_not_fall_below_the_published_figures(scored) -> None:
    summary, results = scored
    pub = published()
    if pub["name"] != os.path.basename(os.path.normpath(CORPUS)) or pub["cases"] != summary["cases"]:
        pytest.skip("the README publishes figures for another corpus")
    misses = [(r["case"], r["truth"], [c[0] for c in r["ranked"][:3]]) for r in results if not r["top1"]]
    assert summary["top1"] >= pub["top1"], misses
    assert summary["top3"] >= pub["top3"], misses


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
    md = accuracy.markdown(summary, results, "corpus")
    m = ROW.match(md.splitlines()[2])
    assert m and int(m.group("top1")) == summary["top1"] and int(m.group("top3")) == summary["top3"]
