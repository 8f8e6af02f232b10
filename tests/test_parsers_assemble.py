"""detect + assemble: pasted files of any mix become one redacted snapshot; read_input is robust."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hangdoctor.evidence.kernel import parse_kernel
from hangdoctor.evidence.logs import parse_log
from hangdoctor.parsers import InputError
from hangdoctor.parsers.assemble import MAX_INPUT_BYTES, analyze_inputs, read_input
from hangdoctor.parsers.detect import detect_kinds, sniff_json_document, split_segments

SAMPLES = Path(__file__).parent / "samples"
ROOT = Path(__file__).resolve().parent.parent


def _snap(*names: str) -> dict:
    return analyze_inputs([read_input(str(SAMPLES / n)) for n in names])


def _manifest(snap: dict) -> dict:
    return {m["source"]: m["status"] for m in snap["manifest"]}


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("pyspy_desync_4ranks.txt", ["pyspy-text"]),
        ("pyspy_desync_rank3.json", ["pyspy-json"]),
        ("faulthandler_fatal.txt", ["faulthandler"]),
        ("traceback_ctrl_c.txt", ["traceback"]),
        ("vllm_load_then_silence.log", ["log"]),
        ("dmesg_xid79_oom.txt", ["kernel"]),
        ("nvidia_smi_2gpu_busy.txt", ["nvidia-smi"]),
        ("nvidia_smi_q.txt", ["nvidia-smi-q"]),
        ("ps_auxf.txt", ["ps"]),
        ("ps_elo.txt", ["ps"]),
        ("env_worker.txt", ["env"]),
        ("collect_env_vllm.txt", ["collect-env"]),
        ("sglang_watchdog_pyspy.log", ["log", "pyspy-text"]),
        ("ticket_mixed.md", ["log", "pyspy-text", "kernel", "traceback"]),
    ],
)
def test_detect_by_content(name: str, kinds: list) -> None:
    assert detect_kinds((SAMPLES / name).read_text()) == kinds


def test_detect_ignores_file_names(tmp_path: Path) -> None:
    p = tmp_path / "nvidia-smi.txt"  # a misleading name: the content is a py-spy dump
    p.write_text((SAMPLES / "pyspy_idle_workers.txt").read_text())
    snap = analyze_inputs([read_input(str(p))])
    assert snap["pasted"][0]["kinds"] == ["pyspy-text"] and "gpus" not in snap


def test_sniff_saved_documents() -> None:
    assert sniff_json_document('  {"schema_version": 1, "origin": "live"}') == "snapshot"
    assert sniff_json_document('{"analysis_version": 1, "schema_version": 1}') == "analysis"
    assert sniff_json_document((SAMPLES / "pyspy_desync_rank3.json").read_text()) is None
    assert sniff_json_document("{not json") is None and sniff_json_document("") is None
    assert detect_kinds('{"schema_version": 1}') == ["snapshot"]
    snap = analyze_inputs([("old.json", '{"schema_version": 1}')])
    assert snap["pasted"][0]["kinds"] == ["snapshot"] and "stacks" not in snap


def test_acceptance_desync_dump() -> None:
    """(a) ranks 0-2 wait in broadcast, rank 3 in all_reduce."""
    snap = _snap("pyspy_desync_4ranks.txt")
    assert snap["origin"] == "pasted" and snap["redacted"] is True and "window_s" not in snap
    procs = {p["pid"]: p for p in snap["processes"]}
    assert {pid: p["rank"] for pid, p in procs.items()} == {9267: 0, 9268: 1, 9269: 2, 9270: 3}
    for p in procs.values():
        assert p["rank_source"] == "cmdline" and p["role"] == "worker"
        assert not {"cpu_pct", "cpu_delta_s", "status", "wchan"} & set(p)  # no timing invented
        assert p["alive"] is True  # py-spy could attach to it
    tops = {
        pid: st["samples"][0]["threads"][0]["frames"][0]["name"]
        for pid, st in snap["stacks"].items()
    }
    assert tops == {
        "9267": "broadcast",
        "9268": "broadcast",
        "9269": "broadcast",
        "9270": "all_reduce",
    }
    assert _manifest(snap) == {
        "stacks": "ok",
        "log": "not-given",
        "kernel_log": "not-given",
        "gpus": "not-given",
        "processes": "not-given",
        "env": "not-given",
        "versions": "not-given",
    }
    gpu_entry = next(m for m in snap["manifest"] if m["source"] == "gpus")
    assert "nvidia-smi" in gpu_entry["detail"]
    json.dumps(snap)  # plain JSON


def test_acceptance_load_then_idle_workers() -> None:
    """(b) log ends after loading; a separate paste shows 4 idle workers."""
    snap = _snap("vllm_load_then_silence.log", "pyspy_idle_workers.txt")
    assert [e["kinds"] for e in snap["pasted"]] == [["log"], ["pyspy-text"]]
    assert snap["pasted"][0]["log_flavours"] == ["vllm"]
    view = parse_log(snap["log"]["tail"])
    assert view.last("load-progress").data["pct"] == 100
    assert view.last_meaningful().kind == "load-done"
    assert "sk-proj-abcdefghijklmnop1234567890" not in json.dumps(snap)  # api_key in the log
    assert len(snap["stacks"]) == 4
    names = sorted(
        s["samples"][0]["threads"][0]["frames"][0]["name"] for s in snap["stacks"].values()
    )
    assert names == [
        "Connection._recv",
        "Connection._recv",
        "Socket.recv_multipart",
        "Socket.recv_multipart",
    ]


def test_acceptance_compile_log_only() -> None:
    """(c) compile lines, no stacks."""
    snap = _snap("vllm_compile_long.log")
    assert "stacks" not in snap and _manifest(snap)["stacks"] == "not-given"
    assert parse_log(snap["log"]["tail"]).last_meaningful().kind == "compile"


def test_acceptance_dmesg_and_smi() -> None:
    """(d) Xid 79 + OOM kill, (e) two GPUs at 100 % and ~119 W."""
    snap = _snap("dmesg_xid79_oom.txt", "nvidia_smi_2gpu_busy.txt")
    k = parse_kernel(snap["kernel_log"]["lines"])
    assert [x.code for x in k.xids] == [79] and k.oom_killed_pids() == {46297}
    gpus = snap["gpus"]
    assert gpus["backend"] == "pasted" and len(gpus["devices"]) == 2
    assert [d["samples"][0]["util_pct"] for d in gpus["devices"]] == [100, 100]
    assert [d["samples"][0]["power_w"] for d in gpus["devices"]] == [119.0, 118.0]


def test_acceptance_watchdog_log() -> None:
    """(f) ranks report different SeqNum / OpType."""
    snap = _snap("torch_watchdog_desync.log")
    view = parse_log(snap["log"]["tail"])
    ops = {
        (e.rank, e.data["seqnum"], e.data["optype"])
        for e in view.of("watchdog-timeout")
        if "optype" in e.data
    }
    assert (3, 4710, "ALLREDUCE") in ops and (0, 4711, "BROADCAST") in ops


def test_mixed_ticket_and_sources_merge() -> None:
    snap = _snap(
        "ticket_mixed.md",
        "ps_auxf.txt",
        "env_worker.txt",
        "collect_env_vllm.txt",
        "nvidia_smi_q.txt",
    )
    procs = {p["pid"]: p for p in snap["processes"]}
    # py-spy header + ps row + log prefix "(VllmWorker rank=1 pid=46296)" describe one process
    p = procs[46296]
    assert (
        p["rank"] == 1 and p["rank_source"] == "log" and p["ppid"] == 46294 and p["status"] == "S"
    )
    assert p["python_version"] == "3.12.11"
    assert procs[46295]["rank"] == 0  # only the log says so
    assert procs[46294]["cmdline"][-1] == "[REDACTED]"
    synthetic = [p for p in snap["processes"] if p["pid"] < 0]
    assert (
        len(synthetic) == 1
        and "traceback" in synthetic[0]["name"]
        and "ticket_mixed.md" in synthetic[0]["name"]
    )
    ki = snap["stacks"][str(synthetic[0]["pid"])]["samples"][0]["threads"][0]
    assert (
        ki["frames"][0]["name"] == "_wait_for_engine_startup"
        and ki["exception"] == "KeyboardInterrupt"
    )
    assert (
        snap["stacks"]["46296"]["samples"][0]["threads"][0]["frames"][0]["name"] == "recv_multipart"
    )
    assert snap["env"]["HF_TOKEN"] == "[REDACTED]" and snap["versions"]["vllm"] == "0.9.2"
    assert [x.code for x in parse_kernel(snap["kernel_log"]["lines"]).xids] == [79]
    assert parse_log(snap["log"]["tail"]).last("shm-broadcast-wait").rank == 1
    assert set(_manifest(snap).values()) == {"ok"}
    assert snap["targets"]["root_pids"] == [46294]  # not the shell at pid 1
    dumped = json.dumps(snap)
    assert "hf_abcdefghijklmnop" not in dumped and "s3cretpass" not in dumped


def test_faulthandler_gets_synthetic_pid_and_samples() -> None:
    text = (SAMPLES / "faulthandler_threads.txt").read_text()
    snap = analyze_inputs([("a.txt", text + "\n" + text), ("b.txt", text)])
    pids = sorted(int(k) for k in snap["stacks"])
    assert pids == [-2, -1]  # one unknown process per source
    assert len(snap["stacks"]["-1"]["samples"]) == 2  # the repeated dump is a second sample
    procs = {p["pid"]: p for p in snap["processes"]}
    assert procs[-1]["synthetic"] and "a.txt" in procs[-1]["name"]
    assert "alive" not in procs[-1]  # a faulthandler dump may be a dying process's last words


def test_sglang_watchdog_log_with_dump() -> None:
    snap = _snap("sglang_watchdog_pyspy.log")
    proc = next(p for p in snap["processes"] if p["pid"] == 51301)
    assert (proc["name"], proc["rank"], proc["rank_source"]) == (
        "sglang::scheduler_TP1",
        1,
        "name:TP1",
    )
    view = parse_log(snap["log"]["tail"])
    assert view.last("sglang-watchdog").data == {"dump_pid": 51301}
    assert not any(line.startswith("Thread 51301") for line in snap["log"]["tail"])


def test_read_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_input(str(tmp_path / "missing.txt"))
    with pytest.raises(InputError, match="is a directory"):
        read_input(str(tmp_path))
    p = tmp_path / "secret.txt"
    p.write_text("x")
    if os.geteuid() != 0:  # root reads anything
        p.chmod(0)
        with pytest.raises(InputError, match="permission denied"):
            read_input(str(p))


def test_read_input_encodings(tmp_path: Path) -> None:
    p = tmp_path / "mixed.log"
    p.write_bytes(
        "Loading weights took 1.0 seconds — ok\n".encode()
        + "caf\xe9 latin-1 line\n".encode("latin-1")
        + b"\x00\x00NUL\x00 line\r\n"
    )
    name, text = read_input(str(p))
    assert name == "mixed.log"
    assert text.splitlines() == [
        "Loading weights took 1.0 seconds — ok",
        "café latin-1 line",
        "NUL line",
    ]
    assert any("latin-1" in n for n in text.notes) and any("NUL" in n for n in text.notes)
    snap = analyze_inputs([(name, text)])
    assert any("latin-1" in n for n in snap["notes"])
    u16 = tmp_path / "ps.txt"
    u16.write_bytes((SAMPLES / "dmesg_xid79_oom.txt").read_text().encode("utf-16"))
    assert detect_kinds(read_input(str(u16))[1]) == ["kernel"]


def test_read_input_huge_file_keeps_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hangdoctor.parsers.assemble as asm

    monkeypatch.setattr(asm, "MAX_INPUT_BYTES", 1024 * 1024)  # same code path as 64 MiB, faster
    p = tmp_path / "big.log"
    with open(p, "wb") as f:
        f.write(b"INFO filler line that is not interesting at all\n" * 60000)
        f.write(
            b"(VllmWorker rank=0 pid=7) INFO 01-01 10:00:00 [x.py:1] Loading weights took 3.0 seconds\n"
        )
    name, text = read_input(str(p))
    assert len(text.encode()) <= 1024 * 1024
    assert text.notes[0].endswith("only its last 64 MiB were read")
    assert text.splitlines()[0] == "INFO filler line that is not interesting at all"  # whole lines
    assert parse_log(text.splitlines()).last("load-done").pid == 7
    assert MAX_INPUT_BYTES == 64 * 1024 * 1024


def test_read_input_stdin() -> None:
    code = (
        "import json,sys; from hangdoctor.parsers.assemble import read_input, analyze_inputs;"
        "n,t=read_input('-'); print(json.dumps(analyze_inputs([(n,t)])['pasted']))"
    )
    data = (SAMPLES / "dmesg_xid79_oom.txt").read_bytes()
    r = subprocess.run(
        [sys.executable, "-c", code],
        input=data,
        capture_output=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        check=True,
    )
    (entry,) = json.loads(r.stdout)
    assert entry["source"] == "<stdin>" and entry["kinds"] == ["kernel"] and entry["lines"] == 11


def test_segments_keep_line_numbers() -> None:
    segs = split_segments((SAMPLES / "ticket_mixed.md").read_text())
    py = next(s for s in segs if s.kind == "pyspy-text")
    assert py.start == 10 and py.lines[0].startswith("root@gpu-node-3:~# py-spy dump --pid 46296")


def test_read_input_never_blocks_on_special_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    import hangdoctor.parsers.assemble as asm

    monkeypatch.setattr(asm, "FIRST_DATA_TIMEOUT_S", 0.5)
    fifo = tmp_path / "evidence.txt"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(InputError, match="no writer"):
        read_input(str(fifo))
    assert time.monotonic() - t0 < 5

    def writer() -> None:
        time.sleep(0.2)
        with open(fifo, "wb") as f:
            f.write((SAMPLES / "dmesg_xid79_oom.txt").read_bytes())

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    name, text = read_input(str(fifo))
    th.join(timeout=10)
    assert detect_kinds(text) == ["kernel"] and name == "evidence.txt"

    monkeypatch.setattr(asm, "MAX_INPUT_BYTES", 256 * 1024)
    _name, zeros = read_input("/dev/zero")  # endless: cut, NULs dropped
    assert zeros == "" and zeros.notes[0].endswith("only its last 64 MiB were read")
