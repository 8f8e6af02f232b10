"""The live verdict on small targets of known truth (tests/live_targets.py), through the real
CLI: `hangdoctor diagnose localhost --pid N --json`. Each case asserts the verdict and the
first cause; healthy, idle and slow targets must never be called hung.

LIVE_RUNS=N diagnoses each target N times (the "never hung in 10 runs" measure);
LIVE_TABLE=FILE appends one JSON line per diagnosis (truth, verdict, first cause) for the
before / after tables of docs/live-verdict.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import live_targets as lt
import pytest
import schema_check
from conftest import (
    CLI_TIMEOUT_S,
    SCENARIO_READY_TIMEOUT_S,
    SLOW_SCENARIO_READY_TIMEOUT_S,
    need,
    run_hangdoctor,
    torch_available,
)
from docker_tools import docker_engine_fixture, in_container_fixture  # noqa: F401 (fixtures)

from hangdoctor.scenarios.launch import start_scenario

pytestmark = pytest.mark.slow

RUNS = max(1, int(os.environ.get("LIVE_RUNS", "1") or 1))
NOT_HUNG = {"healthy", "progressing"}


def _unrelated_hung_task() -> list[str]:
    # another program's hung task, reported by the kernel a minute ago: not one of ours
    stamp = time.strftime("[%a %b %d %H:%M:%S %Y]", time.localtime(time.time() - 60))
    return [f"{stamp} INFO: task python3:{pid} blocked for more than 120 seconds." for pid in (4194000, 4194001)] + [
        f"{stamp} \"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message."
    ]


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """``targets(key, name, *args)``: a target started once per module and shared."""
    started: dict[str, Any] = {}
    scenarios: list[Any] = []

    def get(key: str, name: str, *args: str) -> Any:
        if key not in started:
            if name in ("postload", "gloo_desync"):
                if name == "gloo_desync":
                    need(torch_available(), "torch")
                run = start_scenario(name, str(tmp_path_factory.mktemp(key)), log=True,
                                     max_lifetime_s=lt.MAX_LIFETIME_S,
                                     **({"workers": 2} if name == "postload" else {}))
                scenarios.append(run)
                started[key] = run.wait_ready(SLOW_SCENARIO_READY_TIMEOUT_S.get(name, SCENARIO_READY_TIMEOUT_S))
            else:
                if name == "gloo_busy":
                    need(torch_available(), "torch")
                started[key] = lt.start(name, tmp_path_factory.mktemp(key), *args)
        return started[key]

    yield get
    for t in started.values():
        if isinstance(t, lt.Target):
            t.stop()
    for run in scenarios:
        run.stop()


def _diagnose(pid: int, tmp: Path, *, env: dict[str, str] | None = None, log: str | None = None) -> dict[str, Any]:
    out = tmp / f"r{time.monotonic_ns()}.html"
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(pid), "--json", "-o", str(out),
                          *(["--log", log] if log else []), env=env)
    assert proc.stdout.strip(), proc.stderr
    a = json.loads(proc.stdout)
    assert "Traceback" not in proc.stderr, proc.stderr
    schema_check.record("diagnose", a)
    a["_stderr"] = proc.stderr
    return a


def _first(a: dict[str, Any]) -> str | None:
    return a["causes"][0]["id"] if a["causes"] else None


def _record(case: str, truth: str, a: dict[str, Any]) -> None:
    path = os.environ.get("LIVE_TABLE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"case": case, "truth": truth, "verdict": a["verdict"], "first": _first(a),
                                "score": a["causes"][0]["score"] if a["causes"] else None,
                                "reason": a.get("verdict_reason")}) + "\n")


def _expect(case: str, truth: str, pid: int, tmp: Path, verdicts: set[str], first: str | None, *,
            env: dict[str, str] | None = None, log: str | None = None,
            also: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Diagnose RUNS times; every run must give one of ``verdicts`` and ``first`` as first cause."""
    bad = []
    a: dict[str, Any] = {}
    for _ in range(RUNS):
        a = _diagnose(pid, tmp, env=env, log=log)
        _record(case, truth, a)
        if a["verdict"] not in verdicts or _first(a) != first:
            bad.append((a["verdict"], _first(a), a.get("verdict_reason"),
                        [(c["id"], round(c["score"], 2)) for c in a["causes"][:3]]))
        elif also is not None:
            also(a)
    assert not bad, f"{case}: expected {sorted(verdicts)} / {first}, got {bad}"
    return a


