"""The published JSON Schemas (hangdoctor/schemas/) against what the commands print with --json:
diagnose and snapshot on a real process, analyze over every recorded snapshot, checks, probe.
The validator (tests/schema_check.py) refuses keywords it does not check, and each schema
rejects a document broken on purpose, so a pass means something.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import schema_check
from test_probe import Plain

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = sorted((ROOT / "tests" / "fixtures" / "snapshots").glob("*.json"))
KINDS = ("probe", "diagnose", "checks", "snapshot-summary")


def hd(*args: str, timeout_s: float = 120.0) -> tuple[int, Any, str]:
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", *args], capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plain]:
    server = Plain(tmp_path_factory.mktemp("plain"))
    try:
        yield server
    finally:
        server.stop()


def test_schemas_are_json_in_the_checked_subset_and_shipped() -> None:
    names = {p.name for p in schema_check.SCHEMAS.glob("*.schema.json")}
    assert names == {f"{k}.schema.json" for k in KINDS}
    for kind in KINDS:
        schema = schema_check.load(kind)
        assert schema["$id"].endswith(f"/{kind}.schema.json")
        schema_check.errors({} if schema["type"] == "object" else [], schema)  # raises on unknown keywords
    assert '"hangdoctor" = ["schemas/*.json"]' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.stem)
def test_analyze_json_of_every_recorded_snapshot(path: Path) -> None:
    _rc, doc, _ = hd("analyze", str(path), "--json", "-q")
    schema_check.record("diagnose", doc)


def test_diagnose_json_on_a_real_process_carries_its_exit_code(plain: Plain) -> None:
    rc, doc, err = hd("diagnose", "localhost", "--pid", str(plain.proc.pid), "--port", str(plain.port),
                      "--window", "0.5", "--json", "-q")
    schema_check.record("diagnose", doc)
    assert doc["exit_code"] == rc, err
    assert doc["verdict"] == "healthy" and rc == 0, doc["verdict_reason"]


def test_snapshot_json_on_a_real_process(plain: Plain, tmp_path: Path) -> None:
    rc, doc, err = hd("snapshot", "localhost", "--pid", str(plain.proc.pid), "--window", "0.5",
                      "-o", str(tmp_path / "b.tar.gz"), "--json")
    schema_check.record("snapshot-summary", doc)
    assert doc["exit_code"] == rc and Path(doc["bundle"]).exists(), err


def test_checks_json() -> None:
    _rc, doc, _ = hd("checks", "--json")
    schema_check.record("checks", doc)
    assert len(doc) >= 20


def test_probe_json(plain: Plain, tmp_path: Path) -> None:
    _rc, doc, _ = hd("probe", str(plain.port), "--json", "--pid", str(plain.proc.pid),
                     "--state", str(tmp_path / "s.json"))
    schema_check.record("probe", doc)


def test_each_schema_rejects_a_broken_document(plain: Plain, tmp_path: Path) -> None:
    _rc, probe_doc, _ = hd("probe", str(plain.port), "--json", "--no-state")
    _rc, diag, _ = hd("analyze", str(SNAPSHOTS[0]), "--json", "-q")
    _rc, checks, _ = hd("checks", "--json")
    summary = {"verdict": "hung", "top_cause": None, "score": None, "bundle": "b.tar.gz", "exit_code": 3,
               "duration_s": 1.0}
    schema_check.record("snapshot-summary", summary)
    breaks = [
        ("probe", probe_doc, lambda d: d.update(exit_code=5)),
        ("probe", probe_doc, lambda d: d.pop("state")),
        ("probe", probe_doc, lambda d: d.update(surprise=1)),
        ("probe", probe_doc, lambda d: d["health"].update(code="200")),
        ("diagnose", diag, lambda d: d.update(verdict="stuck")),
        ("diagnose", diag, lambda d: d.update(analysis_version=2)),
        ("diagnose", diag, lambda d: d["causes"].append({"id": "x", "title": "t", "score": 1.5,
                                                          "confidence": "high", "summary": "", "evidence": []})),
        ("checks", checks, lambda d: d[0].pop("id")),
        ("snapshot-summary", summary, lambda d: d.update(exit_code=2)),
    ]
    for kind, doc, spoil in breaks:
        bad = copy.deepcopy(doc)
        spoil(bad)
        assert schema_check.errors(bad, schema_check.load(kind)), (kind, spoil)
