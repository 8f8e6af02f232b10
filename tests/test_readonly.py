"""Issue 8: a diagnosis is read-only towards its targets.

Before and after a real diagnosis we record, for every target process and each of its threads,
what an outsider could change (tests/faults/helpers.py ``process_state``): the state letter, the
thread ids, the children, every open fd and its target, the pending / shared-pending / blocked /
ignored / caught signal masks, and the tracer. The targets block every blockable signal, so a
signal sent by anyone (even SIGCONT or signal 0's cousins) would stay visible in SigPnd/ShdPnd.
Nothing may differ. py-spy is killed mid-dump on purpose, many times: the target must never be
left stopped or traced.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import (
    FAULTS_DIR,
    Helper,
    fake_python,
    manifest,
    no_traceback,
    process_state,
    run_cli,
    start_helper,
    stop_helper,
    stopped_or_traced,
)

DEADLINE_S = "15"
KILL_ROUNDS = 40


@pytest.fixture
def target() -> Iterator[Helper]:
    """A waiter with 3 parked threads and 2 children, all blocking every blockable signal."""
    helper = start_helper(
        "waiter.py", "--threads", "3", "--children", "2", "--block-signals", "--lifetime", "90"
    )
    yield helper
    stop_helper(helper)


@pytest.fixture
def real_pyspy() -> str:
    from tests.conftest import find_pyspy

    path = find_pyspy()
    if path is None:
        pytest.fail("py-spy not found (pip install py-spy)")
    return os.path.realpath(path)


def _states(pids: list[int]) -> dict[int, dict[str, Any]]:
    return {pid: process_state(pid) for pid in pids}


def _settled_states(pids: list[int], timeout_s: float = 5.0) -> dict[int, dict[str, Any]]:
    """States once every thread of every pid is asleep (S): a start-up still running shows R."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = _states(pids)
        asleep = all(t["state"] == "S" for s in states.values() for t in s["threads"].values())
        if asleep or time.monotonic() > deadline:
            assert asleep, states
            return states
        time.sleep(0.05)


def _assert_unchanged(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> None:
    for pid, b in before.items():
        a = after[pid]
        for key in b:
            assert a[key] == b[key], f"pid {pid}: {key} changed: {b[key]!r} -> {a[key]!r}"
        assert a["TracerPid"] == "0"
        assert all(t["TracerPid"] == "0" for t in a["threads"].values())


def _diagnose(
    pid: int,
    tmp_path: Path,
    *extra: str,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    import json

    snap = tmp_path / f"snap-{time.monotonic_ns()}.json"
    proc, _wall = run_cli(
        "diagnose",
        "localhost",
        "--pid",
        str(pid),
        "--window",
        "1",
        "--deadline",
        DEADLINE_S,
        "--json",
        "--save-snapshot",
        str(snap),
        *extra,
        python=python,
        env=env,
    )
    no_traceback(proc)
    assert proc.returncode not in (1, 2), proc.stderr
    return json.loads(snap.read_text())


@pytest.mark.parametrize("extra", [(), ("--locals", "--native")], ids=["default", "locals-native"])
def test_diagnosis_changes_nothing_in_the_targets(
    target: Helper, tmp_path: Path, extra: tuple[str, ...]
) -> None:
    pids = [target.pid, *target.children]
    before = _settled_states(pids)
    snap = _diagnose(target.pid, tmp_path, *extra)
    assert manifest(snap)["stacks"]["status"] == "ok", manifest(snap)["stacks"]
    time.sleep(0.2)  # a stray signal or a late stop would show by now
    _assert_unchanged(before, _states(pids))


def test_diagnosing_a_scenario_server_changes_nothing(run_scenario, tmp_path: Path) -> None:
    """The same on the post-load scenario (launcher + 2 workers parked in a pipe)."""
    info = run_scenario("postload", workers=2)
    pids = [info.launcher_pid, *info.worker_pids]
    before = _settled_states(pids)
    _diagnose(info.launcher_pid, tmp_path, "--log", info.log or "/nonexistent")
    time.sleep(0.2)
    _assert_unchanged(before, _states(pids))


def _dump_duration_s(pyspy: str, pid: int) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [pyspy, "dump", "--pid", str(pid)],
        capture_output=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    return time.monotonic() - t0


def test_pyspy_killed_mid_dump_never_leaves_the_target_stopped_or_traced(
    target: Helper, real_pyspy: str
) -> None:
    """SIGKILL the real py-spy at random points of its dump (including while it holds the
    target suspended) and look at the target right after each kill."""
    pids = [target.pid, *target.children]
    before = _settled_states(pids)
    full_s = max(0.02, _dump_duration_s(real_pyspy, target.pid))
    rng = random.Random(8)
    delays_s = [0.005] * 8 + [rng.uniform(0.0, full_s * 1.2) for _ in range(KILL_ROUNDS - 8)]
    killed_mid_dump = 0
    for delay_s in delays_s:
        args = ["dump", "--pid", str(target.pid)]
        if rng.random() < 0.3:
            args.append("--native")
        spy = subprocess.Popen(
            [real_pyspy, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        time.sleep(delay_s)
        spy.send_signal(signal.SIGKILL)  # our own py-spy
        spy.wait(timeout=10)
        if spy.returncode == -signal.SIGKILL:
            killed_mid_dump += 1
        bad = stopped_or_traced(target.pid)
        time.sleep(0.01)
        bad += stopped_or_traced(target.pid)
        assert not bad, f"after killing py-spy at {delay_s * 1000:.1f} ms: {bad}"
    assert killed_mid_dump >= KILL_ROUNDS // 2, "py-spy finished before most kills: no test"
    time.sleep(0.2)
    _assert_unchanged(before, _states(pids))


def test_pyspy_killed_mid_dump_under_hangdoctor(
    target: Helper, tmp_path: Path, real_pyspy: str
) -> None:
    """The same through the probe: its py-spy is a wrapper that kills the real one in 1-60 ms."""
    killer = FAULTS_DIR / "pyspy_killer.py"
    python = fake_python(tmp_path, f'#!/bin/sh\nexec "{sys.executable}" "{killer}" "$@"\n')
    log = tmp_path / "kills.log"
    env = dict(
        os.environ, HD_REAL_PYSPY=real_pyspy, HD_KILL_AFTER_MS="1-60", HD_KILLER_LOG=str(log)
    )
    pids = [target.pid, *target.children]
    before = _settled_states(pids)
    for _ in range(3):
        snap = _diagnose(target.pid, tmp_path, python=python, env=env)
        assert manifest(snap)["stacks"]["status"] != "ok"  # every dump was killed
        assert not stopped_or_traced(target.pid)
        for child in target.children:
            assert not stopped_or_traced(child)
    assert len(log.read_text().splitlines()) >= 3 * 2 * len(pids) - 2, log.read_text()
    time.sleep(0.2)
    _assert_unchanged(before, _states(pids))


def test_process_state_sees_a_pending_signal(target: Helper) -> None:
    """The yardstick itself: a signal sent to a target does show in its recorded state."""
    before = process_state(target.pid)
    os.kill(target.pid, signal.SIGUSR1)  # our own helper, which blocks it
    after = process_state(target.pid)
    assert after["ShdPnd"] != before["ShdPnd"]
