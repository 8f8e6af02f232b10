"""Every built-in check: at least one fixture where it fires and one where it is ruled out.

Fixtures are recorded snapshots (tests/fixtures/snapshots/, real processes and py-spy) where
the situation exists on this machine, and synthetic snapshots shaped like them (tests/snapbuild)
where it cannot (GPUs, Xids, a full /dev/shm).
"""

from __future__ import annotations

from typing import Any, Callable

import nccl_fixtures as nf
import pytest
from snapbuild import (
    BUSY,
    BUSY2,
    CAPTURE,
    COMPILE,
    EVENT_WAIT,
    IO,
    LAUNCHER,
    LOCK,
    RDZV,
    RECV,
    SYNC,
    TOKENIZER,
    coll,
    frames,
    gpu,
    load,
    proc,
    snap,
    stack,
)

from hangdoctor.checkapi.api import CLEARED, FIRED, SKIPPED
from hangdoctor.checkapi.registry import builtin_checks
from hangdoctor.evidence.model import Evidence

GIB = 1 << 30

# ------------------------------------------------------------------ fixtures


def postload_recorded():
    return load("cpu-postload")


def dead_rank_recorded():
    return load("cpu-dead-rank")


def healthy_recorded():
    return load("cpu-healthy")


def compile_recorded():
    return load("cpu-compile")


def gloo_recorded():
    return load("cpu-gloo-desync")


def two_ranks(f0, f1, cpu0=0.0, cpu1=0.0, extra_threads0=None, **kw):
    return snap(
        processes=[LAUNCHER, proc(101, 0, cpu=cpu0, env={"WORLD_SIZE": "2"}, threads=extra_threads0),
                   proc(102, 1, cpu=cpu1, env={"WORLD_SIZE": "2"})],
        stacks={101: stack(f0), 102: stack(f1)}, **kw)


def nccl_wait_gpu():
    # FIELD-NOTES: waiting rank 100 % util at ~119 W; its peer parked in Python, 0 % at ~120 W
    return two_ranks(SYNC, EVENT_WAIT, cpu0=2.0,
                     extra_threads0=[{"tid": 101, "name": "python3", "status": "R"},
                                     {"tid": 110, "name": "NCCL Service  0", "status": "S"}],
                     gpus=[gpu(0, 100, 119, 21000, [101]), gpu(1, 0, 120, 21000, [102])])


def spin_gpu():
    return two_ranks(SYNC, EVENT_WAIT, cpu0=2.0,
                     gpus=[gpu(0, 100, 123, 21000, [101]), gpu(1, 0, 118, 21000, [102])])


def busy_gpu():
    return snap(processes=[LAUNCHER, proc(101, 0, cpu=2.0), proc(102, 1, cpu=2.0)],
                stacks={101: stack(BUSY, BUSY2, active=True), 102: stack(BUSY2, BUSY, active=True)},
                gpus=[gpu(0, 100, 615, 40000, [101]), gpu(1, 100, 610, 40000, [102])],
                http=[{"port": 8000, "url": "http://127.0.0.1:8000/health", "ok": True, "code": 200, "latency_s": 0.01}])


def idle_loaded_gpu():
    return snap(processes=[LAUNCHER, proc(101, 0), proc(102, 1)],
                stacks={101: stack(RECV), 102: stack(RECV)},
                gpus=[gpu(0, 0, 117, 21000, [101]), gpu(1, 0, 118, 21000, [102])])


def rank_gpu_freed():
    return snap(processes=[LAUNCHER, proc(101, 0, env={"WORLD_SIZE": "2"})],
                stacks={101: stack(SYNC)},
                gpus=[gpu(0, 100, 119, 21000, [101]), gpu(1, 0, 78, 300, [])])


def mismatched_collectives():
    return snap(processes=[LAUNCHER] + [proc(101 + r, r) for r in range(4)],
                stacks={101: stack(coll("broadcast")), 102: stack(coll("broadcast")),
                        103: stack(coll("broadcast")), 104: stack(coll("all_reduce"))})


def same_collective_moving():
    return snap(processes=[LAUNCHER] + [proc(101 + r, r, cpu=1.5) for r in range(2)],
                stacks={101: stack(coll("all_reduce"), BUSY, active=True),
                        102: stack(coll("all_reduce"), BUSY2, active=True)})


def rendezvous_one_missing():
    return snap(processes=[LAUNCHER, proc(101, 0, env={"WORLD_SIZE": "2", "MASTER_PORT": "29500"})],
                stacks={101: stack(RDZV)})


