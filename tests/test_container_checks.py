"""Fixtures for the container checks (container.shm, container.oom, container.placement).

Each check fires on one fixture and is ruled out on another; tests/test_checks.py runs them
with every other check's (CONTAINER_CASES joins its CASES). The facts are shaped as the probe
records them (collect/container.py), from a real container's numbers where they can exist here.
"""

from __future__ import annotations

from typing import Any, Callable

from snapbuild import LAUNCHER, proc, snap

from hangdoctor.checkapi.api import CLEARED, FIRED
from hangdoctor.checkapi.registry import builtin_checks
from hangdoctor.evidence.model import Evidence

MIB, GIB = 1 << 20, 1 << 30
CID = "c792b9ff901090391310bae9dd85ac0e9cb95b66cff5096f65ea9046d98ca4cc"


def _ctr(**extra: Any) -> dict[str, Any]:
    c = {"runtime": "docker", "engine": "docker", "id": CID, "short_id": CID[:12], "name": "vllm",
         "image": "vllm/vllm-openai:v0.11.0", "pids": [100, 101, 102], "root_pid": 100,
         "probe_inside": False, "ipc_mode": "private",
         "shm": {"total_bytes": 64 * MIB, "free_bytes": 64 * MIB, "used_bytes": 0, "entries": []},
         "cgroup": {"cgroup_version": 1, "memory_usage_bytes": 3 * GIB, "oom_kill": 0,
                    "oom_kill_delta": 0, "under_oom": 0}}
    c.update(extra)
    return c


def _snap(*containers: dict[str, Any], nccl: bool = True) -> dict[str, Any]:
    env = {"NCCL_P2P_DISABLE": "1"} if nccl else {}
    launcher = dict(LAUNCHER, container_id=CID[:12], ns_pids=[100, 1])
    if not nccl:  # a plain Python server: no engine, no NCCL
        launcher["cmdline"] = ["python3", "serve.py"]
    procs = [launcher,
             proc(101, 0, env=env, container_id=CID[:12], ns_pids=[101, 7]),
             proc(102, 1, env=env, container_id=CID[:12], ns_pids=[102, 8])]
    s = snap(processes=procs)
    s["containers"] = list(containers)
    return s


def small_shm_nccl() -> dict[str, Any]:
    return _snap(_ctr())


def full_shm() -> dict[str, Any]:
    return _snap(_ctr(shm={"total_bytes": 16 * GIB, "free_bytes": 100 * MIB, "used_bytes": 16 * GIB,
                           "entries": [{"name": "psm_3f2a1b", "bytes": 16 * GIB}]}), nccl=False)


def small_shm_no_users() -> dict[str, Any]:
    return _snap(_ctr(), nccl=False)


def big_shm() -> dict[str, Any]:
    return _snap(_ctr(shm={"total_bytes": 16 * GIB, "free_bytes": 15 * GIB, "used_bytes": GIB,
                           "entries": [{"name": "nccl-7f3a2b", "bytes": 9 * MIB}]}))


def oom_in_window() -> dict[str, Any]:
    return _snap(_ctr(cgroup={"cgroup_version": 2, "memory_limit_bytes": 32 * GIB,
                              "memory_usage_bytes": 31 * GIB, "oom_kill": 1, "oom_kill_delta": 1}))


def oom_earlier() -> dict[str, Any]:
    return _snap(_ctr(cgroup={"cgroup_version": 1, "memory_limit_bytes": 32 * GIB,
                              "memory_usage_bytes": 20 * GIB, "oom_kill": 3, "oom_kill_delta": 0}))


def frozen_under_oom() -> dict[str, Any]:
    return _snap(_ctr(cgroup={"cgroup_version": 1, "memory_limit_bytes": 8 * GIB,
                              "memory_usage_bytes": 8 * GIB - MIB, "oom_kill": 0, "under_oom": 1}))


def pod_restarted_after_oom() -> dict[str, Any]:
    return _snap(_ctr(runtime="kubernetes", pod="vllm-0", namespace="llm", cgroup={},
                      restart_count=1, last_exit_reason="OOMKilled", memory_limit_bytes=512 * GIB))


def no_oom() -> dict[str, Any]:
    return _snap(_ctr(cgroup={"cgroup_version": 1, "memory_limit_bytes": 32 * GIB,
                              "memory_usage_bytes": 4 * GIB, "oom_kill": 0, "oom_kill_delta": 0}))


def on_the_host() -> dict[str, Any]:
    return snap(processes=[LAUNCHER, proc(101, 0), proc(102, 1)])


# check id -> (firing fixtures with the cause they speak for, ruled-out fixtures)
CONTAINER_CASES: dict[str, tuple[list[tuple[Callable[[], dict], str | None]], list[Callable[[], dict]]]] = {
    "container.shm": ([(small_shm_nccl, "shm-exhausted"), (full_shm, "shm-exhausted")],
                      [big_shm, small_shm_no_users]),
    "container.oom": ([(oom_in_window, "rank-died"), (oom_in_window, "host-oom-or-swap"),
                       (oom_earlier, "rank-died"), (frozen_under_oom, "host-oom-or-swap"),
                       (pod_restarted_after_oom, "rank-died")],
                      [no_oom]),
    "container.placement": ([(small_shm_nccl, None)], [on_the_host]),
}


def _run(cid: str, fixture: Callable[[], dict]) -> Any:
    check = next(c for c in builtin_checks() if c.id == cid)
    return check(Evidence([fixture()]))


def test_shm_finding_names_the_container_size_users_and_fix() -> None:
    r = _run("container.shm", small_shm_nccl)
    assert r.verdict == FIRED
    assert r.summary.startswith("docker container vllm: /dev/shm is only 64 MiB, --ipc private")
    assert "2 process(es) with NCCL_* settings" in r.summary and "--shm-size" in r.summary
    k8s = _snap(_ctr(runtime="kubernetes", pod="vllm-0", namespace="llm"))
    assert "medium: Memory" in _run("container.shm", lambda: k8s).summary


def test_oom_findings_say_when_and_the_limit() -> None:
    assert "during the window (limit 32.0 GiB)" in _run("container.oom", oom_in_window).summary
    assert "since it started" in _run("container.oom", oom_earlier).summary
    assert "killer disabled" in _run("container.oom", frozen_under_oom).summary
    r = _run("container.oom", no_oom)
    assert r.verdict == CLEARED and "no OOM kills, 4.0 GiB used (limit 32.0 GiB)" in r.summary


def test_placement_gives_pids_both_ways() -> None:
    r = _run("container.placement", small_shm_nccl)
    assert "docker container vllm; id c792b9ff9010; image vllm/vllm-openai:v0.11.0" in r.summary
    assert "container pid = host pid: 1=100, 7=101, 8=102" in r.summary


def test_container_checks_skip_without_container_facts() -> None:
    for cid in ("container.shm", "container.oom"):
        assert _run(cid, on_the_host).verdict == "skipped"
