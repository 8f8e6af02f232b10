"""HTML and JSON renderings of the analysis model, write_report, and the SVG sparklines."""

from __future__ import annotations

import copy
import json
import math
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from hangdoctor.report.render import (
    render_html,
    render_json,
    render_markdown,
    render_terminal,
    sparkline_svg,
    write_report,
)

SAMPLES = Path(__file__).parent / "samples_analysis"
SAMPLE_NAMES = sorted(p.stem for p in SAMPLES.glob("*.json"))

ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
ESCAPED_IMG = "&#34;&gt;&lt;img src=x onerror=fetch(&#39;http://127.0.0.1:9/x&#39;)&gt;"


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "div", "header", "span", "h1", "h2", "h3",
    "h4", "p", "nav", "a", "section", "code", "ul", "li", "b", "i", "table", "thead", "tbody",
    "tr", "th", "td", "svg", "rect", "line", "polyline", "details", "summary", "ol", "pre",
    "br", "footer",
}  # fmt: skip


def _structure(page: str) -> tuple[set[str], list[tuple[str, str]]]:
    """The tag names and (attribute, value) pairs of ``page`` as an HTML parser sees them."""
    tags: set[str] = set()
    attrs: list[tuple[str, str]] = []

    class Collector(HTMLParser):
        def handle_starttag(self, tag: str, items: list[tuple[str, str | None]]) -> None:
            tags.add(tag)
            attrs.extend((k, v or "") for k, v in items)

    Collector().feed(page)
    return tags, attrs