def phase(fr):
    return snap(processes=[LAUNCHER, proc(101, 0), proc(102, 1)], stacks={101: stack(fr), 102: stack(fr)})


NCCL_INIT = frames(("ncclCommInitRankDev", "libnccl.so.2", 0), ("ncclCommInitRank", "libnccl.so.2", 0),
                  ("all_reduce", "torch/distributed/distributed_c10d.py", 2500), ("step", "worker.py", 40))


def stopped_and_d_state():
    return snap(processes=[LAUNCHER, proc(101, 0, state="T"),
                           proc(102, 1, state="D", threads=[{"tid": 102, "name": "python3", "status": "D", "wchan": "nfs_wait_bit_killable"}])])


def root_gone():
    return snap(processes=[dict(proc(100, None, role="launcher"), alive=False, status="X", exit_info="gone before collection")])


def root_dead_child_alive():
    return snap(processes=[dict(proc(100, None, role="launcher"), state="Z", alive=False, zombie=True), proc(101, 0)])


def zombie_worker():
    return snap(processes=[LAUNCHER, proc(101, 0), proc(102, 1, state="Z", alive=False)])


def port_answers():
    return snap(processes=[LAUNCHER], http=[{"port": 8000, "url": "http://127.0.0.1:8000/health", "ok": True, "code": 200, "latency_s": 0.002}])


def port_silent():
    return snap(processes=[proc(100, None, role="api-server", listen=[{"ip": "0.0.0.0", "port": 8000}]),
                           proc(101, 0), proc(102, 1)],
                stacks={100: stack(TOKENIZER, active=True), 101: stack(RECV), 102: stack(RECV)},
                http=[{"port": 8000, "url": "http://127.0.0.1:8000/health", "ok": False, "error": "no answer within 2.0 s"}])


def no_port():
    return snap(processes=[LAUNCHER], http=[])


def nvml_blocked():
    return snap(processes=[LAUNCHER], manifest=[{"source": "nvml", "status": "timeout",
                                                 "detail": "NVML call nvmlDeviceGetUtilizationRates on GPU 1 did not return within 5.0 s"}])


def gpu_lost():
    return snap(processes=[LAUNCHER], gpus=[gpu(0, 0, 80, 1000, []), gpu(1, 0, 0, 0, [], lost=True)])


def gpus_fine():
    return snap(processes=[LAUNCHER], gpus=[gpu(0, 0, 80, 1000, [])])


def gpu_full():
    return snap(processes=[LAUNCHER, proc(101, 0)], gpus=[gpu(0, 0, 90, 143500, [101])])


def log_snap(lines, grew=0, **kw):
    return snap(processes=[LAUNCHER, proc(101, 0)], log=lines, log_grew=grew, **kw)


LOAD_DONE = [
    "(VllmWorker rank=0 pid=101) INFO 11-29 10:00:01 [default_loader.py:262] Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:10<00:10,  5.0s/it]",
    "(VllmWorker rank=0 pid=101) INFO 11-29 10:00:11 [default_loader.py:262] Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:20<00:00,  5.0s/it]",
    "(VllmWorker rank=0 pid=101) INFO 11-29 10:00:12 [gpu_model_runner.py:1892] Loading weights took 20.31 seconds",
]
LOAD_STUCK = [
    "Loading safetensors checkpoint shards:  31% Completed | 20/64 [05:10<11:00, 15.5s/it]",
]
COMPILE_LOG = [
    "(EngineCore pid=100) INFO 11-29 10:01:00 [backends.py:530] Compiling a graph for dynamic shape takes 25.31 s",
    "(EngineCore pid=100) INFO 11-29 10:01:30 [monitor.py:34] torch.compile takes 37.20 s in total",
]
CAPTURE_LOG = ["Capturing CUDA graph shapes:  45%|████▌     | 30/67 [00:12<00:15,  2.41it/s]"]
REQUESTS_LOG = [
    'INFO:     127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200 OK',
    "INFO 11-29 10:05:00 [metrics.py:455] Avg prompt throughput: 120.1 tokens/s, Avg generation throughput: 30.2 tokens/s, Running: 3 reqs",
]
OOM_LOG = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"]
SHM_LOG = ["ERROR: Bus error (core dumped)", "RuntimeError: unable to write to file </torch_123_456>: No space left on device (28) /dev/shm"]
WATCHDOG_LOG = [
    "[rank0]:[E1129 10:10:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=104, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.",
    "[rank1]:[E1129 10:10:00.000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=103, OpType=BROADCAST, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.",
]
WATCHDOG_SAME = [
    "[rank0]:[E1129 10:10:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=104, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.",
]
PLAIN_LOG = ["INFO 11-29 10:00:00 [api_server.py:1000] vLLM API server version 0.11.0", "INFO starting"]

