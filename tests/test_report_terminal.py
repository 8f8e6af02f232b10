"""The terminal summary: verdict, top three causes, where the report went, colour on request."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hangdoctor.report.render import render_terminal

SAMPLES = Path(__file__).parent / "samples_analysis"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def test_verdict_top_causes_and_paths():
    out = render_terminal(load("deadlock"), written=["/tmp/r.html", "/tmp/r.json"])
    lines = out.splitlines()
    assert lines[0].startswith("hangdoctor: HUNG — alive, port 8000 not listening")
    ids = [m.group(1) for m in (re.match(r"\s+\d\. (\S+)\s+(\d\.\d\d)", ln) for ln in lines) if m]
    assert ids == ["post-load-deadlock", "frontend-hang", "rendezvous-stall"]
    assert "  1. post-load-deadlock  0.86 high    4 of 4 workers hold" in out
    assert lines[-2:] == ["  report: /tmp/r.html", "  report: /tmp/r.json"]
    assert "  next: py-spy dump --native --pid 4243" in lines
    assert "\x1b" not in out


def test_only_three_causes_and_the_odd_rank():
    a = load("nccl_desync")
    a["causes"] = a["causes"] * 3
    out = render_terminal(a)
    assert len(re.findall(r"^\s+\d\. ", out, re.M)) == 3
    assert "… 3 more in the report" in out
    assert "odd one out: rank 3 (pid 9104)" in out


def test_colour_only_when_asked_and_data_cannot_inject_escapes():
    a = load("hostile")
    a["headline"] = "\x1b[2J\x1b]0;pwned\x07 cleared your screen"
    a["causes"][0]["summary"] = "\x1b[31mred\x1b[0m"
    plain = render_terminal(a, color=False)
    assert "\x1b" not in plain and "\x07" not in plain
    assert "?[2J?]0;pwned? cleared your screen" in plain
    coloured = render_terminal(a, color=True)
    assert coloured.startswith("hangdoctor: \x1b[1;31mHUNG\x1b[0m")
    # Every escape in the coloured output is one of ours (SGR colour codes only).
    assert ANSI.sub("", coloured).count("\x1b") == 0
    assert ANSI.sub("", coloured) == plain


def test_width_is_respected():
    out = render_terminal(load("nccl_desync"), width=60)
    assert all(len(line) <= 60 for line in out.splitlines()), out


def test_healthy_summary():
    out = render_terminal(load("healthy"))
    assert out.splitlines()[0] == (
        "hangdoctor: HEALTHY — port 30000 answered /health in 12 ms and GET /v1/models in 15 ms"
    )
    assert "no cause scored above the threshold" in out


def _long_next(a: dict[str, Any]) -> dict[str, Any]:
    a = dict(a)
    a["next_command"] = ("hangdoctor diagnose gpu-node-with-a-long-name --pid 46294 --native --window 10 "
                         "-o /var/tmp/hang-reports/report.html   # native frames show where CUDA/NCCL waits")  # fmt: skip
    return a


def test_no_width_cuts_nothing():
    a = _long_next(load("deadlock"))
    a["causes"][1]["summary"] = "x " * 200
    out = render_terminal(a, width=None)
    assert "…" not in out and "cut at" not in out
    assert "  next: " + " ".join(a["next_command"].split()) in out.splitlines()
    assert ("x " * 200).strip() in out
    assert "not collected: http" not in out  # a port that does not answer is evidence, not a gap


def test_the_next_command_wraps_and_is_never_cut():
    a = _long_next(load("deadlock"))
    out = render_terminal(a, width=60)
    lines = out.splitlines()
    assert all(len(x) <= 60 for x in lines), out
    at = next(i for i, x in enumerate(lines) if x.startswith("  next: "))
    assert lines[at] == "  next: # native frames show where CUDA/NCCL waits"
    body = []
    for x in lines[at + 1 :]:
        body.append(x.strip().removesuffix("\\").strip())
        if not x.endswith("\\"):
            break
    assert " ".join(body) == a["next_command"].split("   #")[0]


def test_cut_rows_say_how_to_see_them_whole():
    a = load("deadlock")
    a["causes"][1]["summary"] = "a long piece of evidence " * 10
    out = render_terminal(a, width=80)
    assert "(cut at 80 columns: --wide or -o report.html shows all)" in out
    assert all(len(x) <= 80 for x in out.splitlines())


def test_facts_without_a_cause_are_shown():
    a = load("healthy")
    a["checks"] = [{"id": "process.alive", "verdict": "fired", "signals": [
        {"cause": None, "weight": 0.0, "text": "pid 7 [python3] is stopped (state T: SIGSTOP or a debugger)"},
        {"cause": "rank-died", "weight": 0.7, "text": "worker pid 8 exited"}]}]  # fmt: skip
    out = render_terminal(a)
    assert "  ! pid 7 [python3] is stopped (state T: SIGSTOP or a debugger)" in out
    assert "worker pid 8 exited" not in out  # a cause's evidence is in its row, not a note
