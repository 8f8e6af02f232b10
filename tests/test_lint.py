"""House habits: ruff lint is part of the test run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_ruff_check_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    proc = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_probe_modules_import_only_the_stdlib_and_each_other() -> None:
    """The probe travels to remote hosts as source; only psutil/pynvml may be optional there."""
    import ast

    from hangdoctor.collect.bundle import PROBE_MODULES

    allowed_pkgs = set(PROBE_MODULES)
    for name in PROBE_MODULES:
        path = REPO / (name.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hangdoctor"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    assert full in allowed_pkgs or node.module in allowed_pkgs, f"{name} imports {full}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("hangdoctor"), f"{name} imports {alias.name}"
