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
