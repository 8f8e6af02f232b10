"""Issue 8: hostile strings from a real target never become markup or script in a report.

A real process (tests/faults/hostile_target.py) carries ``<script>``, ``<img onerror>``,
``<svg onload>`` and ``javascript:`` payloads in its process name, a thread's names, its command
line, the function and file name it waits in, a local variable and its log. The HTML report of
``diagnose --locals`` is opened in headless Chromium with a canary HTTP listener on 127.0.0.1
that every payload would call: the canary must receive nothing, and the DOM Chromium dumps must
hold no element or attribute made from the data. The Markdown report must escape them too.
Under CI (env CI=true) a missing Chromium fails the test.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.canary import Canary
from tests.conftest import find_chromium, need
from tests.faults.helpers import Helper, no_traceback, run_cli, start_helper, stop_helper

CHROMIUM_TIMEOUT_S = 60.0


def payloads(port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}"
    return {
        "comm": "<svg onload=x>",  # 14 bytes: fits the kernel's 15
        "thread_comm": "<b>x</b><i>y</i",
        "thread": f"\"><img src=x onerror=fetch('{url}/pwn-thread')>",
        "function": f"<script>fetch('{url}/pwn-function')</script>",
        "filename": f"/srv/<img src=x onerror=fetch('{url}/pwn-file')>.py",
        "local": f"javascript:fetch('{url}/pwn-local')",
        "argv": [
            f"<script>fetch('{url}/pwn-argv')</script>",
            f"\"><img src=x onerror=fetch('{url}/pwn-argv2')>",
            "javascript:alert(1)",
        ],
        "log": [
            f"ERROR <script>fetch('{url}/pwn-log')</script>",
            f"WARN \"><img src=x onerror=fetch('{url}/pwn-log2')>",
            f"INFO see [docs](javascript:fetch('{url}/pwn-log3'))",
            "<svg onload=alert(1)>",
        ],
    }


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.close()


@pytest.fixture(scope="module")
def reports(
    canary: Canary, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path, Helper, dict[str, Any]]]:
    """Diagnose the hostile target once: (report.html, report.md, the target, its payloads)."""
    folder = tmp_path_factory.mktemp("hostile")
    log = folder / "server.log"
    p = payloads(canary.port)
    helper = start_helper(
        "hostile_target.py",
        "--payloads",
        json.dumps(p),
        "--log",
        str(log),
        "--lifetime",
        "120",
        *p["argv"],
    )
    try:
        for name in ("report.html", "report.md"):
            proc, _ = run_cli(
                "diagnose",
                "localhost",
                "--pid",
                str(helper.pid),
                "--locals",
                "--log",
                str(log),
                "--window",
                "0.5",
                "--deadline",
                "20",
                "-o",
                str(folder / name),
                "--save-snapshot",
                str(folder / "snap.json"),
            )
            no_traceback(proc)
            assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
        yield folder / "report.html", folder / "report.md", helper, p
    finally:
        stop_helper(helper)


def test_the_payloads_reached_the_evidence(reports) -> None:
    """The yardstick: every payload is in the snapshot, so the reports had to handle it."""
    html_path, _md, helper, p = reports
    snap = json.loads(html_path.with_name("snap.json").read_text())
    text = json.dumps(snap)
    proc = {x["pid"]: x for x in snap["processes"]}[helper.pid]
    assert proc["name"] == p["comm"]
    assert any(t["name"] == p["thread_comm"][:15] for t in proc["threads"])
    for needle in ("pwn-thread", "pwn-function", "pwn-file", "pwn-local", "pwn-argv", "pwn-log"):
        assert needle in text, needle


def _dump_dom(chromium: str, html_path: Path, profile: Path) -> str:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=3000",
        "--dump-dom",
        html_path.as_uri(),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<html" in proc.stdout.lower(), proc.stderr[-2000:]
    return proc.stdout


# Markup that only exists if a payload became an element or attribute.
LIVE_MARKUP = [
    re.compile(r"<img\b[^>]*\bonerror\s*=", re.I),
    re.compile(r"<svg\b[^>]*\bonload\s*=", re.I),
    re.compile(r"<script\b[^>]*>[^<]*pwn", re.I),
    re.compile(r"<b>x</b>", re.I),
    re.compile(r"\b(?:href|src|action)\s*=\s*[\"']?\s*javascript:", re.I),
]


def test_html_report_executes_and_injects_nothing(reports, canary: Canary, tmp_path: Path) -> None:
    chromium = find_chromium()
    need(chromium is not None, "Chromium (apt-get install chromium)")
    assert chromium is not None
    html_path, _md, _helper, _p = reports
    raw = html_path.read_text()
    for rx in LIVE_MARKUP:
        assert not rx.search(raw), f"report.html holds live markup: {rx.pattern}"
    assert "pwn-function" in raw and "pwn-log" in raw, "the payloads are shown, as text"
    dom = _dump_dom(chromium, html_path, tmp_path / "profile")
    for rx in LIVE_MARKUP:
        m = rx.search(dom)
        assert not m, f"the DOM holds live markup from the data: {m.group(0) if m else ''}"
    # the report's own scripts, if any, carry no payload
    for script in re.findall(r"<script\b[^>]*>(.*?)</script>", dom, re.S | re.I):
        assert "pwn" not in script and "127.0.0.1" not in script
    assert "pwn-function" in dom, "the payloads are in the page, as text"
    canary.server.timeout = 0.5
    threading.Event().wait(0.5)
    assert canary.hits == [], f"the report called out: {canary.hits}"


def _outside_code(md: str) -> str:
    """The Markdown with fenced blocks and inline code spans removed (where HTML is inert)."""
    md = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", md, flags=re.S | re.M)
    md = re.sub(r"(`+)(?:(?!\1).)+?\1", "", md, flags=re.S)
    return md


def test_markdown_report_escapes_the_payloads(reports) -> None:
    _html, md_path, _helper, _p = reports
    md = md_path.read_text()
    assert "pwn-function" in md or "pwn-log" in md or "pwn-thread" in md, "payloads shown"
    prose = _outside_code(md)
    for rx in (
        re.compile(r"<script", re.I),
        re.compile(r"<img\b", re.I),
        re.compile(r"<svg\b", re.I),
        re.compile(r"<b>", re.I),
        re.compile(r"\]\(\s*javascript:", re.I),
    ):
        m = rx.search(prose)
        assert not m, (
            f"raw markup outside code in report.md: {prose[max(0, m.start() - 80) : m.end() + 80]!r}"
        )
