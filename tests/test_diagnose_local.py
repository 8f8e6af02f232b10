"""Issue 2: `hangdoctor diagnose localhost --pid N` on real hung processes, through the real CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _diagnose(hangdoctor_cli, info, tmp_path: Path, *extra: str):
    out = tmp_path / "report.html"
    t0 = time.monotonic()
    proc = hangdoctor_cli("diagnose", "localhost", "--pid", str(info.launcher_pid),
                          *(["--log", info.log] if info.log else []),
                          "--window", "2", "--json", "-o", str(out), *extra)
    wall_s = time.monotonic() - t0
    assert proc.stdout.strip(), proc.stderr
    analysis = json.loads(proc.stdout)  # stdout is JSON and nothing else
    return proc, analysis, out, wall_s


def _top(analysis):
    return analysis["causes"][0]["id"] if analysis["causes"] else None


def test_post_load_deadlock(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("postload", workers=4)
    proc, a, out, _ = _diagnose(hangdoctor_cli, info, tmp_path)
    assert proc.returncode == 3, proc.stderr  # hung
    assert a["verdict"] == "hung"
    assert _top(a) == "post-load-deadlock"
    top = a["causes"][0]
    assert top["score"] >= 0.6 and top["evidence"] and top["next_steps"]
    for c in a["causes"]:
        assert {"id", "score", "evidence"} <= set(c)
    # per-process stacks, and every worker parked in the pipe
    workers = [r for r in a["ranks"] if r["pid"] in info.worker_pids]
    assert len(workers) == 4
    assert {r["rank"] for r in workers} == {0, 1, 2, 3}
    assert all(r["wait_kind"] == "ipc-wait" for r in workers)
    for pid in info.worker_pids:
        frames = a["stacks"][str(pid)]["threads"][0]["frames"]
        assert any("multiprocessing/connection.py" in f["file"] for f in frames)
    # the report and the snapshot next to it
    html = out.read_text()
    assert "post-load-deadlock" in html and "<html" in html.lower()
    snap = json.loads(out.with_name("report.snapshot.json").read_text())
    assert snap["schema_version"] == 1 and snap["origin"] == "live"
    sources = {m["source"]: m["status"] for m in snap["manifest"]}
    assert sources["processes"] == "ok" and sources["stacks"] == "ok" and sources["log"] == "ok"
    assert "nvml" in sources  # no GPU here: recorded, not crashed


@pytest.mark.torch
def test_collective_desync_gloo(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("gloo_desync")
    proc, a, _, _ = _diagnose(hangdoctor_cli, info, tmp_path)
    assert a["verdict"] == "hung", proc.stderr
    assert _top(a) == "nccl-desync"
    kinds = {r["rank"]: r["wait_kind"] for r in a["ranks"] if r["rank"] is not None}
    assert kinds[0] == "collective:all_reduce" and kinds[1] == "collective:barrier"
    assert a["causes"][0]["odd_ones_out"], "the odd rank must be named"


def test_dead_rank(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("postload", workers=4, die_rank=2)
    proc, a, _, _ = _diagnose(hangdoctor_cli, info, tmp_path)
    assert a["verdict"] == "hung", proc.stderr
    assert _top(a) == "rank-died"
    odd = a["causes"][0]["odd_ones_out"]
    assert any(o.get("rank") == 2 for o in odd), odd


def test_healthy_idle_server(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("healthy", workers=2)
    proc, a, _, _ = _diagnose(hangdoctor_cli, info, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert a["verdict"] == "healthy"
    assert all(c["score"] < 0.3 for c in a["causes"]), a["causes"]
    assert any("answered 200" in c["summary"] for c in a["checks"] if c["id"] == "port.health")


def test_progressing_compile(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("compile", workers=2)
    time.sleep(0.5)
    proc, a, _, _ = _diagnose(hangdoctor_cli, info, tmp_path)
    assert proc.returncode == 5, proc.stderr  # progressing
    assert a["verdict"] == "progressing"
    assert _top(a) == "compile-in-progress"


def test_window_0_takes_one_sample_and_still_names_the_deadlock(run_scenario, hangdoctor_cli, tmp_path):
    """`--window 0`: the evidence of one `ps` + one `py-spy dump` per process (what a person
    gathers by hand), no waiting; 'hung' is then inferred from the stacks and the log, and the
    report says it was not measured."""
    info = run_scenario("postload", workers=4)
    proc, a, out, _ = _diagnose(hangdoctor_cli, info, tmp_path, "--window", "0")
    assert proc.returncode == 3, proc.stderr
    assert a["verdict"] == "hung" and _top(a) == "post-load-deadlock"
    assert "one live sample (--window 0)" in a["verdict_reason"]
    assert "inferred, not measured" in a["verdict_reason"]
    snap = json.loads(out.with_name("report.snapshot.json").read_text())
    assert snap["window_s"] == 0
    assert {len(s["samples"]) for s in snap["stacks"].values()} == {1}  # no second round
    for p in snap["processes"]:  # nothing was compared over time, so no deltas are claimed
        assert "cpu_delta_s" not in p and "cpu_pct" not in p and "cpu_time_s" in p
    checks = {c["id"]: c for c in a["checks"]}
    assert checks["activity.window"]["verdict"] == "skipped"
    assert "timing" in checks["activity.window"]["missing"]


def test_window_0_on_a_healthy_server_is_healthy(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("healthy", workers=2)
    proc, a, _, _ = _diagnose(hangdoctor_cli, info, tmp_path, "--window", "0")
    assert proc.returncode == 0 and a["verdict"] == "healthy", (proc.stderr, a["verdict_reason"])
    assert all(c["score"] < 0.3 for c in a["causes"]), a["causes"]


def test_a_window_below_0_2_s_other_than_0_is_refused(hangdoctor_cli):
    proc = hangdoctor_cli("diagnose", "localhost", "--window", "0.1")
    assert proc.returncode == 2
    assert "give 0 (one sample) or at least 0.2 seconds" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_pid_discovers_servers(run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("postload", workers=2)
    proc = hangdoctor_cli("diagnose", "localhost", "--window", "1", "--json")
    a = json.loads(proc.stdout)
    found = [d["pid"] for h in a["hosts"] for d in h.get("discovered") or []]
    assert info.launcher_pid in found, proc.stderr
    assert "found" in proc.stderr


def test_reaped_pid_is_no_such_process_not_a_traceback(hangdoctor_cli, tmp_path):
    """A pid with no process is a usage error (issue 17: a typo must not read as DEAD to a
    restart script): one line, exit 2, no JSON. A zombie root is still DEAD (test_checks)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    proc = hangdoctor_cli("diagnose", "localhost", "--pid", str(p.pid), "--window", "0.5", "--json")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"no process {p.pid} on localhost" in proc.stderr


