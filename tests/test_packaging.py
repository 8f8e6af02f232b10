"""The wheel ships checks/ and templates/ inside the package, and no top-level `checks`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheels = list(out.glob("hangdoctor-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_ships_checks_templates_and_no_toplevel_checks(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert "checks" not in tops and "templates" not in tops, sorted(tops)
    assert "hangdoctor/checks/__init__.py" in names
    assert "hangdoctor/checks/stacks_collectives.py" in names
    assert "hangdoctor/templates/report.html" in names
    assert "hangdoctor/scenarios/postload.py" in names
    assert "hangdoctor/snapshot/SCHEMA.md" in names
    entry = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry[0]).decode()
    assert "[hangdoctor.checks]" in text and "builtin = hangdoctor.checks" in text
    assert "hangdoctor = hangdoctor.cli:run" in text


def test_every_package_dir_is_in_the_wheel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for init in (REPO / "hangdoctor").rglob("__init__.py"):
        rel = init.relative_to(REPO).as_posix()
        assert rel in names, f"{rel} is missing from the wheel: add it to [tool.setuptools] packages"


def test_console_script_and_module_entry() -> None:
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "hangdoctor" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "checks", "--json"], capture_output=True, text=True, timeout=60)
    import json

    ids = {c["id"] for c in json.loads(proc.stdout)}
    assert {"stacks.collectives", "gpu.util-power", "port.health", "process.alive", "nccl.env", "memory.host"} <= ids
