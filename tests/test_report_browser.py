"""The HTML report in a real headless Chromium, driven over the DevTools protocol.

A tiny CDP client talks to Chromium over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, JSON
messages ended by NUL), so only the standard library is needed. Each page load records console
messages, exceptions, log entries (CSP violations land there), dialogs and every network
request; a canary HTTP server on 127.0.0.1 counts any request that escaped.

Set HD_SAVE_SCREENSHOT=1 to write tests/artifacts/report.png (the deadlock sample, 1280x2000).
Under CI=true a missing chromium fails instead of skipping.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hangdoctor.report.render import render_html
from tests.canary import Canary

pytestmark = pytest.mark.browser

SAMPLES = Path(__file__).parent / "samples_analysis"
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
HOSTILE_CANARY = "127.0.0.1:9/"


def _find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _fd_above(fd: int, low: int) -> int:
    """A duplicate of ``fd`` numbered ``low`` or higher (the original is closed)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)
    os.close(fd)
    return high


class CDPError(RuntimeError):
    pass


class Browser:
    """Headless Chromium with a DevTools pipe; every wait has a deadline."""

    def __init__(self, binary: str, user_data_dir: str) -> None:
        # fds: we write commands into to_chrome_w, chrome reads them on its fd 3; chrome writes
        # replies on its fd 4 into from_chrome_w, we read from_chrome_r.
        to_chrome_r, self._to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # The child's ends move to fds 3 and 4; keep them away from those numbers until then.
        to_chrome_r = _fd_above(to_chrome_r, 10)
        from_chrome_w = _fd_above(from_chrome_w, 10)
        args = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            f"--user-data-dir={user_data_dir}",
            "about:blank",
        ]
        # bash (dash takes one-digit fds only) moves the pipe ends onto fds 3 and 4, then execs.
        script = (
            f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-'
        )
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", script, "bash", *args],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._from_chrome = from_chrome_r
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def _read_loop(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[-1] = {"error": {"message": "browser pipe closed"}}
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self._events.put(msg)

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = 15.0,
    ) -> dict[str, Any]:
        self._next_id += 1
        msg_id = self._next_id
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while msg_id not in self._replies:
                if -1 in self._replies:
                    raise CDPError(self._replies[-1]["error"]["message"] + self.stderr_tail())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CDPError(f"{method}: no reply in {timeout_s} s")
                self._cond.wait(left)
            reply = self._replies.pop(msg_id)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def drain_events(self) -> list[dict[str, Any]]:
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def wait_event(self, method: str, session: str, timeout_s: float) -> list[dict[str, Any]]:
        """Wait for ``method`` on ``session``; return every event seen meanwhile (it included)."""
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"no {method} in {timeout_s} s")
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                continue
            seen.append(event)
            if event.get("method") == "Page.javascriptDialogOpening":
                # An alert() blocks the page until answered: record it, dismiss it, go on.
                self.send("Page.handleJavaScriptDialog", {"accept": False}, event.get("sessionId"))
            if event.get("method") == method and event.get("sessionId") == session:
                return seen

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return "\n" + self._stderr.read()[-2000:].decode(errors="replace")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout_s=5.0)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_chrome_w)
        self._reader.join(timeout=5)
        os.close(self._from_chrome)
        self._stderr.close()


