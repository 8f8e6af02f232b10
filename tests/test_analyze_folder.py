"""`analyze DIR` reads the evidence in a folder, not everything in it: version control,
environments, caches, source code, binaries and files over 32 MiB are left out, and one line
says what was. A checkout of this repository (with its .git and .venv) is read in a bounded
number of files. Named files are always read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_hangdoctor

SAMPLE = REPO_ROOT / "tests" / "samples" / "dmesg_xid79_oom.txt"
# a traceback of a CUDA illegal memory access: in a .py file it must not be read
LURE = "RuntimeError: CUDA error: an illegal memory access was encountered\n"


def cause_ids(doc: dict) -> list[str]:
    return [c["id"] for c in doc.get("causes") or []]


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    """A folder with one piece of evidence among what a checkout or a home directory holds."""
    root = tmp_path / "ticket"
    (root / "logs").mkdir(parents=True)
    shutil.copy(SAMPLE, root / "logs" / "dmesg.txt")
    for folder in (".git/objects/ab", "venv/lib/python3/site-packages/pkg", "node_modules/x",
                   "pkg/__pycache__", "build/thing.egg-info", "conda/conda-meta"):  # fmt: skip
        (root / folder).mkdir(parents=True)
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for lure in (".git/objects/ab/cdef", "venv/lib/python3/site-packages/pkg/mod.txt",
                 "node_modules/x/readme.txt", "build/thing.egg-info/PKG-INFO",
                 "conda/conda-meta/history", "pkg/tool.py"):  # fmt: skip
        (root / lure).write_text(LURE)
    (root / "pkg" / "__pycache__" / "tool.cpython-312.pyc").write_bytes(b"\x00\x01" * 100)
    (root / "a.out").write_bytes(Path(sys.executable).resolve().read_bytes()[:65536])
    with open(root / "huge.log", "wb") as f:  # sparse: 33 MiB on paper, nothing on disk
        f.truncate(33 << 20)
    return root


def test_a_folder_is_read_for_its_evidence_only(messy: Path) -> None:
    proc = run_hangdoctor("analyze", str(messy), "--json", "-q")
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert "gpu-fault" in cause_ids(doc)  # the dmesg was read
    text = json.dumps(doc)
    assert "illegal memory access" not in text  # no lure was
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    summary = next(
        x for x in lines if x.startswith(f"hangdoctor: {messy}: read 1 file(s); skipped")
    )
    for word in (".git", "venv", "node_modules", "__pycache__", "thing.egg-info", "conda",
                 "1 source or media file(s)", "1 binary file(s)", "1 over 32 MiB file(s)"):  # fmt: skip
        assert word in summary, (word, summary)
    assert "nothing recognised" not in proc.stderr  # nothing left out was tried and failed


def test_a_named_file_is_read_whatever_its_name(tmp_path: Path) -> None:
    """The walk's filters are for folders: a file named on the command line is evidence."""
    named = tmp_path / "trace.py"
    named.write_text(SAMPLE.read_text())
    proc = run_hangdoctor("analyze", str(named), "--json", "-q")
    assert "gpu-fault" in cause_ids(json.loads(proc.stdout)), proc.stderr


def test_a_folder_of_nothing_to_read_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "setup.py").write_text("print('hi')\n")
    proc = run_hangdoctor("analyze", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path} has no evidence files" in lines[0], proc.stderr


def test_an_earlier_analysis_beside_the_evidence_is_left_out_not_fatal(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / "dmesg.txt")
    shutil.copy(REPO_ROOT / "tests" / "samples_analysis" / "deadlock.json", tmp_path / "old.json")
    proc = run_hangdoctor("analyze", str(tmp_path), "--json", "-q")
    assert "gpu-fault" in cause_ids(json.loads(proc.stdout)), proc.stderr
    assert "left out 1 analysis file(s), not evidence" in proc.stderr


def test_a_checkout_of_this_repository(tmp_path: Path) -> None:
    """The whole checkout, as someone runs `analyze .` in it: .git, the virtual environments
    and caches are not walked, no source file is read, and what was skipped is said."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "analyze", ".", "--json", "-q"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    wall_s = time.monotonic() - t0
    assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr[-2000:]
    summary = next(x for x in proc.stderr.splitlines() if x.startswith("hangdoctor: .: read "))
    read = int(summary.split("read ", 1)[1].split(" ", 1)[0])
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=60).stdout.split()  # fmt: skip
    assert read < len(tracked), (read, len(tracked))  # only a part of the tree is evidence
    assert "source or media file(s)" in summary
    doc = json.loads(proc.stdout)
    sources = json.dumps(doc.get("hosts") or doc.get("collection") or "")
    assert "/.git/" not in sources and "site-packages" not in sources
    # its tests, samples, docs and package data are the project's own material: no cause
    assert doc["causes"] == [], [c["id"] for c in doc["causes"]]
    print(f"analyze . of the checkout: {wall_s:.2f} s, {summary}", file=sys.stderr)
    assert os.path.isdir(REPO_ROOT / "tests")


def test_a_ticket_folder_keeps_folders_a_checkout_would_skip(tmp_path: Path) -> None:
    """Only a project's root (pyproject.toml, setup.py, .git, ...) has its tests and samples
    left out; a folder of evidence with a samples/ subfolder is read whole."""
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "rank1.log").write_text(
        "[rank1]:[E ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=88210, OpType=ALLGATHER, NumelIn=8, NumelOut=64, Timeout(ms)=600000)\n")
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "analyze", str(tmp_path), "--json", "-q"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert json.loads(proc.stdout)["causes"], proc.stderr[-1000:]
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "analyze", str(tmp_path), "--json", "-q"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "samples" in proc.stderr
