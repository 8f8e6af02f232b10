"""The Markdown rendering: order, escaping for GitHub, fences, and the size budget."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hangdoctor.report.markdown import fence, md_text
from hangdoctor.report.render import render_markdown

SAMPLES = Path(__file__).parent / "samples_analysis"
GITHUB_LIMIT_CHARS = 65536


def load(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def split_fences(md: str) -> tuple[str, list[str]]:
    """Split Markdown as CommonMark does: (text outside fenced code, list of code contents).

    A fence opened by N backticks closes only at a line of at least N backticks.
    """
    outside: list[str] = []
    blocks: list[str] = []
    current: list[str] | None = None
    width = 0
    for line in md.split("\n"):
        if current is None:
            opener = re.match(r"^(`{3,})[^`]*$", line)
            if opener:
                current, width = [], len(opener.group(1))
            else:
                outside.append(line)
        elif re.fullmatch(rf"`{{{width},}}\s*", line):
            blocks.append("\n".join(current))
            current = None
        else:
            current.append(line)
    assert current is None, "a code fence was never closed"
    return "\n".join(outside), blocks


def table_rows(md: str) -> list[list[str]]:
    """Cells of every table row, split on pipes that are not backslash-escaped."""
    rows = []
    for line in md.split("\n"):
        if line.startswith("| ") and line.endswith(" |"):
            rows.append(re.split(r"(?<!\\)\|", line)[1:-1])
    return rows


def test_deadlock_markdown_order_and_content():
    md = render_markdown(load("deadlock"))
    headings = re.findall(r"^## (.*)$", md, re.M)
    assert headings == ["Likely causes", "Ranks (5)", "Stacks grouped by signature", "GPUs",
                        "Host memory", "Log tail", "Ruled out", "Not checked", "Collection",
                        "Checks (3 fired, 1 cleared, 1 skipped, 1 errored)"]  # fmt: skip
    causes = re.findall(r"^### \d+\. `([^`]+)`", md, re.M)
    assert causes == ["post-load-deadlock", "frontend-hang", "rendezvous-stall"]
    assert "<details open><summary>Evidence: 4 for, 1 against</summary>\n\n|" in md
    outside, blocks = split_fences(md)
    assert "py-spy dump --native --pid 4243\npy-spy dump --native --pid 4242" in blocks[1]
    assert any("_recv (multiprocessing/connection.py:395)" in b for b in blocks)
    assert any("» (VllmWorker rank=0 pid=4243) INFO [default_loader.py:262]" in b for b in blocks)
    assert "| gpu-node-7 | stacks:4243 | ok | 0.008 |" in md  # the manifest table
    assert "Shortened" not in md


def test_odd_rank_is_marked():
    md = render_markdown(load("nccl_desync"))
    rows = {r[2].strip(): r[0].strip() for r in table_rows(md) if len(r) == 14}
    assert rows["9104"] == "**odd**"
    assert rows["9101"] == rows["9102"] == rows["9103"] == ""
    assert "**rank 3** (pid 9104): in broadcast while ranks 0-2 are in all\\_reduce" in md
    assert "<details open><summary>ODD ONE OUT · 1 × rank 3 · collective:broadcast" in md


def test_failed_host_and_its_error():
    md = render_markdown(load("multihost"))
    assert "| node-b | – | failed | 10.0 | – | ssh: connecting to node-b:22 timed out" in md
    assert "- host node-b could not be reached: ranks 2-3 are unseen" in md


def test_hostile_markdown_has_no_live_html():
    md = render_markdown(load("hostile"))
    outside, blocks = split_fences(md)
    # Outside code: the escaped forms, and no raw tag but our own details/summary/br.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in outside
    # (the URL made inert with a WORD JOINER: GitHub links no bare URL of the data, issue 15)
    assert "\"&gt;&lt;img src=x onerror=fetch('http\u2060://127.0.0.1:9/x')&gt;" in outside
    assert set(re.findall(r"</?([a-zA-Z][\w-]*)", outside)) <= {"details", "summary", "br"}
    # <summary> lines are raw HTML on GitHub: entity-escaped, quotes included.
    assert "&quot;&gt;&lt;img src=x onerror=fetch(&#x27;http\u2060://127.0.0.1:9/x&#x27;)&gt;" in md
    # Pre-escaped entities and template syntax in data stay literal.
    assert "&amp;lt;b&amp;gt;" in outside and "{{ 7\\*7 }}" in outside
    # Markdown syntax in data is neutralised.
    assert "\\[link\\](javascript:alert(1))" in outside and "\\_under\\_" in outside
    # Raw forms only inside code blocks, where GitHub shows them as text; backtick runs in the
    # data did not close their fence early.
    assert "<script>alert(1)</script>" not in outside
    assert any(b.endswith("``` ```` `````` x (javascript:alert(1):2)") for b in blocks)
    assert any("```` fence breaker ````` and a | pipe" in b for b in blocks)
    assert any("echo '<script>alert(1)</script>' ````` `" in b for b in blocks)
    # A pipe in data does not add table columns.
    for row in table_rows(md):
        assert len(row) in (2, 3, 5, 6, 8, 14), row
    # Control characters (terminal escapes) do not survive.
    assert "\x1b" not in md and "\x07" not in md


def test_md_text_and_fence_helpers():
    assert md_text("a|b") == "a\\|b"
    assert md_text("<b>&amp;</b>") == "&lt;b&gt;&amp;amp;&lt;/b&gt;"
    assert md_text("# title", start=True) == "\\# title"
    assert md_text("1. item", start=True) == "1\\. item"
    assert md_text("line\nbreak") == "line break"
    assert fence("a ```` b").startswith("`````\n")
    assert fence("plain") == "```\nplain\n```\n"


def _big(n_ranks: int = 64) -> dict[str, Any]:
    """A 64-rank analysis with long strings everywhere, far over any limit in full."""
    a = load("nccl_desync")
    base = a["ranks"][0]
    a["ranks"] = [
        dict(base, pid=20000 + r, rank=r, top_frame=f"frame_{r} (" + "pkg/" * 30 + "x.py:1)")
        for r in range(n_ranks)
    ]
    a["ranks"][37]["wait_kind"] = "collective:broadcast"
    a["causes"][0]["odd_ones_out"] = [{"pid": 20037, "rank": 37, "why": "in broadcast"}]
    a["causes"][0]["evidence"] *= 20
    a["stack_groups"] = [
        dict(a["stack_groups"][0], signature=f"{g:08x}", pids=[20000 + g], ranks=[g],
             frames=a["stack_groups"][0]["frames"] * 25, odd=g == 37)
        for g in range(n_ranks)
    ]  # fmt: skip
    a["log"]["tail"] = ["x" * 300] * 400
    a["collection"] *= 60
    a["checks"] *= 30
    return a


@pytest.mark.parametrize("max_bytes", [60000, 20000, 8000])
def test_64_ranks_fit_the_budget_least_important_first(max_bytes: int):
    md = render_markdown(_big(), max_bytes=max_bytes)
    assert len(md.encode("utf-8")) <= max_bytes
    assert len(md) < GITHUB_LIMIT_CHARS
    assert "Shortened to fit" in md
    split_fences(md)  # every fence still closed
    assert md.count("<details") == md.count("</details>")
    # The most important parts survive; the least important give way first.
    assert "### 1. `nccl-desync`" in md
    note = re.search(r"Shortened to fit \d+ bytes: ([^.]*) cut or left out", md).group(1)
    assert note.split(", ")[0] == "checks"
    if max_bytes == 60000:
        assert "## Ranks (64)" in md and "**odd**" in md


def test_huge_single_strings_are_clipped():
    a = load("healthy")
    a["headline"] = "<" * 200_000
    a["verdict_reason"] = "|" * 200_000
    md = render_markdown(a, max_bytes=60000)
    assert len(md.encode("utf-8")) <= 60000
    assert "<<" not in md
