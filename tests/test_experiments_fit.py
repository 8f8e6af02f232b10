"""An experiment is proposed only when the evidence touches what it toggles: world size 1 only
for a job with more than one rank (and a GPU, or an engine whose flag says it), the local-disk
and warm-restart toggles only where storage (a file system, a file lock, loading) or a compile
is in the evidence, and neither for a FIFO nobody writes. Each case on the recorded snapshots of
real runs, with the control where the experiment fits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_hangdoctor

from hangdoctor.evidence.model import Evidence
from hangdoctor.triage.analyze import _experiment_facts, analyze

SNAPS = Path(__file__).parent / "fixtures" / "snapshots"


def experiment(name: str) -> str | None:
    a = analyze([json.loads((SNAPS / f"{name}.json").read_text())])
    return (a.get("next_experiment") or {}).get("id")


@pytest.mark.parametrize(("snapshot", "not_proposed"), [
    ("cpu-gloo-desync", "tp1"),  # two ranks of gloo on the CPU: no GPU, no engine flag
    ("gpu-nccl-spin-fr", "tp1"),  # one rank on one GPU already
    ("gpu-nccl-spin-fr-timing", "tp1"),
    ("vllm-engine-died", "tp1"),  # one worker (TP=1)
    ("vllm-weights-never-arrive", "warm-restart"),  # the weights are a FIFO nobody writes
    ("vllm-weights-never-arrive", "local-disk"),
])  # fmt: skip
def test_an_experiment_that_does_not_fit_is_not_proposed(snapshot: str, not_proposed: str) -> None:
    assert experiment(snapshot) != not_proposed


@pytest.mark.parametrize(("snapshot", "proposed"), [
    ("gpu-peer-never-joins", "tp1"),  # two ranks on two GPUs
    ("vllm-tp2-rank-stopped", "tp1"),  # TP=2: the engine's flag
    ("vllm-starting", "warm-restart"),  # compiling at start-up: its caches (no storage rule fires)
    ("cpu-compile", "warm-restart"),  # a compile: its caches
])  # fmt: skip
def test_an_experiment_that_fits_is_proposed(snapshot: str, proposed: str) -> None:
    assert experiment(snapshot) == proposed


ABBA = """
import threading, time
A, B = threading.Lock(), threading.Lock()
def one():
    with A:
        time.sleep(0.2)
        with B:
            pass
def two():
    with B:
        time.sleep(0.2)
        with A:
            pass
for f in (one, two):
    threading.Thread(target=f, daemon=True).start()
time.sleep(0.5)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_deadlock_between_threads_gets_no_storage_experiment(tmp_path: Path) -> None:
    """A real ABBA deadlock of two threading locks: nothing about storage in it (it was offered
    'copy the weights to local disk')."""
    script = tmp_path / "abba.py"
    script.write_text(ABBA)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        proc = run_hangdoctor(
            "diagnose", "localhost", "--pid", str(p.pid), "--window", "0.5", "--json", "-q"
        )
        a = json.loads(proc.stdout)
    finally:
        p.kill()
        p.wait()
    assert "lock-contention" in [c["id"] for c in a["causes"]], a["causes"]
    assert (a.get("next_experiment") or {}).get("id") not in ("local-disk", "warm-restart"), a[
        "next_experiment"
    ]


def test_a_file_lock_is_storage_a_thread_lock_is_not() -> None:
    """What the storage experiments read: a waiter in /proc/locks touches storage."""

    def facts(file_lock: bool) -> dict:
        snap = {
            "schema_version": 1, "origin": "live", "window_s": 2.0, "host": {"name": "localhost"},
            "manifest": [], "targets": {"root_pids": [100]},
            "processes": [{"pid": 100, "name": "python3", "alive": True, "status": "S", "status_end": "S",
                           "cmdline": ["python3", "app.py"], "cpu_delta_s": 0.0}],
        }  # fmt: skip
        if file_lock:
            snap["file_locks"] = {"locks": [
                {"id": 1, "kind": "FLOCK", "access": "WRITE", "inode": 7, "pid": 100, "waiting": True,
                 "path": "/mnt/nfs/cache/.lock"},
                {"id": 1, "kind": "FLOCK", "access": "WRITE", "inode": 7, "pid": 555, "waiting": False,
                 "name": "other", "alive": True},
            ]}  # fmt: skip
        a = analyze([snap])
        return _experiment_facts(Evidence([snap]), a["causes"])

    assert facts(True)["exp_storage"] is True
    assert facts(False)["exp_storage"] is False
