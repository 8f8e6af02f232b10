"""Log view: event kinds, prefixes, cleaning, streaming a huge file in bounded memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from hangdoctor.evidence.logs import clean_line, parse_log, parse_log_file
from hangdoctor.snapshot.loglines import split_prefix

SAMPLES = Path(__file__).parent / "samples"


def _lines(name: str) -> list[str]:
    return (SAMPLES / name).read_text().splitlines()


def test_vllm_load_then_silence() -> None:
    v = parse_log(_lines("vllm_load_then_silence.log"))
    bars = v.of("load-progress")
    assert [e.data["pct"] for e in bars] == [0, 3, 50, 97, 100]
    assert bars[-1].data == {
        "pct": 100,
        "done": 30,
        "total": 30,
        "what": "Loading safetensors checkpoint shards",
    }
    done = v.of("load-done")
    assert [(e.rank, e.pid) for e in done[:4]] == [(0, 46295), (2, 46297), (1, 46296), (3, 46298)]
    assert done[0].data == {"seconds": 40.61}
    assert done[-1].data == {"seconds": 41.573261, "mem_gib": 32.8894}
    last = v.last_meaningful()
    assert last is not None and last.kind == "load-done" and last.line_no == 31
    assert v.last("server-ready", "request") is None
    # compilation_config={...} in the engine config line is not a compile event
    assert v.of("compile") == []
    assert v.ranks() == {0: {46295}, 1: {46296}, 2: {46297}, 3: {46298}}


def test_compile_lines() -> None:
    v = parse_log(_lines("vllm_compile_long.log"))
    secs = [e.data.get("seconds") for e in v.of("compile")]
    assert 12.84 in secs and 95.31 in secs and 1107.35 in secs
    assert all(e.pid == 3121 for e in v.of("compile"))
    texts = [e.text for e in v.of("compile")]
    assert any("DeepGEMM JIT: Compiling 48 kernels" in t for t in texts)
    assert any("AUTOTUNE mm" in t for t in texts)
    assert v.last_meaningful().kind == "compile"
    assert v.counts["load-done"] == 2


def test_watchdog_ranks_disagree() -> None:
    v = parse_log(_lines("torch_watchdog_desync.log"))
    first = {}
    for e in v.of("watchdog-timeout"):
        if "optype" in e.data:
            first.setdefault(e.rank, (e.data["seqnum"], e.data["optype"]))
    assert first == {
        0: (4711, "BROADCAST"),
        1: (4711, "BROADCAST"),
        2: (4711, "BROADCAST"),
        3: (4710, "ALLREDUCE"),
    }
    ev = v.of("watchdog-timeout")[3]
    assert ev.data["timeout_ms"] == 600000 and ev.data["numel"] == 8388608
    assert ev.data["ran_ms"] == 600004
    newer = [e for e in v.of("watchdog-timeout") if "last_completed" in e.data]
    assert {(e.rank, e.data["last_enqueued"], e.data["last_completed"]) for e in newer} == {
        (2, 4711, 4710),
        (0, 4711, 4710),
        (3, 4710, 4709),
    }
    exit_ev = v.last("shard-exit")
    assert exit_ev.data == {"code": -6, "rank": 0, "pid": 46295} and exit_ev.pid == 46295


def test_sglang_prefixes_and_watchdog() -> None:
    v = parse_log(_lines("sglang_watchdog_pyspy.log"))
    assert [(e.rank, e.data) for e in v.of("load-done")] == [
        (0, {"avail_gb": 54.12}),
        (1, {"avail_gb": 54.12}),
    ]
    assert [e.data.get("phase") for e in v.of("graph-capture")] == ["begin", "end"]
    assert len(v.of("server-ready")) == 3
    reqs = v.of("request")
    assert reqs[-1].data == {"phase": "decode", "running": 3} and reqs[-1].rank == 0
    assert {"method": "POST", "path": "/v1/chat/completions", "code": 200} in [r.data for r in reqs]
    wd = v.of("sglang-watchdog")
    assert wd[0].rank == 1 and wd[1].data == {"dump_pid": 51301}
    assert v.last("host-oom").text == "Killed"
    assert v.last("host-oom").data == {"sigkill_only": True}  # SIGKILL, not proof of OOM


def test_tgi_shard_death() -> None:
    v = parse_log(_lines("tgi_shard_failed.log"))
    assert [e.data["rank"] for e in v.of("waiting-for-shard")] == [0, 1, 1, 1]
    assert v.of("load-done")[0].rank == 0 and v.of("load-done")[0].data == {"seconds": 22.3}
    exits = v.of("shard-exit")
    assert exits[0].data == {"signal": 7, "rank": 1}
    assert exits[1].data == {"rank": 1} and "Shard 1 failed to start" in exits[1].text
    assert v.of("sigbus")[0].rank == 1


def test_nccl_lines() -> None:
    v = parse_log(_lines("nccl_init_stall.log"))
    inits = v.of("nccl-init")
    assert [(e.rank, e.pid, e.data["phase"], e.data["nranks"]) for e in inits] == [
        (0, 46295, "start", 2),
        (1, 46296, "start", 2),
    ]
    assert v.last("nccl-init", "nccl-info").data["host"] == "gpu-node-3"
    warns = v.of("nccl-warn")
    assert len(warns) == 2 and warns[0].pid == 46296
    assert v.last("shm-no-space").line_no == 17
    # NCCL INFO chatter is noise; the WARN / shm error is what matters
    assert v.last_meaningful().kind in ("shm-no-space", "nccl-warn")
    assert v.counts["nccl-info"] == 15


def test_prefix_forms() -> None:
    cases = {
        "(EngineCore pid=123) INFO 01-01 10:00:00 [core.py:1] x": (None, 123, "x"),
        "(VllmWorker rank=1 pid=456) y": (1, 456, "y"),
        "(VllmWorker TP1 pid=456) y": (1, 456, "y"),
        "(Worker_TP2 pid=457) y": (2, 457, "y"),
        "(RayWorkerWrapper pid=789, ip=10.0.0.2) z": (None, 789, "z"),
        "[2025-01-01 10:00:00 TP1] a": (1, None, "a"),
        "[2025-01-01 10:00:00 DP0 TP3] a": (3, None, "a"),
        "[2025-01-01 10:00:00 TP0 EP0] a": (0, None, "a"),
        "[rank2]:[E1129 19:30:01.5 ProcessGroupNCCL.cpp:632] b": (
            2,
            None,
            "[E1129 19:30:01.5 ProcessGroupNCCL.cpp:632] b",
        ),
    }
    for line, (rank, pid, rest) in cases.items():
        p = split_prefix(line)
        assert (p.rank, p.pid, p.rest) == (rank, pid, rest), line


def test_more_kinds() -> None:
    lines = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB",
        "RuntimeError: CUDA error: out of memory",
        "(VllmWorker rank=2 pid=9) WARNING 01-01 10:00:00 [shm_broadcast.py:430] No available shared memory broadcast block found in 60 second.",
        "ERROR: Error while creating shared memory segment /dev/shm/nccl-abc (size 9637888)",
        "OSError: [Errno 28] No space left on device: '/dev/shm/psm_1'",
        "Fatal Python error: Bus error",
        "[W socket.cpp:1] Waiting in store based barrier to initialize process group for rank: 1, key: store_based_barrier_key:1 (world_size=4, num_workers_joined=3, timeout=0:30:00)",
        "RuntimeError: Timed out initializing process group in store based barrier on rank 1",
        "DEBUG:filelock:Attempting to acquire lock 140 on /root/.cache/huggingface/hub/.locks/models--x/abc.lock",
        "Waiting on baton in /root/.cache/torch_extensions/py311_cu121/fused_adam",
        "Capturing CUDA graph shapes:  45%|████▌     | 30/67 [00:05<00:06,  5.80it/s]",
        'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
        "INFO 01-01 10:00:00 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%",
    ]
    v = parse_log(lines)
    assert v.of("cuda-oom")[0].data == {"tried": "2.00 GiB"}
    assert len(v.of("cuda-oom")) == 2
    assert (
        v.of("shm-broadcast-wait")[0].data == {"seconds": 60}
        and v.of("shm-broadcast-wait")[0].rank == 2
    )
    assert [e.line_no for e in v.of("shm-no-space")] == [4, 5]
    assert v.of("sigbus")[0].line_no == 6
    rdzv = v.of("rendezvous")
    assert [e.line_no for e in rdzv] == [7, 8] and rdzv[1].data == {"timed_out": True}
    locks = v.of("lock-wait")
    assert locks[0].data["path"].endswith("abc.lock") and locks[1].line_no == 10
    assert v.of("graph-capture")[0].data == {"pct": 45}
    idle = v.of("request")[-1]
    assert idle.data["idle"] is True and idle.data["running"] == 0
    # an idle zero-throughput stats line does not count as the last meaningful event
    assert v.last_meaningful().kind == "request" and v.last_meaningful().line_no == 12


def test_traceback_events_with_and_without_prefix() -> None:
    lines = [
        "(VllmWorker rank=1 pid=46296) ERROR 01-01 10:00:00 [multiproc_executor.py:470] Traceback (most recent call last):",
        "(VllmWorker rank=0 pid=46295) INFO 01-01 10:00:00 [x.py:1] unrelated",
        '(VllmWorker rank=1 pid=46296) ERROR 01-01 10:00:00 [multiproc_executor.py:470]   File "/x/worker.py", line 465, in worker_busy_loop',
        "(VllmWorker rank=1 pid=46296) ERROR 01-01 10:00:00 [multiproc_executor.py:470]     output = func(*args)",
        "(VllmWorker rank=1 pid=46296) ERROR 01-01 10:00:00 [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
        "Traceback (most recent call last):",
        '  File "/srv/a.py", line 1, in <module>',
        "ValueError: boom",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/srv/a.py", line 3, in <module>',
        "KeyboardInterrupt",
    ]
    v = parse_log(lines)
    tbs = v.of("traceback")
    assert [(e.line_no, e.data["exc_type"], e.rank, e.pid) for e in tbs] == [
        (5, "torch.OutOfMemoryError", 1, 46296),
        (8, "ValueError", None, None),
        (14, "KeyboardInterrupt", None, None),
    ]
    assert v.of("cuda-oom")[0].rank == 1


def test_clean_line_ansi_and_carriage_returns() -> None:
    raw = (
        "\x1b[32mLoading safetensors checkpoint shards:  97% Completed | 29/30 [00:39<00:01]\x1b[0m"
        "\rLoading safetensors checkpoint shards: 100% Completed | 30/30 [00:40<00:00]\r\n"
    )
    assert (
        clean_line(raw)
        == "Loading safetensors checkpoint shards: 100% Completed | 30/30 [00:40<00:00]"
    )
    v = parse_log([raw])
    assert v.last("load-progress").data["pct"] == 100
    assert len(v.of("load-progress")) == 1
    assert clean_line("x" * 100000).endswith("chars]")


def test_accepts_iterator_and_one_big_string() -> None:
    text = (SAMPLES / "vllm_load_then_silence.log").read_text()
    a = parse_log(iter(text.splitlines(keepends=True)))
    b = parse_log([text])
    assert a.counts == b.counts == {"load-progress": 5, "load-done": 5}
    assert a.total_lines == 31


def test_parse_log_file_bounded(tmp_path: Path) -> None:
    block = (SAMPLES / "sglang_watchdog_pyspy.log").read_bytes()
    path = tmp_path / "huge.log"
    reps = 3_000  # ~6.5 MB, ~110k lines (+ a 3 MB line): bigger than everything kept
    with open(path, "wb") as f:
        for _ in range(reps):
            f.write(block)
        f.write(b"x" * 3_000_000 + b"\n")  # one monstrous line
        f.write(b"\xff\xfe binary \x00 junk\n")
        f.write(b"[2025-11-29 19:20:00 TP0] Decode batch. #running-req: 7, #token: 1\n")
    tracemalloc.start()
    try:
        v = parse_log_file(str(path), max_lines_kept=400, max_events_per_kind=50)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(v.lines) == 400
    assert v.lines[-1].startswith("[2025-11-29 19:20:00 TP0] Decode batch")
    assert v.counts["request"] == 4 * reps + 1
    assert len(v.of("request")) == 50
    assert v.last("request").data == {"phase": "decode", "running": 7}
    assert v.total_lines == 37 * reps + 3
    assert peak < 5 * 1024 * 1024, peak  # the file is ~9.5 MB: it was streamed, not held


def test_watchdog_followup_lines_inherit_optype() -> None:
    v = parse_log(_lines("torch_watchdog_desync.log"))
    last = {}
    for e in v.of("watchdog-timeout"):
        last[e.rank] = e
    assert last[2].line_no == 6 and last[2].data["optype"] == "BROADCAST"
    assert last[2].data["optype_from_earlier_line"] is True
    assert {r: (e.data["seqnum"], e.data["optype"]) for r, e in last.items()} == {
        0: (4711, "BROADCAST"),
        1: (4711, "BROADCAST"),
        2: (4711, "BROADCAST"),
        3: (4710, "ALLREDUCE"),
    }


def test_torchs_cuda_error_advice_is_not_a_compile_line() -> None:
    """torch appends 'Compile with `TORCH_USE_CUDA_DSA`...' to every CUDA error: a log ending
    in one had 'compile-in-progress' as its first cause; a real compile line still counts."""
    advice = parse_log([
        "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
    ])
    assert not advice.of("compile"), advice.of("compile")
    real = parse_log(["INFO 11-30 10:01:02 [backends.py:215] Compiling a graph for dynamic shape takes 41.2 s\n"])
    assert real.of("compile")
