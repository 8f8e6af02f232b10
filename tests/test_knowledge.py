"""The knowledge data (hangdoctor/knowledge): every rule and known issue fires on its own sample
and stays quiet on its near miss (Semgrep-style samples beside the data), the data validates,
and the knowledge check reaches the report: known issues linked, the next experiment proposed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hangdoctor.evidence.model import Evidence
from hangdoctor.knowledge import matcher, packs
from hangdoctor.parsers.assemble import analyze_inputs
from hangdoctor.triage.analyze import analyze

RULE_SAMPLES = packs.BUILTIN.samples("rules")
ISSUE_SAMPLES = packs.BUILTIN.samples("known_issues")


def _matched(text: str) -> tuple[set[str], set[str]]:
    ev = Evidence([analyze_inputs([("sample.txt", text)])])
    view = matcher.view_of_evidence(ev)
    return ({m.id for m in matcher.evaluate(matcher.rules(), view)},
            {m.id for m in matcher.evaluate(matcher.known_issues(), view)})


def test_data_validates() -> None:
    assert matcher.validate() == []


@pytest.mark.parametrize("entries,samples", [(matcher.rules, RULE_SAMPLES), (matcher.known_issues, ISSUE_SAMPLES)],
                         ids=["rules", "known-issues"])
def test_every_entry_has_a_firing_and_a_quiet_sample(entries, samples) -> None:
    ids = {e["id"] for e in entries()}
    fires = {i for k, i, _ in samples if k == "fires"}
    quiet = {i for k, i, _ in samples if k == "ok"}
    assert ids - fires == set(), f"no firing sample: {sorted(ids - fires)}"
    assert ids - quiet == set(), f"no sample where it must stay quiet: {sorted(ids - quiet)}"
    assert (fires | quiet) - ids == set(), f"samples of unknown ids: {sorted((fires | quiet) - ids)}"


@pytest.mark.parametrize("kind,rid,text", RULE_SAMPLES, ids=[f"{k}-{i}" for k, i, _ in RULE_SAMPLES])
def test_rule_sample(kind: str, rid: str, text: str) -> None:
    rules, _ = _matched(text)
    if kind == "fires":
        assert rid in rules, f"{rid} did not fire; matched: {sorted(rules)}"
    else:
        assert rid not in rules, f"{rid} fired on its near miss"


@pytest.mark.parametrize("kind,iid,text", ISSUE_SAMPLES, ids=[f"{k}-{i}" for k, i, _ in ISSUE_SAMPLES])
def test_known_issue_sample(kind: str, iid: str, text: str) -> None:
    _, issues = _matched(text)
    if kind == "fires":
        assert iid in issues, f"{iid} did not match; matched: {sorted(issues)}"
    else:
        assert iid not in issues, f"{iid} matched its near miss"


def test_symptom_alone_ranks_low_and_never_high() -> None:
    """A downstream line (the shm broadcast warning) points the search: ranked, capped, low."""
    text = ("(EngineCore_DP0 pid=9) INFO [shm_broadcast.py:466] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging.\n")
    a = analyze([analyze_inputs([("log.txt", text)])])
    assert a["causes"], "a symptom still ranks causes"
    assert all(c["score"] <= matcher.SYMPTOM_CAP + 1e-9 for c in a["causes"])
    assert a["causes"][0]["confidence"] == "low"


def test_symptom_does_not_beat_a_mechanism() -> None:
    text = ("No available shared memory broadcast block found in 60 seconds.\n"
            "RuntimeError: Gloo connectFullMesh failed with [pair.cc:144] timed out connecting\n")
    a = analyze([analyze_inputs([("log.txt", text)])])
    assert a["causes"][0]["id"] == "rendezvous-stall"


def test_known_issue_is_linked_in_the_analysis() -> None:
    text = ("NCCL version 2.20.5+cuda12.4\nThread 7 (active): \"MainThread\"\n    sched_yield (libc.so.6)\n"
            "    ncclLaunchKernelBefore_NoUncapturedCuda (enqueue.cc:968)\n    groupLaunch (group.cc:339)\n")
    a = analyze([analyze_inputs([("dump.txt", text)])])
    issues = a["known_issues"]
    assert [k["id"] for k in issues] == ["nccl-1251-fifo-leak-cuda-graphs"]
    assert issues[0]["text"].startswith("this matches NCCL #1251, fixed in NCCL 2.21; workaround:")
    assert a["causes"][0]["id"] == "driver-or-runtime-mismatch"


def test_next_experiment_splits_the_top_two() -> None:
    text = ("GPU 0: NVIDIA GeForce RTX 3090\nGPU 1: NVIDIA GeForce RTX 3090\n"
            "node:812:812 [1] NCCL INFO comm 0x1 rank 1 nranks 2 - Init COMPLETE\n"
            "[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000)\n")
    a = analyze([analyze_inputs([("log.txt", text)])])
    assert a["causes"][0]["id"] == "nccl-transport"
    exp = a["next_experiment"]
    assert exp["id"] == "nccl-p2p-disable", exp
    assert exp["if_fixed"] and exp["if_not"] and "nccl-transport" in exp["between"]


def test_next_experiment_is_not_one_already_tried() -> None:
    text = ("export NCCL_P2P_DISABLE=1\nGPU 0: NVIDIA GeForce RTX 3090\n"
            "[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000)\n")
    a = analyze([analyze_inputs([("log.txt", text)])])
    assert (a.get("next_experiment") or {}).get("id") != "nccl-p2p-disable"


def test_live_evidence_reaches_the_rules() -> None:
    """The live path: no pasted text, only a worker's environment and its log tail."""
    snap = {"schema_version": 1, "origin": "live", "window_s": 2.0, "host": {"name": "localhost"},
            "manifest": [], "targets": {"root_pids": [100]},
            "processes": [{"pid": 100, "name": "python3", "alive": True, "cmdline": ["python3", "serve.py"],
                           "env": {"LD_PRELOAD": "/opt/hami/libvgpu.so"}}],
            "log": {"tail": ["INFO pynccl.py:113] vLLM is using nccl==2.27.3"], "grew_bytes": 0}}
    a = analyze([snap])
    # an interposer in the environment is a setting: a risk factor, never a cause alone
    assert "cuda-interposer-deadlock" in [r["id"] for r in a["risks"]]
    assert "cuda-interposer-deadlock" not in [c["id"] for c in a["causes"]]


