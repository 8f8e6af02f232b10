"""Issue 5 acceptance through the real CLI: `hangdoctor analyze` on pasted evidence."""

from __future__ import annotations

import json
from pathlib import Path

import schema_check

SAMPLES = Path(__file__).parent / "samples"


def _analyze(hangdoctor_cli, *files: str, stdin: str | None = None) -> tuple[dict, object]:
    args = [str(SAMPLES / f) if f != "-" else "-" for f in files]
    proc = hangdoctor_cli("analyze", *args, "--json", "-q", input_text=stdin)
    assert proc.stdout.strip(), proc.stderr
    doc = json.loads(proc.stdout)
    schema_check.record("diagnose", doc)  # analyze writes the same analysis document
    return doc, proc


def test_multiprocess_dump_three_in_broadcast_one_in_all_reduce(hangdoctor_cli) -> None:
    a, proc = _analyze(hangdoctor_cli, "pyspy_desync_4ranks.txt")
    top = a["causes"][0]
    assert top["id"] == "nccl-desync" and a["verdict"] == "hung"
    assert [o["rank"] for o in top["odd_ones_out"]] == [3]
    assert "all_reduce" in top["odd_ones_out"][0]["why"]
    assert proc.returncode == 3
    assert any("sampling window" in w for w in a["weakened"])  # no timing in a paste: said so


def test_loading_at_100_then_silence_plus_idle_dumps(hangdoctor_cli) -> None:
    a, _ = _analyze(hangdoctor_cli, "vllm_load_then_silence.log", "pyspy_idle_workers.txt")
    assert a["causes"][0]["id"] == "post-load-deadlock"
    texts = " ".join(e["text"] for e in a["causes"][0]["evidence"])
    assert "loading finished" in texts and "wait" in texts


def test_long_compile_lines_without_stacks_are_progress(hangdoctor_cli) -> None:
    a, proc = _analyze(hangdoctor_cli, "vllm_compile_long.log")
    assert a["verdict"] == "progressing" and a["causes"][0]["id"] == "compile-in-progress"
    assert proc.returncode == 5
    assert "hangdoctor diagnose" in a["next_command"]


def test_watchdog_sequence_numbers_name_the_odd_rank(hangdoctor_cli) -> None:
    a, _ = _analyze(hangdoctor_cli, "torch_watchdog_desync.log")
    assert a["causes"][0]["id"] == "nccl-desync"
    assert [o["rank"] for o in a["causes"][0]["odd_ones_out"]] == [3]


def test_stdin_and_file_kinds_recognised_by_content(hangdoctor_cli, tmp_path: Path) -> None:
    text = (SAMPLES / "dmesg_xid79_oom.txt").read_text()
    a, _ = _analyze(hangdoctor_cli, "-", stdin=text)
    assert a["causes"][0]["id"] == "gpu-fault"
    odd_name = tmp_path / "notes.bin"  # the name says nothing; the content does
    odd_name.write_text((SAMPLES / "sglang_watchdog_pyspy.log").read_text())
    proc = hangdoctor_cli("analyze", str(odd_name), "--json", "-q")
    a = json.loads(proc.stdout)
    assert a["causes"][0]["id"] == "request-deadlock"


def test_partial_evidence_says_what_is_missing(hangdoctor_cli) -> None:
    a, _ = _analyze(hangdoctor_cli, "nvidia_smi_2gpu_busy.txt")
    missing = {c["source"] for c in a["collection"] if c["status"] == "not-given"}
    assert {"stacks", "log"} <= missing
    assert any("py-spy dump" in (c.get("detail") or "") for c in a["collection"] if c["source"] == "stacks")
    ids = [c["id"] for c in a["causes"]]
    assert "nccl-desync" in ids and "gpu-kernel-spin" in ids  # 100 % at ~119 W: a kernel waiting


def test_empty_and_binary_input_are_clear(hangdoctor_cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 64)
    for f in (empty, junk):
        # nothing to read is bad input (issue 17): one line naming the file, exit 2, no JSON
        proc = hangdoctor_cli("analyze", str(f), "--json", "-q")
        assert "Traceback" not in proc.stderr
        assert proc.returncode == 2 and proc.stdout == ""
        assert f"nothing recognised in {f}" in proc.stderr
    proc = hangdoctor_cli("analyze", str(tmp_path / "missing.txt"))
    assert proc.returncode == 2 and "missing.txt" in proc.stderr and "Traceback" not in proc.stderr