XID_KERNEL = ["[Sat Nov 29 10:00:00 2026] NVRM: Xid (PCI:0000:19:00): 79, pid=101, name=python3, GPU has fallen off the bus."]
OOM_KERNEL = ["[Sat Nov 29 10:00:00 2026] Out of memory: Killed process 102 (python3) total-vm:312345678kB, anon-rss:90000000kB"]


def hm(avail_gib=20.0, total_gib=24.0, swap=0, oom=0):
    return {"mem_total_bytes": int(total_gib * GIB), "mem_available_bytes": int(avail_gib * GIB),
            "swap_total_bytes": 0, "swap_free_bytes": 0, "swap_in_pages_delta": swap, "swap_out_pages_delta": swap,
            "oom_kill_delta": oom}


def env_diff():
    return snap(processes=[LAUNCHER, proc(101, 0, env={"MASTER_PORT": "29500", "NCCL_P2P_DISABLE": "1"}),
                           proc(102, 1, env={"MASTER_PORT": "29501"})])


def env_same():
    return snap(processes=[LAUNCHER, proc(101, 0, env={"MASTER_PORT": "29500"}), proc(102, 1, env={"MASTER_PORT": "29500"})])


def versions_bad():
    return snap(processes=[LAUNCHER], versions={"cuda_runtime": "12.8"},
                gpus=[gpu(0, 0, 80, 1000, [])], gpu_meta={"driver_version": "535.104.05", "cuda_driver_version": "12.2"})


def versions_ok():
    return snap(processes=[LAUNCHER], versions={"cuda_runtime": "12.8"},
                gpus=[gpu(0, 0, 80, 1000, [])], gpu_meta={"driver_version": "580.159.04", "cuda_driver_version": "13.0"})


def ptrace_denied():
    return snap(processes=[LAUNCHER], manifest=[{"source": "stacks", "status": "denied", "detail": "Permission denied (os error 13)",
                                                 "remedy": "add --cap-add SYS_PTRACE"}])


def activity_compile_children():
    return snap(processes=[LAUNCHER, proc(101, 0, cpu=0.1), proc(103, None, role="compiler", name="ptxas", cpu=1.9)],
                stacks={101: stack(COMPILE)})


def interposer_at_nccl_init():
    # a CUDA interposer injected into the worker; the log stops at NCCL communicator init
    return snap(processes=[LAUNCHER, proc(101, 0, env={"LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"})],
                log=["(Worker pid=101) INFO 08-12 20:26:09 [pynccl.py:113] vLLM is using nccl==2.28.9"])


def idle_ranks_livelock():
    # three ranks walk a cache on their idle path while the fourth waits in the broadcast
    busy = frames(("sanity_check", "mem_cache/radix_cache.py", 812), ("on_idle", "managers/scheduler.py", 1402),
                  ("event_loop", "managers/scheduler.py", 990))
    return snap(processes=[LAUNCHER] + [proc(101 + i, i) for i in range(4)],
                stacks={101: stack(coll("broadcast")), 102: stack(busy, active=True),
                        103: stack(busy, active=True), 104: stack(busy, active=True)})


def ray_worker_died():
    return log_snap(["WARNING worker.py:2074 -- A worker died or was killed while executing a task by an "
                     "unexpected system error. To troubleshoot the problem, check the logs for the dead worker."])


GRAPH_AFTER_COMPILE = [
    "(Worker_TP0 pid=11) INFO 06-27 19:49:52 [monitor.py:53] torch.compile took 3.28 s in total",
    "(Worker_TP0 pid=11) INFO 06-27 19:49:53 [gpu_model_runner.py:6483] Profiling CUDA graph memory: PIECEWISE=83",
    "(Worker_TP0 pid=11) INFO 06-27 19:49:54 [custom_all_reduce.py:213] Registering 0 cuda graph addresses",
]