def _live(stack_frames=None, log=None, http_ok=None, grew=0):
    snap = {"schema_version": 1, "origin": "live", "window_s": 2.0, "host": {"name": "localhost"},
            "manifest": [], "targets": {"root_pids": [100]},
            "processes": [{"pid": 100, "name": "python3", "alive": True, "cmdline": ["python3", "-m", "vllm"]}]}
    if stack_frames:
        frames = [{"name": n, "filename": f, "short_filename": f, "line": 1, "native": False}
                  for n, f in stack_frames]
        th = [{"thread_id": 1, "os_thread_id": 100, "name": "MainThread", "active": False, "frames": frames}]
        snap["stacks"] = {"100": {"status": "ok", "samples": [{"t": 0.0, "threads": th}, {"t": 2.0, "threads": th}]}}
    if log is not None:
        snap["log"] = {"tail": log, "grew_bytes": grew, "age_s": 0.5 if grew else 300.0}
    if http_ok is not None:
        snap["http"] = [{"port": 8000, "ok": http_ok, "code": 200 if http_ok else None}]
    return Evidence([snap])


def _live_rules(ev) -> set[str]:
    return {m.id for m in matcher.evaluate(matcher.rules(), matcher.view_of_evidence(ev))}


IDLE_ENGINE = [("wait", "threading.py"), ("get", "queue.py"), ("_process_input_queue", "vllm/v1/engine/core.py"),
               ("run_busy_loop", "vllm/v1/engine/core.py")]