def test_demo_diagnoses_its_built_in_server_and_stops_it(hangdoctor_cli, tmp_path):
    out = tmp_path / "demo.html"
    proc = hangdoctor_cli("demo", "-o", str(out), "--json", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    a = json.loads(proc.stdout)
    assert a["verdict"] == "hung" and a["causes"][0]["id"] == "post-load-deadlock"
    assert "post-load-deadlock" in out.read_text()
    import os

    for r in a["ranks"]:  # everything it started is gone
        assert not os.path.exists(f"/proc/{r['pid']}") or open(f"/proc/{r['pid']}/stat").read().split(") ")[1][0] == "Z"


JOB = """
import os, subprocess, sys, time
if len(sys.argv) > 1:
    time.sleep(60)
else:
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999")
    ps = [subprocess.Popen([sys.executable, __file__, "rank"], env=dict(env, RANK=str(r))) for r in range(2)]
    for p in ps:
        p.wait()
"""


def test_discovery_finds_a_plain_torch_distributed_job(hangdoctor_cli, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "my_training_job.py"
    script.write_text(JOB)
    job = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    try:
        time.sleep(1.0)
        proc = hangdoctor_cli("diagnose", "localhost", "--window", "0.5", "--json")
        a = json.loads(proc.stdout)
        found = {d["pid"]: d["kind"] for h in a["hosts"] for d in h.get("discovered") or []}
        assert found.get(job.pid) == "torch.distributed", (found, proc.stderr)
    finally:
        import os
        import signal

        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_nothing_found_is_inconclusive_not_dead():
    from hangdoctor.triage.analyze import analyze

    a = analyze([{"schema_version": 1, "origin": "live", "window_s": 2.0, "host": {"name": "gpu-node"},
                  "targets": {"root_pids": [], "discovered": True}, "processes": [], "manifest": []}])
    assert a["verdict"] == "inconclusive" and "no " in a["verdict_reason"]
    # with GPUs seen (a GPU host with nothing running): still inconclusive, never "dead"
    a = analyze([{"schema_version": 1, "origin": "live", "window_s": 2.0, "host": {"name": "gpu-node"},
                  "processes": [], "manifest": [],
                  "gpus": {"devices": [{"index": 0, "samples": [{"util_pct": 0, "power_w": 80, "mem_used_mib": 0}]}]}}])
    assert a["verdict"] == "inconclusive" and "no server process" in a["verdict_reason"]