def load(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def synthetic(n_ranks: int = 64, hosts: int = 8, samples: int = 20) -> dict[str, Any]:
    """A big analysis: ``n_ranks`` ranks over ``hosts`` hosts, rank 37 the odd one out."""
    a = load("deadlock")
    per_host = n_ranks // hosts
    frames = [
        {"name": f"fn_{i}", "file": f"pkg/module_{i}.py", "line": 100 + i, "native": i % 7 == 0}
        for i in range(30)
    ]
    a["hosts"] = [
        {"name": f"node-{h}", "hostname": f"node-{h}.dc", "kernel": "Linux 6.8", "root_pids": [1000],
         "collected_at": "2026-11-29T19:30:03Z", "duration_s": 2.5, "status": "ok", "error": None}
        for h in range(hosts)
    ]  # fmt: skip
    a["ranks"], a["gpus"], a["collection"], a["stacks"] = [], [], [], {}
    for r in range(n_ranks):
        host, pid = f"node-{r // per_host}", 2000 + r
        util = [0 if r != 37 else 100] * samples
        power = [117.0 + (r % 5) * 0.3 + (i % 3) * 0.1 for i in range(samples)]
        a["ranks"].append(
            {"host": host, "pid": pid, "ppid": 1000, "rank": r, "role": "worker",
             "name": f"worker-{r}", "cmdline": f"python serve.py --rank {r} " + "--flag x " * 20,
             "gpu": r % per_host, "state": "S", "wchan": "anon_pipe_read", "cpu_pct": 0.0,
             "cpu_delta_s": 0.0, "rss_mib": 3000.0, "threads": 57, "gpu_util_pct": util,
             "gpu_power_w": power, "gpu_mem_mib": 20480,
             "top_frame": "_recv (multiprocessing/connection.py:395)",
             "wait_kind": "ipc-wait" if r != 37 else "collective:broadcast",
             "signature": "ab12cd34" if r != 37 else "ffff0000", "alive": True}
        )  # fmt: skip
        a["gpus"].append(
            {"host": host, "index": r % per_host, "name": "NVIDIA H200", "mem_total_mib": 143771,
             "util_pct": util, "power_w": power, "mem_used_mib": [21500] * samples,
             "power_limit_w": 700.0, "pids": [pid], "reading": "idle"}
        )  # fmt: skip
        a["stacks"][str(pid)] = [
            {"thread": name, "tid": pid * 10 + t, "active": False, "frames": frames}
            for t, name in enumerate(["MainThread", "Thread-1", "pt_nccl_watchdg"])
        ]
        for source in ("stacks", "proc", "nvml"):
            a["collection"].append(
                {"host": host, "source": f"{source}:{pid}", "status": "ok", "duration_s": 0.008,
                 "detail": None, "remedy": None}
            )  # fmt: skip
    pids = [2000 + r for r in range(n_ranks) if r != 37]
    a["stack_groups"] = [
        {"signature": "ab12cd34", "count": len(pids), "pids": pids,
         "ranks": [r for r in range(n_ranks) if r != 37], "wait_kind": "ipc-wait", "odd": False,
         "frames": frames},
        {"signature": "ffff0000", "count": 1, "pids": [2037], "ranks": [37],
         "wait_kind": "collective:broadcast", "odd": True, "frames": frames[:12]},
    ]  # fmt: skip
    a["causes"][0]["odd_ones_out"] = [{"pid": 2037, "rank": 37, "why": "in broadcast"}]
    a["causes"][0]["evidence"] *= 5
    a["log"]["tail"] = [f"INFO line {i} " + "x" * 120 for i in range(200)]
    a["checks"] = a["checks"] * 4
    return a


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_sample_renders_in_every_format(name: str, tmp_path: Path):
    analysis = load(name)
    page = render_html(analysis)
    assert page.startswith("<!doctype html>")
    assert f'class="banner v-{analysis["verdict"]}"' in page
    assert json.loads(render_json(analysis)) == analysis
    md = render_markdown(analysis)
    assert md.startswith(f"# hangdoctor: {analysis['verdict'].upper()}")
    assert render_terminal(analysis).startswith(f"hangdoctor: {analysis['verdict'].upper()}")
    for suffix, fmt in ((".html", "html"), (".md", "markdown"), (".json", "json")):
        assert write_report(analysis, str(tmp_path / f"r{suffix}")) == fmt


def test_deadlock_html_order_and_content():
    page = render_html(load("deadlock"))
    # Sections in the agreed order.
    order = ['id="verdict"', 'id="causes"', 'id="ranks"', 'id="stacks"', 'id="gpus"', 'id="log"',
             'id="ruled"', 'id="collection"', 'id="checks"']  # fmt: skip
    positions = [page.index(marker) for marker in order]
    assert positions == sorted(positions)
    # Causes in rank order, each with its score bar.
    ids = ["post-load-deadlock", "frontend-hang", "rendezvous-stall"]
    causes = page[page.index('id="causes"') : page.index('id="ranks"')]
    assert [causes.index(f"<code>{i}</code>") for i in ids] == sorted(
        causes.index(f"<code>{i}</code>") for i in ids
    )
    assert 'style="width: 86.0%"' in causes
    assert "by <code>stacks</code>" in causes  # evidence names the check that said it
    assert '<code class="cmd">py-spy dump --native --pid 4243</code>' in causes
    # Ranks table with sparklines; GPU charts; log event highlighted; errored check folded.
    assert page.count('<svg class="spark"') == 8
    assert page.count('<svg class="chart"') == 4
    assert '<span class="l hit"><span class="n">8</span>' in page
    assert '<summary class="small">traceback</summary><pre class="small">Traceback' in page
    assert "KeyError: &#39;SeqNum&#39;" in page
    # Collection: failed source with its remedy, intrusion, weakened note.
    assert "run as root or set kernel.dmesg_restrict=0" in page
    assert "py-spy paused each Python process" in page
    assert "<b>Weakened:</b> no kernel log" in page
    # Self-contained: no scripts, no external references, a CSP that forbids both.
    assert "<script" not in page.lower()
    assert "default-src 'none'" in page
    refs = re.findall(r"""(?:src|href|url)\s*[=(]\s*["']?([^"' )>]+)""", page)
    assert all(r.startswith("#") for r in refs), refs


def test_nccl_desync_highlights_the_odd_rank():
    page = render_html(load("nccl_desync"))
    rows = re.findall(r'<tr class="([^"]*)"[^>]*>\s*<td class="nw">trainer-3</td>\s*'
                      r'<td class="num"[^>]*>(\d+)</td>', page)  # fmt: skip
    assert dict((pid, cls) for cls, pid in rows) == {
        "9101": "", "9102": "", "9103": "", "9104": "odd",
    }  # fmt: skip
    assert "in broadcast while ranks 0-2 are in all_reduce" in page
    # The odd stack group is highlighted and unfolded; the ordinary one is not highlighted.
    assert re.search(r'<details class="group odd" open>\s*<summary><span class="pill odd">', page)
    assert '<details class="group" open>' in page
    assert "NCCL_P2P_DISABLE" in page


def test_multihost_shows_the_failed_host_with_its_error():
    page = render_html(load("multihost"))
    row = re.search(r'<tr class="failed"><td>node-b</td>.*?</tr>', page, re.S)
    assert row and "ssh: connecting to node-b:22 timed out after 10.0 s" in row.group(0)
    assert '<span class="pill failed">failed</span>' in row.group(0)
    assert "v-inconclusive" in page
    assert 'id="log"' not in page  # no log section when there is no log


def test_healthy_says_no_cause():
    page = render_html(load("healthy"))
    assert "No cause scored above the threshold" in page
    assert "v-healthy" in page


def test_hostile_strings_are_escaped_in_html():
    page = render_html(load("hostile"))
    assert ESCAPED_SCRIPT in page
    assert ESCAPED_IMG in page
    assert page.count(ESCAPED_SCRIPT) >= 20
    lowered = page.lower()
    assert "<script" not in lowered
    assert "<img" not in lowered
    # Parsed as a browser would: only our own tags, no handlers, links only within the page.
    tags, attrs = _structure(page)
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    assert not [a for a in attrs if a[0].startswith("on")]
    assert all(v.startswith("#") for k, v in attrs if k in ("href", "src", "action"))
    # Every style attribute holds numbers we wrote; every SVG coordinate is a number.
    styles = re.findall(r'style="([^"]*)"', page)
    assert styles and all(
        re.fullmatch(r"(width: [\d.]+%|color: #[0-9a-f]{6}|margin-top:6px|padding: 8px 14px 0)", s)
        for s in styles
    ), styles
    for points in re.findall(r'points="([^"]*)"', page):
        assert re.fullmatch(r"[\d.]+,[\d.]+( [\d.]+,[\d.]+)*", points)
    # A non-number score becomes 0, a hostile confidence a known class.
    assert 'class="cause conf-low"' in page
    # {{ 7*7 }} in data stays data.
    assert "{{ 7*7 }}" in page and ">49<" not in page


def test_sparkline_draws_only_numbers():
    svg = sparkline_svg([0, 50, "<script>", float("nan"), 100, None, True], 100, 20, 100)
    assert "<script" not in svg and "nan" not in svg.lower()
    points = re.search(r'points="([^"]*)"', svg).group(1).split()
    assert len(points) == 3  # 0, 50, 100: the rest dropped
    ys = [float(p.split(",")[1]) for p in points]
    assert ys[0] == 18.0 and ys[2] == 2.0 and math.isclose(ys[1], 10.0)  # 0 bottom, max top
    empty = sparkline_svg([], 80, 18)
    assert "polyline" not in empty and 'aria-label="0 samples"' in empty
    assert 'stroke="#0969da"' in sparkline_svg([1, 2], color='red" onload="x')


def test_user_template_dirs_come_first(tmp_path: Path):
    (tmp_path / "_banner.html").write_text(
        '<div id="verdict" class="custom">{{ v.verdict }} {{ "<b>" }}</div>', encoding="utf-8"
    )
    page = render_html(load("deadlock"), template_dirs=[str(tmp_path)])
    assert '<div id="verdict" class="custom">hung &lt;b&gt;</div>' in page  # autoescape on
    assert 'id="causes"' in page  # the rest still from the built-in templates


def test_render_json_is_strict():
    analysis = load("healthy")
    analysis["window_s"] = float("nan")
    out = render_json(analysis)
    assert json.loads(out)["window_s"] is None
    assert "NaN" not in out


def test_write_report_formats_and_errors(tmp_path: Path):
    analysis = load("deadlock")
    assert write_report(analysis, str(tmp_path / "x.HTM")) == "html"
    assert write_report(analysis, str(tmp_path / "x.markdown")) == "markdown"
    assert write_report(analysis, str(tmp_path / "x.txt"), fmt="md") == "markdown"
    assert (tmp_path / "x.txt").read_text(encoding="utf-8").startswith("# hangdoctor: HUNG")
    assert write_report(analysis, str(tmp_path / "x.out"), fmt="json") == "json"
    assert json.loads((tmp_path / "x.out").read_text(encoding="utf-8")) == analysis
    with pytest.raises(ValueError, match=r"\.html.*\.json.*\.md"):
        write_report(analysis, str(tmp_path / "report.pdf"))
    with pytest.raises(ValueError, match="unknown report format 'pdf'"):
        write_report(analysis, str(tmp_path / "report.html"), fmt="pdf")
    assert not (tmp_path / "report.pdf").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hangdoctor-")]


def test_missing_and_malformed_fields_still_render():
    sparse = {"verdict": "dead", "causes": [{"id": "rank-died"}], "ranks": [{"pid": "x"}, 5],
              "log": {"tail": None}, "stacks": {"1": "oops"}, "gpus": [{"util_pct": "hi"}]}  # fmt: skip
    page = render_html(sparse)
    assert "v-dead" in page and "rank-died" in page
    assert render_markdown({}).startswith("# hangdoctor: UNKNOWN")
    assert render_terminal({}).startswith("hangdoctor: UNKNOWN")


def test_64_ranks_html_is_small_and_fast():
    analysis = synthetic()
    render_html(analysis)  # templates compiled once per process
    start = time.perf_counter()
    page = render_html(analysis)
    elapsed_s = time.perf_counter() - start
    size_bytes = len(page.encode("utf-8"))
    assert size_bytes < 2_000_000, size_bytes
    assert elapsed_s < 1.0, elapsed_s
    assert page.count('<tr class="odd"') == 1
    assert page.count('<svg class="chart"') == 64


def test_synthetic_is_not_mutated_by_rendering():
    analysis = synthetic(8, 2, 4)
    before = copy.deepcopy(analysis)
    render_html(analysis)
    render_markdown(analysis, max_bytes=5000)
    render_terminal(analysis)
    assert analysis == before
