"""Issue 4: snapshots recorded by `hangdoctor diagnose localhost` on two H200 GPUs (tests/gpu/
scenarios.py + run_all.sh), replayed through the current checks and triage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangdoctor.triage.analyze import analyze

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"

CASES = [
    # scenario, verdict, top cause (None: no cause may reach a low score)
    ("peer-never-joins", "hung", "nccl-desync"),
    ("rank-exits", "hung", "rank-died"),
    ("pipe-deadlock", "hung", "post-load-deadlock"),
    ("init-never-joins", "hung", "rendezvous-stall"),
    ("kernel-spin", "hung", "gpu-kernel-spin"),
    ("healthy-busy", "healthy", None),
    ("peer-never-joins-discovered", "hung", "nccl-desync"),  # found without --pid
    # --window 0: one sample of each process, no window (0.8 / 0.9 s on the H200 host)
    ("pipe-deadlock-window0", "hung", "post-load-deadlock"),
    ("peer-never-joins-window0", "hung", "nccl-desync"),
    # the probe run as SSH runs it: python3 -S, site-packages (pynvml) added in a thread
    ("pipe-deadlock-ssh-style", "hung", "post-load-deadlock"),
]


@pytest.mark.parametrize("name,verdict,top", CASES, ids=[c[0] for c in CASES])
def test_recorded_gpu_snapshot(name: str, verdict: str, top: str | None) -> None:
    snap = json.loads((FIXTURES / f"gpu-{name}.json").read_text())
    assert snap["gpus"]["backend"] == "pynvml" and len(snap["gpus"]["devices"]) == 2
    a = analyze([snap])
    assert a["verdict"] == verdict, a["verdict_reason"]
    if top is None:
        assert all(c["score"] < 0.3 for c in a["causes"]), a["causes"]
    else:
        assert a["causes"][0]["id"] == top, [(c["id"], c["score"]) for c in a["causes"]]


def test_one_sample_says_hung_is_inferred_and_the_ssh_style_probe_read_nvml() -> None:
    for name in ("pipe-deadlock-window0", "peer-never-joins-window0", "pipe-deadlock-ssh-style"):
        snap = json.loads((FIXTURES / f"gpu-{name}.json").read_text())
        assert snap["window_s"] == 0
        assert {len(s["samples"]) for s in snap["stacks"].values()} == {1}
        a = analyze([snap])
        assert "one live sample (--window 0)" in a["verdict_reason"], a["verdict_reason"]
    manifest = {m["source"]: m for m in snap["manifest"]}
    assert manifest["nvml"]["status"] == "ok" and "pynvml" in manifest["nvml"]["detail"]
    assert manifest["processes"]["detail"].endswith("backend proc (psutil present)")


def test_without_pyspy_the_gpu_and_threads_still_point_at_the_collective() -> None:
    """Recorded on the H200s without py-spy on the host (no stacks) and without --pid (found by
    its ranks' environment): the spinning rank's CPU is not taken for progress, and its NCCL
    process group tips the waiting GPU towards a collective."""
    snap = json.loads((FIXTURES / "gpu-peer-never-joins-no-pyspy.json").read_text())
    assert not snap["stacks"] and snap["targets"]["discovery"][0]["kind"] == "torch.distributed"
    assert {m["source"]: m["status"] for m in snap["manifest"]}["stacks"] == "unavailable"
    a = analyze([snap])
    assert a["verdict"] == "hung", a["verdict_reason"]
    assert a["causes"][0]["id"] == "nccl-desync"
    assert any("no Python stacks" in w for w in a["weakened"])


def test_gpu_readings_match_the_field_notes() -> None:
    """Utilisation read against power: a waiting kernel is 100 % at idle power."""
    def readings(name: str) -> dict[int, str]:
        a = analyze([json.loads((FIXTURES / f"gpu-{name}.json").read_text())])
        return {g["index"]: g["reading"] for g in a["gpus"]}

    assert readings("peer-never-joins") == {0: "waiting", 1: "idle"}
    assert readings("kernel-spin") == {0: "waiting", 1: "idle"}
    assert readings("healthy-busy") == {0: "busy", 1: "busy"}
    assert readings("pipe-deadlock") == {0: "idle", 1: "idle"}


def test_dead_rank_named_by_its_freed_gpu() -> None:
    a = analyze([json.loads((FIXTURES / "gpu-rank-exits.json").read_text())])
    top = a["causes"][0]
    assert top["id"] == "rank-died"
    assert any("GPU 1" in e["text"] and "freed" in e["text"] for e in top["evidence"])


def test_desync_and_spin_are_both_ranked_and_told_apart() -> None:
    for name, first, second in (("peer-never-joins", "nccl-desync", "gpu-kernel-spin"),
                                ("kernel-spin", "gpu-kernel-spin", "nccl-desync")):
        a = analyze([json.loads((FIXTURES / f"gpu-{name}.json").read_text())])
        ids = [c["id"] for c in a["causes"]]
        assert ids[0] == first and second in ids[:3], ids


def test_no_http_was_sent_to_worker_or_store_ports() -> None:
    """The probe never touches NCCL listeners or the c10d store (measured: a GET to an NCCL
    listener leaves NCCL's service threads spinning in the target)."""
    for name, _, _ in CASES:
        snap = json.loads((FIXTURES / f"gpu-{name}.json").read_text())
        worker_ports = {s["port"] for p in snap["processes"] if p.get("role") == "worker" for s in p.get("listen", [])}
        probed = {h["port"] for h in snap.get("http", [])}
        assert not probed & worker_ports, name
