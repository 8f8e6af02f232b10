"""Hostile input: every parser survives empty, binary, cut, spliced and random text, and raises
nothing but InputError (property tests mix random text with fragments of the real samples)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hangdoctor.evidence.kernel import parse_kernel
from hangdoctor.evidence.logs import parse_log
from hangdoctor.parsers import InputError
from hangdoctor.parsers.assemble import analyze_inputs, read_input
from hangdoctor.parsers.collect_env import parse_collect_env
from hangdoctor.parsers.detect import sniff_json_document, split_segments
from hangdoctor.parsers.env import parse_env
from hangdoctor.parsers.faulthandler import parse_faulthandler
from hangdoctor.parsers.nvidia_smi import parse_nvidia_smi_q, parse_nvidia_smi_table
from hangdoctor.parsers.ps import parse_ps
from hangdoctor.parsers.pyspy_json import parse_pyspy_json
from hangdoctor.parsers.pyspy_text import parse_pyspy_text
from hangdoctor.parsers.traceback import dumps_from_tracebacks, parse_tracebacks

SAMPLES = Path(__file__).parent / "samples"
SAMPLE_LINES = sorted(
    {
        line
        for p in SAMPLES.iterdir()
        if p.suffix != ".py" and p.name != "README.md"
        for line in p.read_text().splitlines()
    }
)

PARSERS: dict[str, Callable[[str], object]] = {
    "log": lambda t: parse_log(t.splitlines()),
    "log-stream": lambda t: parse_log(iter(t.split("\n")), 5, 2),
    "kernel": lambda t: parse_kernel(t.splitlines()),
    "pyspy-text": lambda t: parse_pyspy_text(t.splitlines()),
    "pyspy-json": parse_pyspy_json,
    "faulthandler": lambda t: parse_faulthandler(t.splitlines()),
    "traceback": lambda t: dumps_from_tracebacks(parse_tracebacks(t.splitlines())),
    "nvidia-smi": lambda t: parse_nvidia_smi_table(t.splitlines()),
    "nvidia-smi-q": lambda t: parse_nvidia_smi_q(t.splitlines()),
    "ps": lambda t: parse_ps(t.splitlines()),
    "env": lambda t: parse_env(t.splitlines()),
    "collect-env": lambda t: parse_collect_env(t.splitlines()),
    "detect": split_segments,
    "sniff": sniff_json_document,
    "assemble": lambda t: analyze_inputs([("fuzz.txt", t)]),
}

# random text, real lines, and real lines cut at random places, in any order
_line = st.one_of(
    st.text(max_size=80),
    st.sampled_from(SAMPLE_LINES),
    st.tuples(st.sampled_from(SAMPLE_LINES), st.integers(0, 200)).map(lambda x: x[0][: x[1]]),
    st.sampled_from(["", "[", "{", "]", "}", "[{", '{"schema_version"', "  ", "\t", "\r", "\x00"]),
)
TEXTS = st.lists(_line, max_size=40).map("\n".join)


def _call(fn: Callable[[str], object], text: str) -> None:
    try:
        fn(text)
    except InputError:
        pass


@pytest.mark.parametrize("name", sorted(PARSERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_random_text_never_raises(name: str, text: str) -> None:
    _call(PARSERS[name], text)


def _hostile_texts() -> dict[str, str]:
    rnd = random.Random(1234)
    junk = bytes(rnd.randrange(256) for _ in range(20000)).decode("latin-1")
    dump = (SAMPLES / "pyspy_desync_4ranks.txt").read_text()
    fault = (SAMPLES / "faulthandler_threads.txt").read_text()
    log = (SAMPLES / "vllm_load_then_silence.log").read_text()
    return {
        "empty": "",
        "blank": "\n\n   \n\t\n",
        "binary": junk,
        "nul": "\x00" * 1000,
        "cut-dump": dump[: len(dump) // 3],
        "cut-json": (SAMPLES / "pyspy_desync_rank3.json").read_text()[:777],
        "spliced": dump[:500] + fault[100:900] + log[200:] + dump[1000:],
        "huge-line": "Loading weights " + "x" * 2_000_000 + " took 1 seconds",
        "huge-frame": 'Process 1: py\nThread 1 (idle): "MainThread"\n    '
        + "f" * 500_000
        + " (a.py:1)\n",
        "deep-json": "[" * 100_000,
        "only-headers": "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND\n" * 50,
        "table-art": "+---+\n|" * 1000,
        "cr-storm": "\r" * 10000
        + "Loading safetensors checkpoint shards: 5% Completed | 1/20\r" * 300,
    }


@pytest.mark.parametrize("case", sorted(_hostile_texts()))
def test_hostile_inputs_every_parser(case: str) -> None:
    text = _hostile_texts()[case]
    for name, fn in PARSERS.items():
        try:
            fn(text)
        except InputError:
            pass
        except Exception as e:  # pragma: no cover - the message names the culprit
            raise AssertionError(f"{name} raised on {case}: {e!r}") from e


def test_hostile_snapshot_is_sane() -> None:
    t = _hostile_texts()
    snap = analyze_inputs([(k, v) for k, v in t.items()])
    assert snap["origin"] == "pasted" and len(snap["pasted"]) == len(t)
    assert any("empty" in n for n in snap.get("notes", []))
    assert all(len(line) < 20_000 for line in snap.get("log", {}).get("tail", []))
    cut = analyze_inputs([("cut", t["cut-dump"])])
    assert all(int(pid) > 0 for pid in cut["stacks"])


def test_binary_file_reads(tmp_path: Path) -> None:
    p = tmp_path / "core"
    p.write_bytes(os.urandom(300_000))
    name, text = read_input(str(p))
    assert "\x00" not in text
    analyze_inputs([(name, text)])