# ------------------------------------------------------------------ healthy, idle, slow: never hung


@pytest.mark.torch
def test_healthy_busy_gloo_job_is_not_hung(targets, tmp_path) -> None:
    t = targets("gloo", "gloo_busy")
    _expect("gloo-busy", "healthy (busy 2-rank gloo)", t.pid, tmp_path, NOT_HUNG, None)


@pytest.mark.torch
def test_healthy_gloo_job_with_unrelated_hung_task_lines(targets, tmp_path) -> None:
    t = targets("gloo", "gloo_busy")
    env = lt.fake_dmesg(tmp_path / "bin", _unrelated_hung_task())
    _expect("gloo-busy+kernel", "healthy (busy gloo, other pid's hung task)", t.pid, tmp_path,
            NOT_HUNG, None, env=env)


def test_idle_job_consumer_is_idle_not_hung(targets, tmp_path) -> None:
    t = targets("idle", "idle_consumer")

    def idle_said(a: dict[str, Any]) -> None:
        assert "idle" in a["verdict_reason"], a["verdict_reason"]
    _expect("idle-consumer", "idle (dispatcher + 2 workers in Queue.get)", t.pid, tmp_path,
            {"healthy"}, None, also=idle_said)


def test_idle_consumer_with_unrelated_hung_task_lines(targets, tmp_path) -> None:
    t = targets("idle", "idle_consumer")
    env = lt.fake_dmesg(tmp_path / "bin", _unrelated_hung_task())

    def context_only(a: dict[str, Any]) -> None:
        assert not any(c["id"] == "io-stall" for c in a["causes"]), a["causes"]
    _expect("idle-consumer+kernel", "idle (other pid's hung task)", t.pid, tmp_path, {"healthy"}, None,
            env=env, also=context_only)


def test_periodic_worker_is_not_hung(targets, tmp_path) -> None:
    t = targets("periodic", "periodic_logger")
    _expect("periodic-logger", "healthy (logs every 3 s)", t.pid, tmp_path, NOT_HUNG, None)


def test_pagecache_loader_is_progressing(targets, tmp_path) -> None:
    t = targets("loader", "pagecache_loader")
    _expect("pagecache-loader", "progressing (rchar +10 MB/s, read_bytes 0)", t.pid, tmp_path,
            {"progressing"}, None)


def test_busy_compute_is_progressing(targets, tmp_path) -> None:
    t = targets("compute", "busy_compute")
    _expect("busy-compute", "progressing (pure-Python compute)", t.pid, tmp_path, {"progressing"}, None)


def test_file_writer_is_progressing(targets, tmp_path) -> None:
    t = targets("writer", "file_writer")
    _expect("file-writer", "progressing (wchar +10 MB/s)", t.pid, tmp_path, {"progressing"}, None)


def test_idle_pool_is_idle_and_helpers_are_no_ranks(targets, tmp_path) -> None:
    t = targets("pool", "idle_pool")

    def no_helper_ranks(a: dict[str, Any]) -> None:
        names = {(r.get("name") or "") + " " + (r.get("role") or "") for r in a.get("ranks") or []}
        assert not any("resource_tracker" in n for n in names), names
    _expect("idle-pool", "idle (multiprocessing pool, main in accept)", t.pid, tmp_path, {"healthy"},
            None, also=no_helper_ranks)


def test_pingpong_ranks_are_not_hung(targets, tmp_path) -> None:
    t = targets("pingpong", "pingpong")
    _expect("pingpong", "healthy (2 ranks exchanging over a pipe)", t.pid, tmp_path, NOT_HUNG, None)


# ------------------------------------------------------------------ a plain HTTP server


def test_plain_http_server_idle_is_healthy(targets, tmp_path) -> None:
    t = targets("http-idle", "http_server")
    _expect("http-idle", "healthy (plain HTTP, /health 200, nothing pending)", t.pid, tmp_path,
            {"healthy"}, None)


