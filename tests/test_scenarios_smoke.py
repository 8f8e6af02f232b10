"""The scenario fixtures reach the state they promise, checked with psutil and real py-spy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any, Callable

import psutil
import pytest

from hangdoctor.scenarios.launch import ScenarioError, scenario_argv, start_scenario

pytestmark = pytest.mark.slow

Dump = Callable[[int], "list[dict[str, Any]]"]


def main_thread(threads: list[dict[str, Any]], pid: int) -> dict[str, Any]:
    """The main thread of a py-spy JSON dump (its OS thread id equals the pid)."""
    for thread in threads:
        if thread.get("os_thread_id") == pid or thread.get("thread_name") == "MainThread":
            return thread
    raise AssertionError(f"no main thread in py-spy dump of {pid}: {threads}")


def innermost(thread: dict[str, Any]) -> dict[str, Any]:
    """py-spy lists frames innermost first."""
    assert thread["frames"], f"no frames in {thread}"
    return thread["frames"][0]


def cpu_seconds_over(pids: list[int], window_s: float) -> dict[int, float]:
    """CPU time (user + system) each pid used during ``window_s``."""
    procs = {pid: psutil.Process(pid) for pid in pids}
    before = {pid: sum(p.cpu_times()[:2]) for pid, p in procs.items()}
    time.sleep(window_s)
    return {pid: sum(p.cpu_times()[:2]) - before[pid] for pid, p in procs.items()}


def listening_ports(pids: list[int]) -> set[int]:
    """TCP ports in LISTEN state held by any of ``pids``."""
    ports: set[int] = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                ports.add(conn.laddr.port)
    return ports


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Wait until no pid is alive (zombies count as gone); return the ones still alive."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.1)
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_waits_on_pipe(dump: Dump, pid: int) -> None:
    frame = innermost(main_thread(dump(pid), pid))
    assert frame["short_filename"].endswith("multiprocessing/connection.py"), frame
    assert "recv" in frame["name"], frame


def test_postload_workers_deadlock_after_loading(run_scenario, pyspy_dump) -> None:
    info = run_scenario("postload", workers=4, api_key="sk-test-not-a-secret")
    assert len(info.worker_pids) == 4
    launcher = psutil.Process(info.launcher_pid)
    assert "--tensor-parallel-size 4" in " ".join(launcher.cmdline())
    assert info.port is None

    group = [info.launcher_pid, *info.worker_pids]
    for pid in group:
        assert_waits_on_pipe(pyspy_dump, pid)
    for rank, pid in enumerate(info.worker_pids):
        proc = psutil.Process(pid)
        assert proc.status() == psutil.STATUS_SLEEPING
        cmdline = proc.cmdline()
        assert cmdline[cmdline.index("--rank") + 1] == str(rank)
        env = proc.environ()
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "4"
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"].isdigit()
        # The "weights" (64 MiB) are resident, not just reserved.
        assert proc.memory_info().rss > 60 * 2**20
    assert all(cpu_s < 0.05 for cpu_s in cpu_seconds_over(group, 1.0).values())
    assert listening_ports(group) == set()

    log = open(info.log, encoding="utf-8").read()
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4" in log
    assert log.count("Loading weights took") == 4
    assert "ERROR" not in log


def test_postload_dead_rank_leaves_others_waiting(run_scenario, pyspy_dump) -> None:
    info = run_scenario("postload", workers=4, die_rank=2)
    dead = info.worker_pids[2]
    assert info.raw["dead_pids"] == [dead]
    try:
        assert psutil.Process(dead).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass  # reaped is as good as a zombie here
    for pid in (info.launcher_pid, *info.worker_pids[:2], info.worker_pids[3]):
        assert psutil.Process(pid).status() == psutil.STATUS_SLEEPING
        assert_waits_on_pipe(pyspy_dump, pid)
    log = open(info.log, encoding="utf-8").read()
    assert f"(VllmWorker rank=2 pid={dead}) ERROR" in log


def test_workers_die_with_their_launcher(run_scenario) -> None:
    info = run_scenario("postload", workers=2, weights_mib=4)
    os.kill(info.launcher_pid, signal.SIGKILL)
    assert wait_gone(info.worker_pids, timeout_s=5.0) == []


def test_every_process_ends_after_max_lifetime(run_scenario) -> None:
    started = time.monotonic()
    info = run_scenario("postload", workers=2, weights_mib=4, max_lifetime_s=3)
    assert wait_gone([info.launcher_pid, *info.worker_pids], timeout_s=10.0) == []
    assert time.monotonic() - started >= 2.5


def test_healthy_answers_http_while_workers_idle(run_scenario, pyspy_dump) -> None:
    info = run_scenario("healthy", workers=2, port=0)
    assert isinstance(info.port, int) and info.port > 0
    base = f"http://127.0.0.1:{info.port}"
    with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"{base}/v1/models", timeout=5) as resp:
        assert resp.status == 200
        assert json.load(resp)["data"][0]["object"] == "model"
    assert info.port in listening_ports([info.launcher_pid])
    for pid in info.worker_pids:
        assert_waits_on_pipe(pyspy_dump, pid)
    log = open(info.log, encoding="utf-8").read()
    assert f"Uvicorn running on http://127.0.0.1:{info.port}" in log
    assert "Application startup complete." in log
    assert '"GET /health HTTP/1.1" 200' in log


def test_compile_burns_cpu_and_log_grows(run_scenario, pyspy_dump) -> None:
    info = run_scenario("compile", workers=2)
    size_before = os.path.getsize(info.log)
    # The workers are niced: on a busy 2-core machine they get a small share, so give them up
    # to 5 s to show it; an idle (deadlocked) worker gains < 0.05 s in that time.
    procs = [psutil.Process(pid) for pid in info.worker_pids]
    before = [sum(p.cpu_times()[:2]) for p in procs]
    deadline = time.monotonic() + 5.0
    while True:
        used = [sum(p.cpu_times()[:2]) - b for p, b in zip(procs, before)]
        grew = os.path.getsize(info.log) > size_before  # a line every ~0.3 s of wall time
        if (min(used) >= 0.2 and grew) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert min(used) >= 0.2, used
    assert os.path.getsize(info.log) > size_before
    for pid in info.worker_pids:
        proc = psutil.Process(pid)
        assert proc.nice() >= 10
        assert "compile_worker" in " ".join(proc.cmdline())
        frame = innermost(main_thread(pyspy_dump(pid), pid))
        assert frame["short_filename"].endswith("hangdoctor/scenarios/compile.py"), frame
    log = open(info.log, encoding="utf-8").read()
    assert "Compiling FX graph" in log and "Triton autotuning for kernel" in log


@pytest.mark.torch
def test_gloo_ranks_block_in_mismatched_collectives(run_scenario, pyspy_dump) -> None:
    info = run_scenario("gloo_desync")
    rank0, rank1 = info.worker_pids
    for pid, op in ((rank0, "all_reduce"), (rank1, "barrier")):
        thread = main_thread(pyspy_dump(pid), pid)
        c10d = [f for f in thread["frames"] if f["short_filename"].endswith("distributed_c10d.py")]
        assert c10d, thread["frames"]
        assert c10d[0]["name"] == op, c10d
        assert psutil.Process(pid).status() == psutil.STATUS_SLEEPING
    # Still stuck a moment later: the desync holds, nothing returned.
    assert all(cpu_s < 0.2 for cpu_s in cpu_seconds_over([rank0, rank1], 1.0).values())
    assert "returned" not in open(info.log, encoding="utf-8").read()


def test_scenarios_import_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import hangdoctor.scenarios.gloo_desync, hangdoctor.scenarios.postload\n"
        "import hangdoctor.scenarios.healthy, hangdoctor.scenarios.compile\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_scenario_argv_looks_like_a_server() -> None:
    argv = scenario_argv("postload", "/tmp/r.json", log="/tmp/x.log", workers=4, die_rank=None)
    assert argv[1:3] == ["-m", "hangdoctor.scenarios.postload"]
    assert argv[3:5] == ["--tensor-parallel-size", "4"]
    assert "--die-rank" not in argv
    assert argv[5:] == [
        "--log",
        "/tmp/x.log",
        "--ready-file",
        "/tmp/r.json",
        "--max-lifetime",
        "900.0",
    ]
    with pytest.raises(ValueError):
        scenario_argv("nope", "/tmp/r.json")


def test_start_failure_reports_the_scenarios_stderr(tmp_path) -> None:
    running = start_scenario("healthy", str(tmp_path), no_such_option=1)
    try:
        with pytest.raises(ScenarioError, match="unrecognized arguments: --no-such-option"):
            running.wait_ready(timeout_s=30)
    finally:
        running.stop()
