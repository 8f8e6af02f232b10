"""Pastes arrive wrapped (quoted, prefixed, coloured): the wrapping comes off before the
recognisers run, and only when it is really on the lines (hangdoctor/parsers/unwrap.py)."""

from __future__ import annotations

import pytest

from hangdoctor.evidence.model import Evidence
from hangdoctor.knowledge import matcher, packs
from hangdoctor.parsers.assemble import analyze_inputs
from hangdoctor.parsers.unwrap import unwrap

WRAPS = {
    "quote": lambda ln: "> " + ln,
    "compose": lambda ln: "vllm-1  | " + ln if ln else ln,
    "compose-colour": lambda ln: "\x1b[36mvllm-1  |\x1b[0m " + ln if ln else ln,
    "kubectl": lambda ln: "2026-11-30T10:01:02.123456789Z " + ln if ln else ln,
    "journald": lambda ln: "Nov 30 10:01:02 gpu-node-3 python3[46294]: " + ln if ln else ln,
    "quote-kubectl": lambda ln: "> 2026-11-30T10:01:02Z " + ln,
}


def wrapped(text: str, how: str) -> str:
    return "\n".join(WRAPS[how](ln) for ln in text.rstrip("\n").split("\n")) + "\n"


def _rules_matched(text: str) -> set[str]:
    view = matcher.view_of_evidence(Evidence([analyze_inputs([("sample.txt", text)])]))
    return {m.id for m in matcher.evaluate(matcher.rules() + matcher.known_issues(), view)}


SAMPLES = packs.BUILTIN.samples("rules") + packs.BUILTIN.samples("known_issues")


@pytest.mark.parametrize("how", sorted(WRAPS))
def test_every_rule_sample_reads_the_same_when_wrapped(how: str) -> None:
    """Every knowledge sample (rules and known issues; fires / near miss) gives the same answer
    in every wrapping."""
    wrong = []
    for kind, rid, text in SAMPLES:
        hit = rid in _rules_matched(wrapped(text, how))
        if hit != (kind == "fires"):
            wrong.append(f"{kind}:{rid}")
    assert wrong == [], wrong


def test_ansi_colours_come_off() -> None:
    text, said = unwrap("\x1b[1;31mERROR\x1b[0m 11-30 10:01:02 [core.py:1] EngineCore died\n")
    assert text.startswith("ERROR 11-30") and said == ["terminal colour codes"]


def test_kernel_lines_keep_their_journald_prefix() -> None:
    text, said = unwrap(
        "Nov 30 10:01:02 node3 kernel: NVRM: Xid (PCI:0000:41:00): 79, GPU has fallen off the bus.\n"
        "Nov 30 10:01:03 node3 python3[46294]: INFO 11-30 10:01:03 [engine.py:1] waiting\n"
        "Nov 30 10:01:04 node3 python3[46294]: INFO 11-30 10:01:04 [engine.py:1] waiting\n"
    )
    lines = text.splitlines()
    assert lines[0].startswith("Nov 30 10:01:02 node3 kernel: NVRM: Xid")
    assert lines[1].startswith("INFO 11-30") and said == ["journald / syslog prefixes"]


def test_tgi_native_timestamps_are_not_a_kubectl_wrapper() -> None:
    """TGI's own lines start with an RFC 3339 time and two spaces: they are the log, not a
    wrapper, and stay as they are."""
    tgi = ("2024-05-01T10:00:00.123456Z  INFO text_generation_launcher: Starting shard rank=0\n"
           "2024-05-01T10:00:09.123456Z  INFO text_generation_launcher: Waiting for shard to be ready... rank=0\n"
           "2024-05-01T10:00:19.123456Z  INFO text_generation_launcher: Waiting for shard to be ready... rank=0\n")
    assert unwrap(tgi) == (tgi, [])
    # kubectl --timestamps on a TGI log: only kubectl's time comes off
    text, said = unwrap(wrapped(tgi, "kubectl"))
    assert text == tgi and said == ["kubectl --timestamps times"]


def test_a_few_prefixed_lines_are_not_a_wrapper() -> None:
    prose = ("The server hangs after loading.\n"
             "> it worked in 0.5\n"
             "GPU | utilisation stays at 0\n"
             "Loading weights took 34.2 seconds\n"
             "then nothing for an hour\n")
    assert unwrap(prose) == (prose, [])


def test_the_snapshot_says_what_came_off() -> None:
    snap = analyze_inputs([("comment.md", wrapped("INFO a\nINFO b\nINFO c\n", "quote"))])
    assert snap["pasted"][0]["unwrapped"] == ["a Markdown quote ('> ')"]
    assert any("read without its wrapping" in n for n in snap["notes"]), snap["notes"]


def test_a_fence_around_a_whole_post_with_fences_inside_comes_off() -> None:
    post = ("### Describe the bug\nThe job hangs at the first barrier on two nodes.\n"
            "```python\nimport torch.distributed as dist\ndist.init_process_group('nccl')\ndist.barrier()\n```\n")
    text, said = unwrap("```\n" + post + "```\n")
    assert text.split("\n")[0] == "### Describe the bug" and any("code fence" in s for s in said)
    # one fenced log (no fence inside it) is a block, not a wrapper: it stays as it is
    log = "```\nINFO starting\nINFO loading weights\n```\n"
    text, said = unwrap(log)
    assert text == log and not any("code fence" in s for s in said)


def test_an_indented_block_is_read_at_column_zero() -> None:
    dump = ('Thread 94384 (idle): "MainThread"\n    run (uvloop/__init__.py:69)\n'
            'Process 96637: VLLM::EngineCore\nThread 96637 (idle): "MainThread"\n    wait (threading.py:320)\n'
            '    get (queue.py:171)\n')
    text, said = unwrap("".join("    " + x + "\n" for x in dump.splitlines()))
    assert text.rstrip("\n") == dump.rstrip("\n") and any("indent" in s for s in said)
    ev = Evidence([analyze_inputs([("post.md", "".join("    " + x + "\n" for x in dump.splitlines()))])])
    assert len([t for ps in ev.stacks.values() for t in ps.threads]) == 2  # two threads, not one
    # a text whose lines do not all share the indent keeps it
    mixed = "INFO start\n    detail line\n"
    assert unwrap(mixed)[0] == mixed
