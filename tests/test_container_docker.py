"""Issue 16, for real: hung scenarios inside real Docker containers, diagnosed through
``docker:NAME``, ``--via`` (docker exec, nsenter) and from the host by PID.

The engine is a real dockerd (tests/docker_tools.py starts one when none answers, and stops
it); the containers run the host's Python and this checkout in their own namespaces, with
Docker's default capabilities and no py-spy of their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CLI_TIMEOUT_S, need
from docker_tools import Engine, docker_engine_fixture, in_container_fixture  # noqa: F401

pytestmark = pytest.mark.slow

def run_cli(engine: Engine, *args: str, env: dict[str, str] | None = None,
            tmp: Path | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], dict[str, Any]]:
    """The real CLI; returns (process, analysis, snapshot)."""
    snap_path = (tmp or Path("/tmp")) / f"snap-{time.monotonic_ns()}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "diagnose", *args, "--json",
         "--save-snapshot", str(snap_path)],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env or engine.env)
    analysis = json.loads(proc.stdout) if proc.stdout.strip() else {}
    snapshot = json.loads(snap_path.read_text()) if snap_path.exists() else {}
    return proc, analysis, snapshot


def top(analysis: dict[str, Any]) -> str | None:
    return analysis["causes"][0]["id"] if analysis.get("causes") else None


def check_of(analysis: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in analysis["checks"] if c["id"] == cid)


def manifest(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["source"]: m for m in snapshot.get("manifest") or []}


# (scenario, options, exit code, verdict, top cause)
SCENARIOS = [
    ("postload", {"workers": 4}, 3, "hung", "post-load-deadlock"),
    ("gloo_desync", {}, 3, "hung", "nccl-desync"),
    ("healthy", {"workers": 2}, 0, "healthy", None),
    ("compile", {"workers": 2}, 5, "progressing", "compile-in-progress"),
]


@pytest.mark.parametrize("scenario,options,code,verdict,cause", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_scenario_inside_a_container_through_docker_target(
    in_container, docker_engine, tmp_path, scenario, options, code, verdict, cause
) -> None:
    ctr = in_container(scenario, **options)
    if scenario == "compile":
        time.sleep(0.5)
    proc, a, snap = run_cli(docker_engine, f"docker:{ctr.name}", "--window", "2", tmp=tmp_path)
    assert proc.returncode == code, proc.stderr
    assert a["verdict"] == verdict, (a.get("verdict_reason"), proc.stderr)
    if cause:
        assert top(a) == cause, [c["id"] for c in a["causes"]]
    # the probe ran in the container: its pids are the container's, and the server found
    # without --pid is one tree whose root is the container's init
    assert ctr.raw["launcher_pid"] == 1
    assert snap["targets"]["discovered"] and snap["targets"]["root_pids"] == [1], snap["targets"]
    assert {p["pid"] for p in snap["processes"]} >= set(ctr.raw["worker_pids"])
    c = snap["containers"][0]
    assert c["name"] == ctr.name and c["probe_inside"] and c["init_host_pid"] == ctr.host_pid
    assert c["image"] == "hangdoctor-test-base:1" and c["shm"]["total_bytes"] == 64 << 20
    # py-spy was sent (the container has none) into a memfd, and the stacks are real
    m = manifest(snap)
    assert m["stacks"]["status"] == "ok", m["stacks"]
    assert "py-spy sent" in m["docker"]["detail"] and "memfd" in m["docker"]["detail"]
    # the server's log is what Docker captured from its stdout
    assert m["log"]["status"] == "ok" and "docker logs" in m["log"]["detail"]
    assert snap["log"]["tail"], snap["log"]
    assert "docker container " + ctr.name in check_of(a, "container.placement")["summary"]
    # nothing left behind in the container's filesystem
    diff = docker_engine.docker("diff", ctr.name).stdout.decode()
    assert sorted(diff.splitlines()) == sorted(ctr.diff_at_start.splitlines()), diff


@pytest.mark.parametrize("scenario,options,code,verdict,cause", SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_scenario_in_a_container_diagnosed_from_the_host_by_pid(
    in_container, docker_engine, tmp_path, scenario, options, code, verdict, cause
) -> None:
    # the healthy server's port must be reachable from the host: host networking
    ctr = in_container(scenario, network="host" if scenario == "healthy" else "none", **options)
    if scenario == "compile":
        time.sleep(0.5)
    proc, a, snap = run_cli(docker_engine, "localhost", "--pid", str(ctr.host_pid),
                            "--window", "2", tmp=tmp_path)
    assert proc.returncode == code, proc.stderr
    assert a["verdict"] == verdict, (a.get("verdict_reason"), proc.stderr)
    if cause:
        assert top(a) == cause, [c["id"] for c in a["causes"]]
    # the container is named, from the cgroup path and Docker's state files
    c = snap["containers"][0]
    assert c["runtime"] == "docker" and c["name"] == ctr.name and not c["probe_inside"]
    assert c["image"] == "hangdoctor-test-base:1"
    assert c["state_file"].endswith("config.v2.json")
    assert ctr.host_pid in c["pids"]
    # pids both ways: host pid -> container pid (the launcher is the container's pid 1)
    by_pid = {p["pid"]: p for p in snap["processes"]}
    assert by_pid[ctr.host_pid]["ns_pids"] == [ctr.host_pid, 1]
    inner = {p["ns_pids"][-1] for p in snap["processes"] if p.get("ns_pids")}
    assert set(ctr.raw["worker_pids"]) <= inner
    # the container's /dev/shm (through /proc/PID/root), not the host's
    assert snap["shm"]["total_bytes"] == 64 << 20 and snap["shm"]["container"] == ctr.name
    # the server's log is Docker's json-file log, decoded
    assert snap["log"]["format"] == "docker-json", snap.get("log")
    assert snap["log"]["path"] == c["log_path"] and snap["log"]["tail"]
    assert not any(line.startswith('{"log"') for line in snap["log"]["tail"])
    placement = check_of(a, "container.placement")["summary"]
    assert ctr.name in placement and f"1={ctr.host_pid}" in placement


def test_the_runtime_log_is_redacted(in_container, docker_engine, tmp_path) -> None:
    ctr = in_container("postload", workers=1, api_key="sk-live-abcdefghijklmnop1234")
    docker_engine.docker("exec", ctr.name, "sh", "-c",
                         "echo 'HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123' > /proc/1/fd/1")
    proc, _, snap = run_cli(docker_engine, f"docker:{ctr.name}", "--window", "0", tmp=tmp_path)
    text = json.dumps(snap)
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in text, proc.stderr
    assert any("HF_TOKEN=" in line for line in snap["log"]["tail"])


def test_small_shm_with_nccl_users_is_shm_exhausted(in_container, docker_engine, tmp_path) -> None:
    ctr = in_container("postload", workers=2, shm_size="16m", env={"NCCL_SHM_DISABLE": "0"})
    proc, a, snap = run_cli(docker_engine, f"docker:{ctr.name}", "--window", "1", tmp=tmp_path)
    assert snap["containers"][0]["shm"]["total_bytes"] == 16 << 20, proc.stderr
    shm = check_of(a, "container.shm")
    assert shm["verdict"] == "fired", shm
    assert "16 MiB" in shm["summary"] and "NCCL" in shm["summary"]
    assert "--shm-size" in shm["summary"]
    assert any(c["id"] == "shm-exhausted" for c in a["causes"])


def test_large_shm_rules_shm_exhausted_out(in_container, docker_engine, tmp_path) -> None:
    ctr = in_container("postload", workers=2, shm_size="2g", env={"NCCL_SHM_DISABLE": "0"})
    proc, a, _ = run_cli(docker_engine, "localhost", "--pid", str(ctr.host_pid), "--window", "1",
                         tmp=tmp_path)
    shm = check_of(a, "container.shm")
    assert shm["verdict"] == "cleared", (shm, proc.stderr)
    assert "2.0 GiB" in shm["summary"]


def test_refused_ptrace_names_the_cause_and_the_fix(in_container, docker_engine, tmp_path) -> None:
    """Root in a container without CAP_SYS_PTRACE cannot trace a server of another uid."""
    ctr = in_container("postload", workers=2, as_uid=1000)
    proc, a, snap = run_cli(docker_engine, f"docker:{ctr.name}", "--window", "1", tmp=tmp_path)
    m = manifest(snap)
    assert m["stacks"]["status"] == "denied", m["stacks"]
    assert "no CAP_SYS_PTRACE" in m["stacks"]["detail"] and "uid 1000" in m["stacks"]["detail"]
    fix = m["stacks"]["remedy"]
    assert "docker run --cap-add SYS_PTRACE" in fix
    assert f"--pid {ctr.host_pid}" in fix  # the host pid of the container's init, filled in
    # a partial report: processes, states and CPU from /proc, no stacks
    assert len(snap["processes"]) == 3 and not any(s.get("status") == "ok" for s in snap["stacks"].values())
    perm = check_of(a, "collection.permissions")
    assert perm["verdict"] == "fired" and "--cap-add SYS_PTRACE" in json.dumps(perm)
    assert a["verdict"] in ("hung", "inconclusive")
    # the one line on the terminal: the exact cause, then the runtime's fix
    line = next(ln for ln in proc.stderr.splitlines() if "no Python stacks" in ln)
    assert line.startswith(f"hangdoctor: docker:{ctr.name}: no Python stacks: no CAP_SYS_PTRACE")
    assert "(fix: docker run --cap-add SYS_PTRACE" in line
    # the container's facts were still read (from inside, not through /proc/PID/root)
    assert snap["containers"][0]["shm"]["total_bytes"] == 64 << 20


def test_the_named_fix_works(in_container, docker_engine, tmp_path) -> None:
    ctr = in_container("postload", workers=2, as_uid=1000, cap_add=("SYS_PTRACE",))
    proc, a, snap = run_cli(docker_engine, f"docker:{ctr.name}", "--window", "1", tmp=tmp_path)
    assert manifest(snap)["stacks"]["status"] == "ok", proc.stderr
    assert top(a) == "post-load-deadlock"


def test_via_docker_exec_and_via_nsenter(in_container, docker_engine, tmp_path) -> None:
    need(shutil.which("nsenter") is not None and os.geteuid() == 0, "nsenter as root")
    ctr = in_container("postload", workers=2)
    for via in (f"docker exec -i {ctr.name}", f"nsenter -t {ctr.host_pid} -a"):
        proc, a, snap = run_cli(docker_engine, "--via", via, "--window", "1", tmp=tmp_path)
        assert proc.returncode == 3, (via, proc.stderr)
        assert top(a) == "post-load-deadlock", via
        assert snap["host"]["name"] == f"via:{via}"
        assert manifest(snap)["exec"]["status"] == "ok"
        assert {p["pid"] for p in snap["processes"]} >= set(ctr.raw["worker_pids"])


def test_two_containers_give_one_report(in_container, docker_engine, tmp_path) -> None:
    a1 = in_container("postload", workers=2)
    a2 = in_container("postload", workers=2, die_rank=1)
    proc, a, _ = run_cli(docker_engine, f"docker:{a1.name}", f"docker:{a2.name}",
                         "--window", "1", tmp=tmp_path)
    assert proc.returncode == 3, proc.stderr
    names = {h.get("name") for h in a["hosts"]}
    assert names == {f"docker:{a1.name}", f"docker:{a2.name}"}, a["hosts"]
    # one report over both: the ranks of both containers, the dead rank of the second named
    hosts_of_ranks = {r["host"] for r in a["ranks"]}
    assert hosts_of_ranks == names, a["ranks"]
    died = next(c for c in a["causes"] if c["id"] == "rank-died")
    dead = a2.raw["worker_pids"][1]
    assert f"pid {dead} [python3] is a zombie" in json.dumps(died["evidence"]), died


def test_pre_kill_snapshot_of_a_container(in_container, docker_engine, tmp_path) -> None:
    """`hangdoctor snapshot docker:NAME`: the bundle a preStop hook would take."""
    ctr = in_container("postload", workers=2)
    out = tmp_path / "bundle"
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "snapshot", f"docker:{ctr.name}", "-o", str(out),
         "--deadline", "20", "--json"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=docker_engine.env)
    assert proc.returncode == 3, proc.stderr
    snaps = list(out.rglob("*snapshot*.json"))
    assert snaps, list(out.rglob("*"))
    snap = json.loads(snaps[0].read_text())
    assert snap["containers"][0]["name"] == ctr.name and snap["target"]["kind"] == "docker"


# ------------------------------------------------------------------ one line, right code


def test_unknown_container(docker_engine, tmp_path) -> None:
    proc, _, _ = run_cli(docker_engine, "docker:no-such-ctr", "--window", "0", tmp=tmp_path)
    assert proc.returncode == 4
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("hangdoctor:")]
    assert any("no container named 'no-such-ctr'" in ln and "docker ps" in ln for ln in lines), proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_docker_binary(docker_engine, tmp_path) -> None:
    env = dict(docker_engine.env, PATH=str(tmp_path))  # nothing on PATH
    proc, _, _ = run_cli(docker_engine, "docker:anything", "--window", "0", env=env, tmp=tmp_path)
    assert proc.returncode == 4
    assert "docker: command not found" in proc.stderr and "Traceback" not in proc.stderr


def test_engine_not_reachable(docker_engine, tmp_path) -> None:
    env = dict(docker_engine.env, DOCKER_HOST=f"unix://{tmp_path}/none.sock")
    proc, _, _ = run_cli(docker_engine, "docker:anything", "--window", "0", env=env, tmp=tmp_path)
    assert proc.returncode == 4
    assert "Docker daemon is not reachable" in proc.stderr and "Traceback" not in proc.stderr


def test_no_permission_on_the_engine(in_container, docker_engine, tmp_path) -> None:
    need(os.geteuid() == 0 and shutil.which("setpriv") is not None, "root and setpriv")
    ctr = in_container("postload", workers=1)
    snap_dir = tmp_path / "nobody"
    snap_dir.mkdir()
    snap_dir.chmod(0o777)
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
         "hangdoctor", "diagnose", f"docker:{ctr.name}", "--window", "0", "-q"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
        env=dict(docker_engine.env, HOME=str(snap_dir)), cwd=str(snap_dir))
    assert proc.returncode == 4, proc.stderr
    assert "no permission to use the Docker daemon" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("spec", ["docker:", "docker:-bad", "k8s:a/b/c/d", "k8s:ns/Bad_Pod"])
def test_bad_target_spelling_is_usage(docker_engine, tmp_path, spec) -> None:
    proc, _, _ = run_cli(docker_engine, spec, "--window", "0", tmp=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
