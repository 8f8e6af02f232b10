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

    from hangdoctor.collect.probe_pack import PROBE_MODULES

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


def test_probe_modules_parse_as_python_3_8() -> None:
    """The probe runs with the remote host's Python, 3.8 or newer."""
    import ast

    from hangdoctor.collect.probe_pack import PROBE_MODULES

    for name in PROBE_MODULES:
        src = (REPO / (name.replace(".", "/") + ".py")).read_text()
        ast.parse(src, feature_version=(3, 8))
        for newer in (".removeprefix(", ".removesuffix(", "functools.cache(", "zoneinfo", "match "):
            assert newer not in src or newer == "match " and "\nmatch " not in src, (name, newer)


def _pythons() -> list[str]:
    import glob
    import os

    found = [sys.executable]
    for v in ("3.8", "3.9"):
        cands = [shutil.which(f"python{v}")] + sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}")))
        for exe in cands:
            if not exe:
                continue
            probe = subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=30)
            if probe.returncode == 0:
                found.append(exe)
                break
    return found


@pytest.mark.parametrize("python", _pythons())
def test_probe_bundle_runs_in_a_bare_interpreter(tmp_path, python: str) -> None:
    """`python3 -` with the bundle on stdin, isolated from site-packages (-I -S): no psutil,
    no pynvml, no hangdoctor installed; it must still print one snapshot. Also with Python 3.8
    and 3.9 where this machine has them (the oldest the probe supports on remote hosts)."""
    import json

    from hangdoctor.collect.probe_pack import build_probe_script

    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        script = build_probe_script({"window_s": 0.3, "deadline_s": 10, "nvml": True,
                                     "kernel_log": False, "root_pids": [target.pid]})
        proc = subprocess.run([python, "-I", "-S", "-"], input=script, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
    finally:
        target.kill()
        target.wait()
    snap = json.loads(proc.stdout)
    assert snap["schema_version"] == 1, proc.stderr[-2000:]
    assert [p["pid"] for p in snap["processes"]] == [target.pid], snap.get("probe_error")
    assert snap["stacks"][str(target.pid)]["status"] == "ok"
    statuses = {m["source"]: m["status"] for m in snap["manifest"]}
    assert statuses["processes"] == "ok"
    assert statuses["nvml"] in ("unavailable", "ok", "failed")


LOADER = 'import sys; exec(compile(sys.stdin.buffer.read(), "<hangdoctor-probe>", "exec"))'


def _probe_code_origin(script: str) -> str:
    """Run the bundle's module loading only and say where probe.collect's code came from."""
    last = script.rstrip("\n").rsplit("\n", 1)
    assert last[1].startswith("_p.main_json("), last[1]
    script = last[0] + "\nprint(_p.collect.__code__.co_filename)\n"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", LOADER], input=script,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_probe_bundle_ships_compiled_code_for_the_same_python_and_source_for_others() -> None:
    """A remote Python of this version loads the shipped code; any other (another magic
    number, or no code shipped) compiles the source, and the probe is the same either way."""
    import base64

    from hangdoctor.collect.probe_pack import build_probe_script

    script = build_probe_script({"window_s": 0, "root_pids": []})
    assert _probe_code_origin(script).endswith("hangdoctor/collect/probe.py")  # marshalled
    other = base64.b64encode(b"\x00\x00\r\n").decode()
    tag = base64.b64encode(__import__("importlib.util").util.MAGIC_NUMBER).decode()
    assert script.count(repr(tag)) == 1
    assert _probe_code_origin(script.replace(repr(tag), repr(other))) == "<hangdoctor:hangdoctor.collect.probe>"
    no_code = build_probe_script({"window_s": 0, "root_pids": []}, with_code=False)
    assert len(no_code) < len(script) / 2
    assert _probe_code_origin(no_code) == "<hangdoctor:hangdoctor.collect.probe>"


def test_probe_bundle_reads_stdin_fast_and_prints_one_snapshot(tmp_path) -> None:
    """The way SSH runs it: `python3 -c LOADER` with the bundle on stdin."""
    import json

    from hangdoctor.collect.probe_pack import build_probe_script

    target = subprocess.Popen(["sleep", "60"])
    try:
        script = build_probe_script({"window_s": 0, "deadline_s": 10, "root_pids": [target.pid],
                                     "kernel_log": False, "nvml": False})
        proc = subprocess.run([sys.executable, "-c", LOADER], input=script, capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
    finally:
        target.kill()
        target.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    snap = json.loads(proc.stdout)
    assert snap["window_s"] == 0 and [p["pid"] for p in snap["processes"]] == [target.pid]


def test_probe_under_python_S_adds_site_packages_in_a_thread_when_asked(tmp_path) -> None:
    """SSH runs the probe as `python3 -S` with late_site: the window starts without waiting for
    site-packages; they arrive in a thread (seen here through psutil, installed here)."""
    import importlib.util
    import json

    from hangdoctor.collect.probe_pack import build_probe_script

    if importlib.util.find_spec("psutil") is None:
        pytest.skip("psutil is not installed here")
    details = {}
    for late in (True, False):
        target = subprocess.Popen(["sleep", "60"])
        try:
            script = build_probe_script({"window_s": 0, "deadline_s": 10, "root_pids": [target.pid],
                                         "kernel_log": False, "nvml": False, "late_site": late})
            proc = subprocess.run([sys.executable, "-S", "-c", LOADER], input=script,
                                  capture_output=True, text=True, timeout=60, cwd=tmp_path)
        finally:
            target.kill()
            target.wait()
        snap = json.loads(proc.stdout)
        details[late] = next(m["detail"] for m in snap["manifest"] if m["source"] == "processes")
    assert details[True].endswith("backend proc (psutil present)"), details
    assert details[False].endswith("backend proc"), details


def test_late_site_adds_a_venvs_folders_but_runs_none_of_its_code(tmp_path) -> None:
    """The probe's late site-packages (python3 -S, late_site) finds what `site` would find
    (a venv's site-packages, the folders named in .pth files) without running the server
    environment's code: no .pth `import` line, no sitecustomize."""
    import json

    from hangdoctor.collect.probe_pack import build_probe_script

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site_dir = next(venv.glob("lib/python3*/site-packages"))
    marker = tmp_path / "ran"
    extra = tmp_path / "extra"
    (extra / "psutil").mkdir(parents=True)  # found only through the .pth path line
    (extra / "psutil" / "__init__.py").write_text("")
    (site_dir / "env.pth").write_text(
        f"# a comment\nimport os; open({str(marker)!r}, 'a').write('pth ')\n{extra}\n"
    )
    (site_dir / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('custom ')\n")
    target = subprocess.Popen(["sleep", "60"])
    try:
        script = build_probe_script({"window_s": 0, "deadline_s": 10, "root_pids": [target.pid],
                                     "kernel_log": False, "nvml": False, "late_site": True})
        proc = subprocess.run([str(venv / "bin" / "python"), "-S", "-c", LOADER], input=script,
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        target.kill()
        target.wait()
    snap = json.loads(proc.stdout)
    detail = next(m["detail"] for m in snap["manifest"] if m["source"] == "processes")
    assert detail.endswith("backend proc (psutil present)"), (detail, proc.stderr[-2000:])
    assert not marker.exists(), marker.read_text()
    # the same venv started normally runs both: the test's files do what they claim
    subprocess.run([str(venv / "bin" / "python"), "-c", "import psutil"], check=True, timeout=60)
    ran = marker.read_text().split()
    assert "pth" in ran and "custom" in ran, ran
