"""Checks as plugins: --checks-dir and the hangdoctor.checks entry-point group, one mechanism."""

from __future__ import annotations

import json
import os
from pathlib import Path

from snapbuild import FIXTURES

ONE_OFF = '''
from hangdoctor.checkapi import check, fired, support

@check("site.too-many-workers", "Our site runs at most 2 workers", needs=["processes"], causes=["rank-died"])
def too_many(ev):
    """Site rule. Confirm by hand: ps -ef"""
    n = len(ev.workers)
    return fired(f"{n} workers", support("rank-died", 0.01, f"{n} workers seen"))
'''


def test_checks_dir_loads_a_one_off_check(tmp_path: Path, hangdoctor_cli) -> None:
    d = tmp_path / "mychecks"
    d.mkdir()
    (d / "site.py").write_text(ONE_OFF)
    proc = hangdoctor_cli("checks", "--checks-dir", str(d))
    assert "site.too-many-workers" in proc.stdout
    proc = hangdoctor_cli("analyze", str(FIXTURES / "cpu-postload.json"), "--json", "--checks-dir", str(d))
    a = json.loads(proc.stdout)
    row = {c["id"]: c for c in a["checks"]}["site.too-many-workers"]
    assert row["verdict"] == "fired" and row["summary"] == "4 workers"


def test_broken_checks_dir_module_is_a_clear_error(tmp_path: Path, hangdoctor_cli) -> None:
    d = tmp_path / "bad"
    d.mkdir()
    (d / "broken.py").write_text("import no_such_module_xyz\n")
    proc = hangdoctor_cli("checks", "--checks-dir", str(d))
    assert proc.returncode == 2
    assert "broken.py failed to import" in proc.stderr and "Traceback" not in proc.stderr


def test_entry_point_group_registers_third_party_checks(tmp_path: Path, hangdoctor_cli) -> None:
    site = tmp_path / "site"
    (site / "acme_checks").mkdir(parents=True)
    (site / "acme_checks" / "__init__.py").write_text(ONE_OFF.replace("site.too-many-workers", "acme.workers"))
    dist = site / "acme_checks-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-checks\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[hangdoctor.checks]\nacme = acme_checks\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    proc = hangdoctor_cli("checks", "--json", env=env)
    ids = [c["id"] for c in json.loads(proc.stdout)]
    assert "acme.workers" in ids and "stacks.collectives" in ids
    # built-in checks come first; a third-party check cannot replace one
    assert ids.index("stacks.collectives") < ids.index("acme.workers")


# --------------------------------------------------------------- knowledge packs, same mechanism

PACK_RULES = {"rules": [{
    "id": "acme.quota-on-model-cache",
    "cause": "io-stall",
    "weight": 0.8,
    "summary": "the model cache's project quota ran out: the loader's writes block or fail",
    "when": {"line": r"Disk quota exceeded"},
    "next": "df -h $HF_HOME; quota -s",
}]}
PACK_PASTE = ("INFO 11-30 10:01:02 model_runner.py:1012] Loading model weights...\n"
              "OSError: [Errno 122] Disk quota exceeded: '/cache/hub/models--x/blobs/abc.incomplete'\n")


def _pack(folder: Path, rules: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rules.json").write_text(json.dumps(rules))
    return folder


def _first_cause(proc) -> tuple[str | None, list[str]]:
    a = json.loads(proc.stdout)
    top = a["causes"][0] if a["causes"] else None
    refs = [r for c in a["causes"] for e in c.get("evidence_for", []) for r in e.get("refs", [])]
    return (top["id"] if top else None), refs


def test_checks_dir_knowledge_pack_adds_a_rule(tmp_path: Path, hangdoctor_cli) -> None:
    paste = tmp_path / "server.log"
    paste.write_text(PACK_PASTE)
    before = json.loads(hangdoctor_cli("analyze", str(paste), "--json").stdout)
    assert not any("acme.quota-on-model-cache" in json.dumps(c) for c in before["causes"])
    d = _pack(tmp_path / "site-knowledge", PACK_RULES)
    listed = hangdoctor_cli("checks", "--checks-dir", str(d)).stdout
    assert f"knowledge: {d} (--checks-dir): 1 rules" in listed and "knowledge: builtin: " in listed
    proc = hangdoctor_cli("analyze", str(paste), "--json", "--checks-dir", str(d))
    a = json.loads(proc.stdout)
    assert a["causes"][0]["id"] == "io-stall", [(c["id"], c["score"]) for c in a["causes"]]
    assert "acme.quota-on-model-cache" in json.dumps(a["causes"][0]), a["causes"][0]


def test_broken_knowledge_pack_is_a_clear_error(tmp_path: Path, hangdoctor_cli) -> None:
    bad = {"rules": [dict(PACK_RULES["rules"][0], when={"line": "Disk quota ((exceeded"})]}
    d = _pack(tmp_path / "bad-knowledge", bad)
    paste = tmp_path / "server.log"
    paste.write_text(PACK_PASTE)
    proc = hangdoctor_cli("analyze", str(paste), "--json", "--checks-dir", str(d))
    assert proc.returncode == 2, proc.stderr
    assert "acme.quota-on-model-cache" in proc.stderr and "bad regex" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2
    (d / "rules.json").write_text("{not json")
    proc = hangdoctor_cli("analyze", str(paste), "--json", "--checks-dir", str(d))
    assert proc.returncode == 2 and "not readable as JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_knowledge_pack_cannot_replace_a_builtin_rule(tmp_path: Path, hangdoctor_cli) -> None:
    from hangdoctor.knowledge import matcher

    builtin = matcher.rules()[0]
    clash = {"rules": [dict(PACK_RULES["rules"][0], id=builtin["id"])]}
    d = _pack(tmp_path / "clash", clash)
    paste = tmp_path / "server.log"
    paste.write_text(PACK_PASTE)
    proc = hangdoctor_cli("analyze", str(paste), "--json", "--checks-dir", str(d))
    assert proc.returncode != 2, proc.stderr
    assert f"id {builtin['id']} defined twice" in proc.stderr
    a = json.loads(proc.stdout)
    assert not any(c["id"] == "io-stall" and c["score"] >= 0.5 for c in a["causes"]), a["causes"]


def test_entry_point_package_brings_its_knowledge_pack(tmp_path: Path, hangdoctor_cli) -> None:
    site = tmp_path / "site"
    pkg = _pack(site / "acme_knowledge", PACK_RULES)
    (pkg / "__init__.py").write_text('"""Acme\'s field knowledge (rules.json beside this file)."""\n')
    dist = site / "acme_knowledge-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-knowledge\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[hangdoctor.checks]\nacme-knowledge = acme_knowledge\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    paste = tmp_path / "server.log"
    paste.write_text(PACK_PASTE)
    a = json.loads(hangdoctor_cli("analyze", str(paste), "--json", env=env).stdout)
    assert a["causes"][0]["id"] == "io-stall" and "acme.quota-on-model-cache" in json.dumps(a["causes"][0])
