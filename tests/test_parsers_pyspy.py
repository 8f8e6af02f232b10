"""py-spy text and JSON dumps, recorded from real processes (tests/samples/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

from hangdoctor.parsers.pyspy_json import parse_pyspy_json
from hangdoctor.parsers.pyspy_text import parse_pyspy_text

SAMPLES = Path(__file__).parent / "samples"


def _text(name: str) -> list[str]:
    return (SAMPLES / name).read_text().splitlines()


def test_desync_four_ranks() -> None:
    dumps = parse_pyspy_text(_text("pyspy_desync_4ranks.txt"))
    assert [(d.pid, d.rank, d.python) for d in dumps] == [
        (9267, 0, "3.11.7"),
        (9268, 1, "3.11.7"),
        (9269, 2, "3.11.7"),
        (9270, 3, "3.11.7"),
    ]
    tops = [d.threads[0]["frames"][0] for d in dumps]
    assert [f["name"] for f in tops] == ["broadcast", "broadcast", "broadcast", "all_reduce"]
    assert {f["filename"] for f in tops} == {"torch/distributed/distributed_c10d.py"}
    assert [f["line"] for f in tops] == [3151, 3151, 3151, 3252]
    main = dumps[3].threads[0]
    assert main["name"] == "MainThread" and main["os_thread_id"] == 9270
    assert main["active"] is False and main["owns_gil"] is False
    assert [f["name"] for f in main["frames"]] == [
        "all_reduce",
        "_exception_logger.<locals>.wrapper",
        "sync_metadata",
        "execute_model_step",
        "main",
        "<module>",
    ]
    assert dumps[0].threads[1]["name"] == "Thread-1"
    assert dumps[0].cmdline.endswith("serve_tp.py --rank 0 --world-size 4 --port 29726")
    assert not any(d.truncated for d in dumps)


def test_idle_workers_without_blank_lines() -> None:
    dumps = parse_pyspy_text(_text("pyspy_idle_workers.txt"))
    assert [(d.pid, d.rank) for d in dumps] == [(9317, 0), (9318, 1), (9319, 2), (9320, 3)]
    tops = [d.threads[0]["frames"][0]["name"] for d in dumps]
    assert tops == ["Connection._recv", "Socket.recv_multipart"] * 2
    assert dumps[1].threads[0]["frames"][0]["filename"] == "zmq/sugar/socket.py"


def test_native_and_locals() -> None:
    (d,) = parse_pyspy_text(_text("pyspy_native_locals.txt"))
    frames = d.threads[0]["frames"]
    assert frames[0]["native"] and frames[0]["name"].startswith("0x7f")
    assert frames[0]["filename"] == "libc.so.6" and frames[0]["line"] is None
    assert frames[3]["name"] == "c10d::Work::wait" and frames[3]["filename"] == "libtorch_cpu.so"
    assert len(frames[4]["name"]) > 1500  # the long pybind11 symbol survived whole
    bc = next(f for f in frames if f["name"] == "broadcast")
    assert bc["native"] is False and bc["line"] == 3151
    args = {v["name"]: v["repr"] for v in bc["locals"] if v["arg"]}
    assert args["src"] == "3" and args["async_op"] == "False"
    assert {v["name"] for v in bc["locals"] if not v["arg"]} == {
        "relevant_args",
        "opts",
        "sm90_or_more",
        "work",
    }


def test_sglang_watchdog_form_and_active_thread() -> None:
    lines = [
        "[2025-11-29 19:11:10 TP1] Pyspy dump for PID 51301:",
        'Thread 51301 (active+gil): "MainThread"',
        "    all_reduce (torch/distributed/distributed_c10d.py:2806)",
        'Thread 0x7F1A2B3C4D5E (active): "worker"',
        "    run (threading.py:982)",
    ]
    (d,) = parse_pyspy_text(lines)
    assert d.pid == 51301
    t0, t1 = d.threads
    assert t0["active"] and t0["owns_gil"]
    assert t1["thread_id"] == 0x7F1A2B3C4D5E and t1["os_thread_id"] is None and not t1["owns_gil"]
    lines2 = [
        "Process 51301: sglang::scheduler_TP1",
        "Python v3.12.3 (/usr/bin/python3.12)",
        "",
    ] + lines[1:3]
    (d2,) = parse_pyspy_text(lines2)
    assert (d2.pid, d2.rank, d2.cmdline) == (51301, 1, "sglang::scheduler_TP1")


def test_cut_short_and_spliced() -> None:
    lines = _text("pyspy_desync_4ranks.txt")
    cut = lines[: lines.index('Thread 9269 (idle): "MainThread"') + 1]
    dumps = parse_pyspy_text(cut)
    assert [d.pid for d in dumps] == [9267, 9268, 9269]
    assert dumps[-1].truncated and not dumps[0].truncated
    # a frame line cut mid-way is dropped, the rest kept
    half = lines[:8] + ["    execute_model_st"]
    (d,) = parse_pyspy_text(half)
    assert [f["name"] for f in d.threads[0]["frames"]] == [
        "broadcast",
        "_exception_logger.<locals>.wrapper",
        "sync_metadata",
    ]
    # a second header without a blank line or prompt starts a new process
    spliced = lines[1:10] + lines[19:30]
    assert [d.pid for d in parse_pyspy_text(spliced)] == [9267, 9268]


def test_json_single_and_concatenated() -> None:
    text = (SAMPLES / "pyspy_desync_rank3.json").read_text()
    (d,) = parse_pyspy_json(text)
    assert d.pid == 9270
    main = next(t for t in d.threads if t["name"] == "MainThread")
    assert main["frames"][0]["name"] == "all_reduce"
    assert main["frames"][0]["short_filename"] == "torch/distributed/distributed_c10d.py"
    assert main["frames"][0]["line"] == 3252 and main["frames"][0]["native"] is False
    assert main["os_thread_id"] == 9270 and isinstance(main["thread_id"], int)
    threads = json.loads(text)
    other = [dict(t, pid=1234) for t in threads]
    both = parse_pyspy_json(text + "\n" + json.dumps(other))
    assert [x.pid for x in both] == [9270, 1234]
    by_pid = parse_pyspy_json(json.dumps({"77": threads}))
    assert [x.pid for x in by_pid] == [77]
    assert parse_pyspy_json('[{"not": "threads"}]') == []
    assert parse_pyspy_json(text[: len(text) // 2]) == []