def test_plain_http_server_with_an_answered_keepalive_connection(targets, tmp_path) -> None:
    t = targets("http-idle", "http_server")
    s = lt.keepalive_answered(t.info["port"])
    try:
        _expect("http-keepalive", "healthy (keep-alive connection, its request answered)", t.pid,
                tmp_path, {"healthy"}, None)
    finally:
        s.close()


def test_plain_http_server_serving_is_healthy(targets, tmp_path) -> None:
    t = targets("http-busy", "http_server")
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", t.info["port"]), timeout=5) as s:
                    s.sendall(b"GET /work HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    while s.recv(1000):
                        pass
            except OSError:
                time.sleep(0.1)

    th = threading.Thread(target=client, daemon=True)
    th.start()
    try:
        _expect("http-serving", "healthy (plain HTTP serving requests)", t.pid, tmp_path, NOT_HUNG, None)
    finally:
        stop.set()
        th.join(10)


def test_plain_http_server_with_a_stuck_request_behind_health_200(targets, tmp_path) -> None:
    t = targets("http-stuck", "http_server")
    s = lt.send_stuck_request(t.info["port"])
    time.sleep(0.5)

    def nothing_left_behind(a: dict[str, Any]) -> None:
        # after the run, the server has one request handler left: the stuck POST's. Ours
        # (/health, /metrics) were closed on our side, none waits in the server for more.
        time.sleep(0.5)
        dump = subprocess.run([shutil.which("py-spy") or "py-spy", "dump", "--json", "--pid", str(t.pid)],
                              capture_output=True, text=True, timeout=60)
        threads = json.loads(dump.stdout)
        handlers = [[f["name"] for f in th["frames"]] for th in threads
                    if any("handle_one_request" in f["name"] for f in th["frames"])]
        assert len(handlers) == 1 and any("do_POST" in n for n in handlers[0]), handlers
        assert "sent" in a["intrusion"] or "GET" in a["intrusion"], a.get("intrusion")
    try:
        _expect("http-stuck", "hung (a POST waits on a backend event, /health 200)", t.pid, tmp_path,
                {"hung"}, "request-deadlock", also=nothing_left_behind)
    finally:
        s.close()


# ------------------------------------------------------------------ true hangs


def test_livelock_thread_spinning_on_a_flag(targets, tmp_path) -> None:
    t = targets("livelock", "livelock")

    def names_frame(a: dict[str, Any]) -> None:
        assert "spin (" in json.dumps(a["causes"][0]["evidence"]), a["causes"][0]
    _expect("livelock", "hung (thread spinning on a flag)", t.pid, tmp_path, {"hung"}, "cpu-livelock",
            also=names_frame)


def test_abba_threads(targets, tmp_path) -> None:
    t = targets("abba", "abba_threads")
    _expect("abba-threads", "hung (ABBA lock order)", t.pid, tmp_path, {"hung"}, "lock-contention")


def test_flock_waiter_with_unrelated_hung_task_lines(targets, tmp_path) -> None:
    lockfile = str(tmp_path / "shared.lock")
    holder = targets("flock-holder", "flock_holder", lockfile)
    assert holder.pid
    t = targets("flock-waiter", "flock_waiter", lockfile)
    time.sleep(0.3)
    env = lt.fake_dmesg(tmp_path / "bin", _unrelated_hung_task())
    _expect("flock-waiter+kernel", "hung (flock held by another program)", t.pid, tmp_path, {"hung"},
            "lock-contention", env=env)


def test_post_load_deadlock(targets, tmp_path) -> None:
    info = targets("postload", "postload")
    _expect("post-load-deadlock", "hung (workers and launcher wait on each other)", info.launcher_pid,
            tmp_path, {"hung"}, "post-load-deadlock", log=info.log)


def test_post_load_deadlock_with_unrelated_hung_task_lines(targets, tmp_path) -> None:
    info = targets("postload", "postload")
    env = lt.fake_dmesg(tmp_path / "bin", _unrelated_hung_task())
    _expect("post-load-deadlock+kernel", "hung (post-load deadlock, other pid's hung task)",
            info.launcher_pid, tmp_path, {"hung"}, "post-load-deadlock", env=env, log=info.log)


@pytest.mark.torch
def test_gloo_desync(targets, tmp_path) -> None:
    info = targets("desync", "gloo_desync")
    _expect("gloo-desync", "hung (all_reduce vs barrier)", info.launcher_pid, tmp_path, {"hung"},
            "nccl-desync", log=info.log)


def test_rank_that_raised_and_exited(targets, tmp_path) -> None:
    t = targets("rank-died", "rank_died")

    def resource_tracker_no_rank(a: dict[str, Any]) -> None:
        alive = [c for c in a["checks"] if c["id"] == "process.alive"][0]["summary"]
        assert "resource_tracker" not in alive or "helper" in alive, alive
    _expect("rank-died", "hung (rank 1 raised and exited, rank 0 waits)", t.pid, tmp_path, {"hung"},
            "rank-died", also=resource_tracker_no_rank)


def test_stopped_rank_is_named(targets, tmp_path) -> None:
    t = targets("pingpong-stopped", "pingpong")
    stopped = t.info["workers"][1]
    os.kill(stopped, signal.SIGSTOP)
    try:
        def named(a: dict[str, Any]) -> None:
            assert f"pid {stopped}" in a["verdict_reason"] and "cannot run" in a["verdict_reason"]
        # the stopped one is named in the verdict; no cause of this list says "stopped"
        _expect("stopped-rank", "hung (rank 1 stopped, rank 0 waits in recv)", t.pid, tmp_path, {"hung"},
                None, also=named)
    finally:
        os.kill(stopped, signal.SIGCONT)


# ------------------------------------------------------------------ a container (needs Docker)


def test_container_small_shm_without_shm_users_is_no_cause(in_container, docker_engine, tmp_path) -> None:
    """Docker's default 64 MiB /dev/shm holding only multiprocessing's semaphores: a risk factor
    with no user behind it; the post-load deadlock every stack shows leads, by --pid and by
    docker:NAME (no engine in it: the container's main process tree)."""
    ctr = in_container("postload", workers=2)  # no --shm-size: 64 MiB
    for target in (["localhost", "--pid", str(ctr.host_pid)], [f"docker:{ctr.name}"]):
        for _ in range(RUNS):
            proc = subprocess.run([sys.executable, "-m", "hangdoctor", "diagnose", *target, "--json"],
                                  capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=docker_engine.env)
            assert proc.stdout.strip(), proc.stderr
            a = json.loads(proc.stdout)
            _record("container-64m-shm", "hung (post-load deadlock in a container, 64 MiB /dev/shm)", a)
            assert a["verdict"] == "hung", (target, a["verdict_reason"])
            assert _first(a) == "post-load-deadlock", (target, [(c["id"], c["score"]) for c in a["causes"]])
            shm = next(c for c in a["checks"] if c["id"] == "container.shm")
            assert shm["verdict"] == "cleared" and "64 MiB" in shm["summary"], shm


def test_container_without_a_known_engine_is_its_main_process_tree(docker_engine, tmp_path) -> None:
    """docker:NAME of a container whose server is no known engine: its main process (pid 1)
    and its tree are diagnosed, not "nothing found"."""
    work = tmp_path / "ctr"
    work.mkdir()
    work.chmod(0o777)
    script = work / "http_server.py"
    script.write_text(lt._PRE + lt.SCRIPTS["http_server"])
    name = docker_engine.run(["/usr/bin/python3", str(script), str(work / "ready"), "600",
                              str(work / "server.log")], workdir=str(work))
    deadline = time.monotonic() + 60
    while not (work / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (work / "ready").exists(), docker_engine.docker("logs", name, check=False).stderr
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "diagnose", f"docker:{name}", "--json"],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=docker_engine.env)
    assert proc.stdout.strip(), proc.stderr
    a = json.loads(proc.stdout)
    _record("container-plain-http", "healthy (plain HTTP server as a container's pid 1)", a)
    assert "no inference-server processes found" not in proc.stderr, proc.stderr
    assert a["verdict"] == "healthy" and _first(a) is None, (a["verdict_reason"], a["causes"][:2])
    assert a["hosts"][0]["root_pids"] == [1], a["hosts"]