# check id -> (firing fixtures with the cause they must speak for (None: a plain finding),
#              ruled-out fixtures)
CASES: dict[str, tuple[list[tuple[Callable[[], dict], str | None]], list[Callable[[], dict]]]] = {
    # NCCL RAS / Flight Recorder: built from the real recordings (tests/nccl_fixtures.py)
    "nccl.ras": ([(nf.ras_rank_missing, "rank-died"), (nf.ras_counts_skewed_frozen, "nccl-desync")],
                 [nf.ras_counts_moving, nf.ras_all_present_frozen, nf.ras_recorded_one_rank]),
    "nccl.flight-recorder": ([(nf.fr_gloo_desync, "nccl-desync"), (nf.fr_h200_timeout, "gpu-kernel-spin"),
                              (nf.fr_one_dump_of_two_ranks, "nccl-desync"),
                              (nf.fr_first_collective, "nccl-transport")],
                             [nf.fr_stale, nf.fr_all_done]),
    "process.alive": ([(stopped_and_d_state, "io-stall"), (zombie_worker, "rank-died"), (root_gone, "rank-died"),
                       (root_dead_child_alive, None)],
                      [postload_recorded]),
    "ranks.expected": ([(dead_rank_recorded, "rank-died"), (rank_gpu_freed, "rank-died")], [postload_recorded]),
    "stacks.collectives": ([(gloo_recorded, "nccl-desync"), (mismatched_collectives, "nccl-desync"),
                            (nccl_wait_gpu, "nccl-desync"), (spin_gpu, "gpu-kernel-spin")],
                           [postload_recorded, same_collective_moving]),
    "stacks.waits": ([(postload_recorded, "post-load-deadlock")], [busy_gpu, gloo_recorded]),
    "stacks.phase": ([(lambda: load("vllm-weights-never-arrive"), "io-stall"),
                      (rendezvous_one_missing, "rendezvous-stall"), (lambda: phase(LOCK), "lock-contention"),
                      (lambda: phase(IO), "io-stall"), (lambda: phase(CAPTURE), "cuda-graph-capture"),
                      (lambda: phase(COMPILE), "compile-in-progress"), (lambda: phase(NCCL_INIT), "nccl-transport")],
                     [postload_recorded]),
    "activity.window": ([(compile_recorded, None), (activity_compile_children, "compile-in-progress")], [postload_recorded]),
    "port.health": ([(port_silent, "frontend-hang")], [healthy_recorded, no_port]),
    "frontend.stack": ([(port_silent, "frontend-hang"), (lambda: load("vllm-loop-blocked"), "frontend-hang")],
                       [healthy_recorded, lambda: load("vllm-stuck-step")]),
    # issue 13: recorded on real vLLM servers (tests/test_vllm.py)
    "engine.progress": ([(lambda: load("vllm-stuck-step"), "request-deadlock"),
                         (lambda: load("vllm-tp2-rank-stopped"), "nccl-desync"),
                         (lambda: load("vllm-loop-blocked"), "frontend-hang"),
                         (lambda: load("vllm-engine-died"), "rank-died"),
                         # recorded in CI: the whole tree had exited, the engine known by its log
                         (lambda: load("vllm-engine-died-tree-gone"), "rank-died")],
                        [lambda: load("vllm-healthy-idle"), lambda: load("vllm-healthy-load"),
                         healthy_recorded]),
    "gpu.util-power": ([(nccl_wait_gpu, "nccl-desync"), (idle_loaded_gpu, "post-load-deadlock")], [busy_gpu]),
    "gpu.health": ([(nvml_blocked, "gpu-fault"), (gpu_lost, "gpu-fault")], [gpus_fine]),
    "gpu.memory": ([(gpu_full, "gpu-oom")], [gpus_fine]),
    "kernel.log": ([(lambda: snap(processes=[LAUNCHER, proc(101, 0)], kernel=XID_KERNEL), "gpu-fault"),
                    (lambda: snap(processes=[LAUNCHER, proc(102, 1)], kernel=OOM_KERNEL), "rank-died")],
                   [lambda: snap(processes=[LAUNCHER], kernel=[])]),
    "log.phase": ([(lambda: log_snap(LOAD_DONE), "post-load-deadlock"), (lambda: log_snap(LOAD_STUCK), "io-stall"),
                   (lambda: log_snap(COMPILE_LOG, grew=300), "compile-in-progress"),
                   (lambda: log_snap(CAPTURE_LOG), "cuda-graph-capture"),
                   (lambda: log_snap(REQUESTS_LOG), "request-deadlock"),
                   (lambda: log_snap(GRAPH_AFTER_COMPILE), "cuda-graph-capture")],
                  [lambda: log_snap(PLAIN_LOG)]),
    "log.errors": ([(lambda: log_snap(OOM_LOG), "gpu-oom"), (lambda: log_snap(SHM_LOG), "shm-exhausted")],
                   [lambda: log_snap(LOAD_DONE)]),
    "nccl.watchdog": ([(lambda: log_snap(WATCHDOG_LOG), "nccl-desync"), (lambda: log_snap(WATCHDOG_SAME), "nccl-desync")],
                      [lambda: log_snap(PLAIN_LOG)]),
    "nccl.env": ([(env_diff, "rendezvous-stall"), (env_diff, "nccl-transport")], [env_same]),
    "memory.host": ([(lambda: snap(processes=[LAUNCHER], host_memory=hm(avail_gib=0.3)), "host-oom-or-swap"),
                     (lambda: snap(processes=[LAUNCHER], host_memory=hm(swap=5000)), "host-oom-or-swap"),
                     (lambda: snap(processes=[LAUNCHER], host_memory=hm(), shm={"total_bytes": 64 << 20, "free_bytes": 60 << 20}), "shm-exhausted")],
                    [lambda: snap(processes=[LAUNCHER], host_memory=hm(), shm={"total_bytes": 12 * GIB, "free_bytes": 12 * GIB})]),
    "versions.compat": ([(versions_bad, "driver-or-runtime-mismatch")], [versions_ok]),
    "collection.permissions": ([(ptrace_denied, None)], [postload_recorded]),
    "knowledge.rules": ([(interposer_at_nccl_init, "cuda-interposer-deadlock"), (idle_ranks_livelock, "cpu-livelock"),
                         (ray_worker_died, "rank-died")],
                        [lambda: log_snap(PLAIN_LOG), postload_recorded]),
    "env.audit": ([(lambda: snap(processes=[LAUNCHER], versions={"torch": "2.5.1"},
                                 log=["node:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2"]), None),
                   (interposer_at_nccl_init, None)],
                  [lambda: log_snap(PLAIN_LOG), postload_recorded]),
}

