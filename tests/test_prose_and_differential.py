"""A poster's prose is context, never a log line; the differential is never empty when a stack,
an error or a phase was read, and empty when only prose was; the explanation ranks above its
consequence; negations in prose speak against what they deny; leave-one-source-out switches off
the knowledge written from a case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hangdoctor.knowledge import matcher
from hangdoctor.parsers.assemble import analyze_inputs
from hangdoctor.parsers.prose import is_document, is_prose, split_prose
from hangdoctor.triage import differential
from hangdoctor.triage.analyze import analyze

REPO = Path(__file__).resolve().parent.parent

STACK = """Process 4242: python -m vllm.entrypoints.openai.api_server
Python v3.11.7 (/usr/bin/python3)

Thread 4242 (idle): "MainThread"
    _recv_bytes (multiprocessing/connection.py:430)
    recv (multiprocessing/connection.py:250)
    worker_busy_loop (vllm/executor/multiproc_worker_utils.py:230)
"""


def _analyse(text: str, name: str = "ticket.md") -> dict:
    return analyze([analyze_inputs([(name, text)])])


def test_sentences_are_prose_and_program_output_is_not() -> None:
    assert is_prose("We run vLLM on 8 GPUs and it hangs right after loading the weights.")
    assert is_prose("- the workers never print anything after `Loading weights took 34 s`, which is odd")
    for line in (
        "INFO 11-30 10:01:02 [shm_broadcast.py:386] No available shared memory broadcast block found",
        "[rank1]:[E ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
        '  File "/usr/lib/python3.11/threading.py", line 320, in wait',
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error",
        "vllm serve meta-llama/Llama-3-70B --tensor-parallel-size 8 --max-model-len 8192",
        "(raylet) A worker died or was killed while executing a task by an unexpected system error.",
        "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:18:00.0 Off |                    0 |",
        "Thread 4242 (idle): \"MainThread\"",
    ):
        assert not is_prose(line), line


def test_a_written_document_keeps_only_what_a_program_prints_outside_fences() -> None:
    doc = ["# Notes", "", "## What we saw", "The server hangs when NCCL times out on rank 1.",
           "- `ncclRemoteError` (a peer gone) is what we suspect", "", "```",
           "[rank1]: Watchdog caught collective operation timeout", "```",
           "## Next", "We will try again with NCCL_DEBUG=INFO set."]
    assert is_document(doc)
    evidence, prose = split_prose(doc)
    assert "[rank1]: Watchdog caught collective operation timeout" in evidence
    assert "- `ncclRemoteError` (a peer gone) is what we suspect" in prose
    assert "The server hangs when NCCL times out on rank 1." in prose


def test_the_projects_own_readme_gives_no_cause_and_says_it_found_no_evidence() -> None:
    out = subprocess.run([sys.executable, "-m", "hangdoctor", "analyze", str(REPO / "README.md"), "--json"],
                         capture_output=True, text=True, timeout=120)
    import json

    a = json.loads(out.stdout)
    assert a["causes"] == [], [c["id"] for c in a["causes"]]
    assert a["verdict"] == "inconclusive"
    assert "found no evidence" in a["verdict_reason"]


def test_prose_plus_one_stack_reads_the_stack_only() -> None:
    prose = ("We run vLLM with tensor parallel 2 and after an hour of serving it just stops.\n"
             "We suspect NCCL timeouts or maybe an OOM, since the GPUs look busy in nvidia-smi.\n\n")
    a = _analyse(prose + STACK)
    ids = [c["id"] for c in a["causes"]]
    assert ids and ids[0] == "post-load-deadlock", ids
    # nothing the sentences name (NCCL, OOM) was read as evidence
    assert not {"host-oom-or-swap", "gpu-oom"} & set(ids[:3]), ids
    assert a["position"]["waits"].get("ipc-wait")


def test_a_bare_program_message_without_its_prefix_is_still_evidence() -> None:
    line = "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging.\n"
    view = matcher.view_of_evidence(__import__("hangdoctor.evidence.model", fromlist=["Evidence"]).Evidence(
        [analyze_inputs([("paste.txt", line)])]))
    assert any("No available shared memory broadcast block" in x for x in view.lines["text"])
    # the same words quoted inside a sentence of a write-up are a mention, not a log line
    doc = "# Notes\n\n## Symptom\nThe `No available shared memory broadcast block found` warning repeats every minute on both of our nodes.\n"
    view = matcher.view_of_evidence(__import__("hangdoctor.evidence.model", fromlist=["Evidence"]).Evidence(
        [analyze_inputs([("notes.md", doc)])]))
    assert not any("broadcast block" in x for x in view.lines["text"])


def test_the_differential_is_never_empty_when_a_stack_or_a_phase_was_read() -> None:
    stack_only = STACK.replace("multiprocessing/connection.py", "some_lib/rpc.py").replace(
        "_recv_bytes", "poll_for_result").replace("recv (", "rpc_wait (")
    a = _analyse(stack_only + "\nINFO 11-30 10:00:00 Loading safetensors checkpoint shards: 100% 30/30\n", "paste.txt")
    assert a["causes"], "a stack and a log phase were read: the differential may not be empty"
    assert a["position"]["phase"] == "load"
    # where no mechanism spoke, the causes say they are priors and stay at low confidence
    priors = [c for c in a["causes"] if c.get("prior")]
    assert all(c["confidence"] == "low" for c in priors)
    assert a["split"] and a["split"]["observe"]


def test_the_explanation_ranks_above_its_consequence_when_they_nearly_tie() -> None:
    ranked = [{"id": "rank-died", "score": 0.5}, {"id": "shm-exhausted", "score": 0.45}]
    differential.order_by_explanation(ranked, 0.05)
    assert [c["id"] for c in ranked] == ["shm-exhausted", "rank-died"]
    assert ranked[0]["explains"] == ["rank-died"]
    # a weak explanation does not jump a strong consequence
    ranked = [{"id": "rank-died", "score": 0.7}, {"id": "host-oom-or-swap", "score": 0.2}]
    differential.order_by_explanation(ranked, 0.05)
    assert ranked[0]["id"] == "rank-died"


def test_negations_in_prose_speak_against_what_they_deny_and_never_for() -> None:
    text = "We checked dmesg: there is no Xid and the OOM killer never ran.\n" + STACK.replace(
        "_recv_bytes (multiprocessing/connection.py:430)\n    recv (multiprocessing/connection.py:250)",
        "synchronize (torch/cuda/__init__.py:900)")
    a = _analyse(text, "paste.txt")
    check = next(c for c in a["checks"] if c["id"] == "prose.negations")
    assert check["verdict"] == "fired"
    assert {s["cause"] for s in check["signals"]} >= {"gpu-fault", "host-oom-or-swap"}
    assert all(s["weight"] < 0 for s in check["signals"])
    plain = _analyse("We restarted the server twice and it hangs again after an hour of serving.\n" + STACK, "p.txt")
    assert next(c for c in plain["checks"] if c["id"] == "prose.negations")["verdict"] == "cleared"


def test_leave_one_source_out_switches_off_the_knowledge_written_from_a_case() -> None:
    rules = matcher.rules()
    sourced = [r for r in rules if r.get("written_from")]
    if not sourced:  # the admission data is not there: nothing to hold out
        return
    case = sourced[0]["written_from"][0]
    with matcher.holding_out([case]):
        held = {r["id"] for r in matcher.rules()}
    assert sourced[0]["id"] not in held
    assert sourced[0]["id"] in {r["id"] for r in matcher.rules()}


def test_a_risk_factor_alone_never_leads_and_raises_what_the_position_points_to() -> None:
    alone = _analyse("docker run --gpus all --shm-size 64m vllm/vllm-openai --tensor-parallel-size 2\n", "cmd.txt")
    assert "shm-exhausted" not in [c["id"] for c in alone["causes"]]
    assert "shm-exhausted" in [r["id"] for r in alone["risks"]]
    # the same setting beside a symptom of it: the cause leads, the setting speaks for it
    with_symptom = _analyse("docker run --gpus all --shm-size 64m vllm/vllm-openai --tensor-parallel-size 2\n"
                            "node:812:812 [1] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)\n",
                            "cmd.txt")
    assert with_symptom["causes"][0]["id"] == "shm-exhausted", [c["id"] for c in with_symptom["causes"]]


def test_output_pasted_as_a_markdown_table_is_read_as_the_output() -> None:
    from hangdoctor.parsers.unwrap import unwrap

    rows = ["| # | output |", "|---|---|",
            "| 1 | [rank1]:[E ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) |",
            "| 2 | node:812:812 [1] NCCL INFO comm 0x1 rank 1 nranks 2 - Init COMPLETE |",
            "| 3 | a \\| b |"]
    text, said = unwrap("\n".join(rows))
    assert said == ["a Markdown table of output lines"]
    assert text.splitlines()[0].startswith("[rank1]:[E ProcessGroupNCCL.cpp:632]")
    assert text.splitlines()[-1] == "a | b"
    # nvidia-smi's own table is not a Markdown table
    smi = ("+-----------------------------------------------------------------------------+\n"
           "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |\n"
           "|-------------------------------+----------------------+----------------------+\n"
           "|   0  NVIDIA H100 80GB    On   | 00000000:18:00.0 Off |                    0 |\n")
    assert unwrap(smi) == (smi, [])


def test_a_pasted_script_is_context_and_a_traceback_is_not() -> None:
    from hangdoctor.parsers.prose import split_context

    script = ["import torch.distributed as dist", "", "def main():", "    dist.init_process_group('nccl')",
              "    dist.barrier()", "    dist.destroy_process_group()", "", "if __name__ == '__main__':", "    main()"]
    evidence, prose, code = split_context(["$ torchrun --nproc_per_node=2 repro.py"] + script)
    assert code == script and evidence == ["$ torchrun --nproc_per_node=2 repro.py"]
    tb = ["Traceback (most recent call last):", '  File "repro.py", line 7, in main',
          "    dist.destroy_process_group()", '  File "/x/torch/distributed/distributed_c10d.py", line 2100, in destroy_process_group',
          "    _shutdown_backend(pg)", "RuntimeError: NCCL communicator was aborted"]
    assert split_context(tb)[2] == []
    # a record a library prints over several lines (torch's WorkNCCL) is output, not source
    record = ["WorkNCCL(", "  SeqNum=6,", "  OpType=ALLREDUCE,", "  NumelIn=57344,", "  NumelOut=57344,",
              "  Timeout(ms)=600000", ")"]
    assert split_context(record)[2] == []
    # a rule reads a script only when it names the kind
    a = _analyse("\n".join(script) + "\n", "repro.py")
    assert "nccl.teardown-while-peers-wait" not in {
        r for c in a["checks"] if c["id"] == "knowledge.rules" for r in [s.get("refs") for s in c["signals"]] for r in (r or [])}


def test_frames_pasted_without_a_header_are_a_stack_and_an_idle_compile_pool_is_no_compile() -> None:
    text = ("```\n"
            "main          (serve.py:40)\n"
            "step          (engine/loop.py:88)        # the step never returns\n"
            "wait_for_result (engine/loop.py:120)\n"
            "get           (queue.py:171)\n"
            "```\n")
    a = _analyse(text, "stack.txt")
    threads = [t for s in a["stacks"].values() for t in s["threads"]]
    assert threads and threads[0]["wait_kind"] == "ipc-wait"
    # outermost first as pasted: the end that is a known wait point is taken as the innermost
    assert threads[0]["frames"][0]["name"] == "get"
    from hangdoctor.evidence.stacks import Frame, classify

    pool = [Frame("_recv_msg", "torch/_inductor/compile_worker/subproc_pool.py", 53),
            Frame("_read_thread", "torch/_inductor/compile_worker/subproc_pool.py", 161),
            Frame("run", "threading.py", 953)]
    assert classify(pool, active=False)[0] == "ipc-wait"


def test_a_log_pasted_newest_first_is_read_oldest_first() -> None:
    from hangdoctor.parsers.unwrap import unwrap

    lines = [f"Apr 03 22:48:{s:02d} host ollama[7]: line {s}" for s in (50, 40, 30, 20, 10)]
    text, said = unwrap("\n".join(lines))
    assert "newest-first order (read oldest first)" in said
    assert text.splitlines()[-1].endswith("line 50")
    assert "newest-first order (read oldest first)" not in unwrap("\n".join(lines[::-1]))[1]  # already oldest first


def test_where_the_poster_says_it_stops_is_context_at_a_lower_weight() -> None:
    text = ("Our server hangs while loading the weights from the NFS share, every time.\n"
            "INFO 11-30 10:00:00 [api_server.py:100] vLLM API server version 0.11.0\n")
    a = _analyse(text, "report.txt")
    assert a["position"]["phase"] == "load"
    top = a["causes"][0]
    assert top["prior"] and "the poster says" in top["summary"] and top["score"] < 0.2
    # a write-up (a document with headings) is never read for it
    doc = ("# How hangs look\n\n## Loading\nA server that hangs while loading the weights looks idle.\n\n"
           "## Serving\nA server stuck in the middle of a request keeps its health endpoint green.\n")
    assert _analyse(doc, "notes.md")["causes"] == []


def test_a_report_with_headings_is_read_for_where_it_stops_and_a_write_up_is_not() -> None:
    from hangdoctor.parsers.prose import is_report

    report = ("## What happened\n"
              "We start two nodes with TP=2 and our boot freezes at NCCL communicator init on both.\n"
              "## What we tried\n"
              "I set NCCL_DEBUG=INFO and we see the channels set up, then nothing else is printed.\n")
    assert is_report(report.splitlines())
    a = _analyse(report, "issue.md")
    assert a["position"]["phase"] == "comm-init", a["position"]
    assert not is_report((REPO / "README.md").read_text().splitlines())