class PageLoad:
    """What one page load did: console, exceptions, log entries, dialogs, requests."""

    def __init__(self, events: list[dict[str, Any]], session: str) -> None:
        mine = [e for e in events if e.get("sessionId") == session]
        self.console = [e["params"] for e in mine if e["method"] == "Runtime.consoleAPICalled"]
        self.exceptions = [e["params"] for e in mine if e["method"] == "Runtime.exceptionThrown"]
        self.log = [e["params"]["entry"] for e in mine if e["method"] == "Log.entryAdded"]
        self.dialogs = [e["params"] for e in mine if e["method"] == "Page.javascriptDialogOpening"]
        self.requests = [
            e["params"]["request"]["url"]
            for e in mine
            if e["method"] == "Network.requestWillBeSent"
        ]
        self.websockets = [e["params"] for e in mine if e["method"] == "Network.webSocketCreated"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Browser:
    binary = _find_chromium()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium is required under CI=true: apt-get install chromium")
        pytest.skip("chromium not installed (apt-get install chromium)")
    b = Browser(binary, str(tmp_path_factory.mktemp("chromium-profile")))
    try:
        b.send("Browser.getVersion", timeout_s=30.0)
        yield b
    finally:
        b.close()


@pytest.fixture()
def canary() -> Canary:
    c = Canary()
    yield c
    c.close()


def _open(
    browser: Browser,
    html_path: Path,
    bypass_csp: bool = False,
    settle_s: float = 0.7,
) -> tuple[str, PageLoad]:
    """Load ``html_path`` in a fresh tab; return the session id and what the load did."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    for domain in ("Runtime", "Log", "Network", "Page"):
        browser.send(f"{domain}.enable", session=session)
    if bypass_csp:
        # Prove the escaping on its own: the page's CSP would otherwise also stop scripts.
        browser.send("Page.setBypassCSP", {"enabled": True}, session=session)
    browser.drain_events()
    browser.send("Page.navigate", {"url": html_path.as_uri()}, session=session)
    events = browser.wait_event("Page.loadEventFired", session, timeout_s=20.0)
    # Give anything asynchronous (an onerror fetch, a timer) time to show itself.
    time.sleep(settle_s)
    events += browser.drain_events()
    return session, PageLoad(events, session)


def _eval(browser: Browser, session: str, expression: str) -> Any:
    result = browser.send(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
    )
    if "exceptionDetails" in result:
        raise CDPError(f"evaluate failed: {result['exceptionDetails']}")
    return result["result"].get("value")


def _assert_quiet(load: PageLoad, html_path: Path) -> None:
    errors = [c for c in load.console if c.get("type") in ("error", "assert", "warning")]
    assert errors == [], errors
    assert load.exceptions == [], load.exceptions
    assert [e for e in load.log if e.get("level") in ("error", "warning")] == [], load.log
    assert load.dialogs == []
    assert load.websockets == []
    # The report itself is the only request; nothing else, not even a data: image or a file.
    assert load.requests == [html_path.as_uri()], load.requests


def _load_sample(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def test_deadlock_report_renders_clean_offline(browser: Browser, canary: Canary, tmp_path: Path):
    html_path = tmp_path / "report.html"
    html_path.write_text(render_html(_load_sample("deadlock")), encoding="utf-8")

    session, load = _open(browser, html_path)

    _assert_quiet(load, html_path)
    assert canary.hits == []
    assert _eval(browser, session, "document.scripts.length") == 0
    # The page really rendered: verdict banner, ranked causes in order, sparklines drawn.
    text = _eval(browser, session, "document.body.innerText")
    assert "hung" in text.lower()
    first = text.index("Deadlock after weights loaded")
    assert first < text.index("API front end stuck") < text.index("Stuck in process-group")
    assert _eval(browser, session, "document.querySelectorAll('svg polyline').length") >= 12
    banner_color = _eval(
        browser, session, "getComputedStyle(document.querySelector('.banner')).borderLeftColor"
    )
    assert banner_color == "rgb(207, 34, 46)"  # the red of a hung verdict
    # Printed, folded sections open up: frames inside a closed <details> become visible.
    closed = "document.querySelector('details:not([open]) .thread').checkVisibility()"
    assert _eval(browser, session, closed) is False
    browser.send("Emulation.setEmulatedMedia", {"media": "print"}, session=session)
    assert _eval(browser, session, closed) is True
    browser.send("Emulation.setEmulatedMedia", {"media": ""}, session=session)

    if os.environ.get("HD_SAVE_SCREENSHOT"):
        browser.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "report.png").write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.parametrize("bypass_csp", [True, False], ids=["escaping-alone", "with-csp"])
def test_hostile_report_executes_nothing(
    browser: Browser, canary: Canary, tmp_path: Path, bypass_csp: bool
):
    raw = (SAMPLES / "hostile.json").read_text(encoding="utf-8")
    # Point the hostile fetches at the live canary so a fetch that ran would be counted.
    analysis = json.loads(raw.replace(HOSTILE_CANARY, f"127.0.0.1:{canary.port}/"))
    html_path = tmp_path / "hostile.html"
    html_path.write_text(render_html(analysis), encoding="utf-8")

    session, load = _open(browser, html_path, bypass_csp=bypass_csp, settle_s=1.0)

    _assert_quiet(load, html_path)
    assert canary.hits == []
    assert _eval(browser, session, "document.scripts.length") == 0
    assert _eval(browser, session, "document.images.length") == 0
    handlers = _eval(
        browser,
        session,
        "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes])"
        ".filter(a => a.name.startsWith('on')).length",
    )
    assert handlers == 0
    assert (
        _eval(browser, session, "document.querySelectorAll('a[href^=\"javascript\"]').length") == 0
    )
    # The hostile text is on the page as text.
    text = _eval(browser, session, "document.body.textContent")
    assert "<script>alert(1)</script>" in text
    assert f"onerror=fetch('http://127.0.0.1:{canary.port}/x')" in text