# the container checks' fixtures live with the container tests
from test_container_checks import CONTAINER_CASES  # noqa: E402

CASES.update(CONTAINER_CASES)


# the reading side: a poster's sentences (negations) and the libraries' own messages
def _pasted(text: str):
    from hangdoctor.parsers.assemble import analyze_inputs

    return lambda: analyze_inputs([("ticket.txt", text)])


_STACK_TEXT = ('Process 4242: python -m vllm\nPython v3.11.7 (/usr/bin/python3)\n\n'
               'Thread 4242 (idle): "MainThread"\n    synchronize (torch/cuda/__init__.py:900)\n')
CASES["prose.negations"] = (
    [(_pasted("We checked dmesg on the node and there is no Xid and no OOM killer at all.\n" + _STACK_TEXT), None)],
    [_pasted("We restarted the server twice and it hangs again after an hour of serving.\n" + _STACK_TEXT)],
)
CASES["library.messages"] = (
    # NCCL's own WARN format ("Cuda failure '%s'", src/include/checks.h), as a rank prints it
    [(_pasted("node7:4410:4410 [0] transport/p2p.cc:272 NCCL WARN Cuda failure "
              "'peer access is not supported between these two devices'\n"), "gpu-fault")],
    [_pasted("node7:4410:4410 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n")],
)


def _check(cid: str):
    for c in builtin_checks():
        if c.id == cid:
            return c
    raise KeyError(cid)


FIRE_PARAMS = [(cid, i, fx, cause) for cid, (fires, _) in CASES.items() for i, (fx, cause) in enumerate(fires)]
CLEAR_PARAMS = [(cid, i, fx) for cid, (_, clears) in CASES.items() for i, fx in enumerate(clears)]


@pytest.mark.parametrize("cid,i,fixture,cause", FIRE_PARAMS, ids=[f"{c}-{i}" for c, i, _, _ in FIRE_PARAMS])
def test_check_fires(cid: str, i: int, fixture: Callable[[], dict[str, Any]], cause: str | None) -> None:
    c = _check(cid)
    ev = Evidence([fixture()])
    missing = [n for n in c.needs if not ev.has(n)]
    assert not missing, f"fixture lacks {missing}"
    r = c(ev)
    assert r.verdict == FIRED, (r.verdict, r.summary)
    if cause:
        assert any(s.cause == cause and s.weight > 0 for s in r.signals), [s.to_dict() for s in r.signals]


