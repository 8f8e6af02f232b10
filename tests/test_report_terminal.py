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