def test_idle_engine_behind_a_healthy_port_is_not_a_frontend_hang() -> None:
    assert "vllm.engine-idle-waiting-input" in _live_rules(_live(IDLE_ENGINE, http_ok=False))
    assert "vllm.engine-idle-waiting-input" not in _live_rules(_live(IDLE_ENGINE, http_ok=True))


def test_graph_capture_that_still_writes_its_log_is_not_stuck_there() -> None:
    log = ["INFO [model_runner.py:1200] Capturing cudagraphs for decoding."]
    assert "graph.capture-last" in _live_rules(_live(log=log, grew=0))
    assert "graph.capture-last" not in _live_rules(_live(log=log, grew=4096))


def test_a_line_counted_twice_is_one_line() -> None:
    """Live: the log tail is both 'text' and 'log'; a rule needing two lock attempts needs two lines."""
    one = ["DEBUG: Attempting to acquire lock 1 on /tmp/k/table.lock"]
    assert "python.file-lock-wait" not in _live_rules(_live(log=one))
    two = one + ["DEBUG: Attempting to acquire lock 2 on /tmp/k/table.lock"]
    assert "python.file-lock-wait" in _live_rules(_live(log=two))


def test_a_weak_finding_is_still_ranked() -> None:
    """One weak signal (a launcher waiting for a shard, a few times) still gives a ranking."""
    text = "2025-01-01T00:00:00Z  INFO shard-manager: Waiting for shard to be ready... rank=0\n"
    a = analyze([analyze_inputs([("launcher.log", text)])])
    assert a["causes"] and a["causes"][0]["confidence"] == "low"
    assert a["verdict"] == "inconclusive"  # ranked, yet one weak line does not make it 'hung'


def test_next_experiment_speaks_the_engines_flags() -> None:
    """tp1 in vLLM's flags for a vLLM server, in general terms for a plain torch.distributed job
    (which has no --tensor-parallel-size)."""
    import json

    snaps = Path(__file__).parent / "fixtures" / "snapshots"
    plain = analyze([json.loads((snaps / "gpu-peer-never-joins.json").read_text())])
    assert plain["next_experiment"]["id"] == "tp1", plain["next_experiment"]
    assert "--tensor-parallel-size" not in plain["next_experiment"]["toggle"]
    assert plain["next_experiment"]["toggle"].startswith("one GPU: world size 1")
    # a vLLM with two ranks (TP=2); vllm-engine-died has one, where world size 1 changes nothing
    vllm = analyze([json.loads((snaps / "vllm-tp2-rank-stopped.json").read_text())])
    assert vllm["next_experiment"]["id"] == "tp1", vllm["next_experiment"]
    assert vllm["next_experiment"]["toggle"].startswith("--tensor-parallel-size 1")


def test_a_healthy_server_gets_no_experiment() -> None:
    import json

    snaps = Path(__file__).parent / "fixtures" / "snapshots"
    a = analyze([json.loads((snaps / "vllm-healthy-idle.json").read_text())])
    assert a["verdict"] == "healthy" and a["next_experiment"] is None, a["next_experiment"]


def test_features_logged_as_off_are_not_facts() -> None:
    """vLLM logs every engine argument at start-up; 'speculative_config=None' is not speculative
    decoding (seen: 'drop --speculative-config' proposed for a TP=2 server without it)."""
    from hangdoctor.knowledge import facts

    off = facts.extract(["non-default args: {'tensor_parallel_size': 2}, speculative_config=None,",
                         "server_args=ServerArgs(enable_dp_attention=False, tp_size=2)"])
    assert "spec_decode" not in off and "dp_attention" not in off, off
    on = facts.extract(["speculative_config=SpeculativeConfig(method='eagle', num_spec_tokens=3)",
                        '  File "sglang/srt/layers/dp_attention.py", line 826, in dp_scatter'])
    assert on.get("spec_decode") and on.get("dp_attention"), on