@pytest.mark.parametrize("cid,i,fixture", CLEAR_PARAMS, ids=[f"{c}-{i}" for c, i, _ in CLEAR_PARAMS])
def test_check_is_ruled_out(cid: str, i: int, fixture: Callable[[], dict[str, Any]]) -> None:
    c = _check(cid)
    ev = Evidence([fixture()])
    r = c(ev) if all(ev.has(n) for n in c.needs) else None
    assert r is not None and r.verdict == CLEARED, (r and r.verdict, r and r.summary)
    assert not any(s.weight > 0 for s in r.signals), [s.to_dict() for s in r.signals]


def test_every_check_has_fixtures_and_docs() -> None:
    """Meta-test (as Datasette does for hooks): a check without a firing fixture, a ruled-out
    fixture, a docstring or a 'Confirm by hand' command fails here."""
    for c in builtin_checks():
        assert c.id in CASES, f"{c.id} has no fixtures in tests/test_checks.py"
        fires, clears = CASES[c.id]
        assert fires and clears, c.id
        assert len(c.doc) > 80, f"{c.id} needs a docstring"
        assert c.confirm, f"{c.id} docstring needs a 'Confirm by hand:' line"


def test_every_cause_can_be_raised_and_ruled_out() -> None:
    from hangdoctor.knowledge.causes import CAUSES

    raised = {cause for fires, _ in CASES.values() for _, cause in fires if cause}
    assert set(CAUSES) <= raised, f"causes no fixture raises: {sorted(set(CAUSES) - raised)}"
    declared = {cause for c in builtin_checks() for cause in c.causes}
    assert set(CAUSES) <= declared


def test_skipped_when_evidence_missing() -> None:
    from hangdoctor.checkapi.runner import run_checks

    outcomes = run_checks(builtin_checks(), Evidence([snap(processes=[LAUNCHER])]))
    by_id = {o.check.id: o.result for o in outcomes}
    assert by_id["gpu.util-power"].verdict == SKIPPED and by_id["gpu.util-power"].missing == ["gpus"]
    assert by_id["stacks.collectives"].verdict == SKIPPED


def test_a_crashing_check_is_errored_and_the_rest_run() -> None:
    from hangdoctor.checkapi import check
    from hangdoctor.triage.analyze import analyze

    @check("test.boom", "always raises")
    def boom(ev):
        raise RuntimeError("boom")

    a = analyze([load("cpu-postload")], builtin_checks() + [boom])
    rows = {c["id"]: c for c in a["checks"]}
    assert rows["test.boom"]["verdict"] == "errored" and "RuntimeError: boom" in rows["test.boom"]["error"]
    assert a["causes"][0]["id"] == "post-load-deadlock"


def test_frames_helper_is_innermost_first() -> None:
    assert frames(("a", "x.py", 1), ("b", "y.py", 2))[0]["name"] == "a"


def test_collector_notes_reach_the_report() -> None:
    """A probe's note (py-spy not uploaded, a file cut short) is shown, not lost."""
    from hangdoctor.triage.analyze import analyze

    s = snap(processes=[LAUNCHER])
    s["notes"] = ["py-spy not uploaded: remote is aarch64, local x86_64"]
    assert "py-spy not uploaded: remote is aarch64, local x86_64" in analyze([s])["weakened"]


def test_a_dead_root_speaks_for_a_death_only_when_its_whole_tree_is_gone() -> None:
    c = _check("process.alive")
    gone = c(Evidence([root_gone()]))
    assert any(s.cause == "rank-died" and s.weight > 0 for s in gone.signals)
    child_alive = c(Evidence([root_dead_child_alive()]))
    assert child_alive.facts.get("dead") and not any(s.cause == "rank-died" and s.weight > 0 for s in child_alive.signals)


def test_a_server_already_gone_is_known_by_its_log() -> None:
    """Recorded in CI: the engine core was killed and the whole vLLM tree exited before the
    diagnosis; only the root remained, a zombie with no command line. The log's per-process
    prefixes still say it was vLLM, and its last lines which process died."""
    from hangdoctor.evidence.engine_view import EngineView

    snap = load("vllm-engine-died-tree-gone")
    assert EngineView(Evidence([snap])).model.name == "vllm"
    snap["log"]["tail"] = [x for x in snap["log"]["tail"] if "pid=" not in x]
    assert EngineView(Evidence([snap])).model is None  # no prefix, no engine named from the log
