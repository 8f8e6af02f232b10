"""Watch a server's health and act once per incident: the engine behind ``hangdoctor watch``.

Polls an HTTP health URL and/or a TCP port every ``interval_s``. When health has failed
continuously for ``after_s``, it calls ``on_incident`` once (the CLI takes a snapshot bundle
and runs the user's ``--then`` command), then waits for health to come back before another
incident can fire: one action per incident, not per poll.

Bounded and steady over hours: the state is a handful of scalars (no lists that grow), every
poll has a timeout, and a stop request (SIGTERM / SIGINT, set by the CLI) ends the loop after
the current step. It never signals the watched server; only the user's ``--then`` may.

Layer: bundle; may import: hangdoctor.bundle, hangdoctor.watch, hangdoctor.report,
hangdoctor.triage, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, TextIO

from hangdoctor.bundle import utc_iso

# The HTTP body is never needed: the status says it all; read a little so keep-alive is clean.
_BODY_PEEK_BYTES = 256
THEN_KILL_GRACE_S = 5.0


@dataclass
class Health:
    """The result of one poll: ``ok`` and, when not ok, why (one line)."""

    ok: bool
    detail: str
    verdict: dict | None = None  # the progress verdict of this poll (progress mode), for metrics


_IN_FLIGHT: list = []  # the connection of the poll in progress, for abort_poll()


def _shut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def abort_poll() -> None:
    """End the HTTP poll in progress now (from a signal handler: a stop request must not wait
    for a slow server)."""
    for conn in list(_IN_FLIGHT):
        _shut(conn)


def check_url(url: str, timeout_s: float) -> Health:
    """GET ``url`` straight (no proxy from the environment: it would test the proxy): healthy
    on a 2xx/3xx answer within ``timeout_s``, the whole exchange included.

    The budget is for the exchange, not per recv: an endpoint trickling one byte every 0.5 s
    kept urllib reading for over 600 s. A timer shuts the socket down when the time is up."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:
        return Health(False, f"{url}: {exc}")
    cls = http.client.HTTPSConnection if parts.scheme.lower() == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "127.0.0.1", port, timeout=timeout_s)
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        _shut(conn)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    _IN_FLIGHT.append(conn)
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", path, headers={"User-Agent": "hangdoctor-watch"})
        resp = conn.getresponse()
        resp.read(_BODY_PEEK_BYTES)
        if fired.is_set():
            raise TimeoutError()
        if 200 <= resp.status < 400:
            return Health(True, f"HTTP {resp.status}")
        return Health(False, f"{url}: HTTP {resp.status}")
    except (socket.timeout, TimeoutError):
        return Health(False, f"{url}: no answer within {timeout_s:g} s")
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if fired.is_set():
            return Health(False, f"{url}: no answer within {timeout_s:g} s")
        return Health(False, f"{url}: {type(exc).__name__}: {exc}")
    finally:
        timer.cancel()
        _IN_FLIGHT.remove(conn)
        conn.close()


def check_port(host: str, port: int, timeout_s: float) -> Health:
    """TCP connect to ``host:port``: healthy when it is accepted within ``timeout_s``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return Health(True, f"port {port} open")
    except (socket.timeout, TimeoutError):
        return Health(False, f"{host}:{port}: connect timed out after {timeout_s:g} s")
    except OSError as exc:
        return Health(False, f"{host}:{port}: {exc.strerror or exc}")


def tcp_host_of(spec: str) -> str:
    """Address to poll for ``HOST`` as typed: ``localhost`` -> 127.0.0.1, ``user@h:22`` -> ``h``."""
    host = spec.strip().rsplit("@", 1)[-1]
    if host.lower() in ("localhost", "local"):
        return "127.0.0.1"
    if host.startswith("[") and "]" in host:
        return host[1 : host.index("]")]
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name
    return host


class IncidentTracker:
    """Turns a stream of (ok, time) observations into state changes; scalars only.

    ``observe`` returns one of ``"up"`` (first poll healthy), ``"down"`` (health started
    failing), ``"incident"`` (failing for ``after_s``: act now, once), ``"back"`` (healthy again
    after failing or after an incident) or None (no change).
    """

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.state = "unknown"  # unknown | healthy | failing | handled
        self.failing_since: float | None = None
        self.incidents = 0

    def observe(self, ok: bool, now: float) -> str | None:
        if ok:
            previous, self.state, self.failing_since = self.state, "healthy", None
            if previous == "unknown":
                return "up"
            return "back" if previous in ("failing", "handled") else None
        if self.state in ("unknown", "healthy"):
            self.state, self.failing_since = "failing", now
            if self.after_s > 0:
                return "down"
        if self.state == "failing" and now - (self.failing_since or now) >= self.after_s:
            self.state = "handled"
            self.incidents += 1
            return "incident"
        return None

    def failing_for_s(self, now: float) -> float:
        """Seconds health has been failing (0 when it is not)."""
        return 0.0 if self.failing_since is None else max(0.0, now - self.failing_since)


class Logger:
    """One timestamped line per event on stderr."""

    def __init__(self, stream: TextIO | None = None, verbose: bool = False) -> None:
        self.stream = stream
        self.verbose = verbose

    def __call__(self, message: str) -> None:
        stream = self.stream or sys.stderr
        from hangdoctor.redact import redact_text  # --url may carry user:pass@ or a token
        from hangdoctor.textsafe import clean_text  # an endpoint's answer is not to be trusted

        stream.write(f"{utc_iso()} hangdoctor watch: {clean_text(redact_text(message))}\n")
        stream.flush()

    def debug(self, message: str) -> None:
        if self.verbose:
            self(message)


def run_then(command: str, env_extra: dict[str, str], timeout_s: float) -> tuple[int | None, float]:
    """Run ``/bin/sh -c COMMAND`` once; return (exit code or None on timeout, seconds taken).

    It runs in its own session, so a Ctrl-C meant for watch does not cut a restart short; on
    timeout its whole process group gets SIGTERM, then SIGKILL.
    """
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        env={**os.environ, **env_extra},
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return proc.wait(timeout=timeout_s), time.monotonic() - t0
    except subprocess.TimeoutExpired:
        for sig, grace_s in (
            (signal.SIGTERM, THEN_KILL_GRACE_S),
            (signal.SIGKILL, THEN_KILL_GRACE_S),
        ):
            try:
                os.killpg(proc.pid, sig)  # our own child's group, never the watched server
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=grace_s)
                break
            except subprocess.TimeoutExpired:
                continue
        return None, time.monotonic() - t0


def watch_loop(
    poll: Callable[[], Health],
    on_incident: Callable[[float, str], None],
    *,
    interval_s: float,
    after_s: float,
    stop: threading.Event,
    log: Logger,
    max_incidents: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_poll: Callable[[Health, IncidentTracker, float], None] | None = None,
) -> int:
    """Poll until ``stop`` is set or ``max_incidents`` incidents were handled; return the count.

    ``on_incident(failing_for_s, last_detail)`` runs in this thread; a stop request during it
    takes effect when it returns.
    """
    tracker = IncidentTracker(after_s)
    next_poll = clock()
    last_detail = ""
    while not stop.is_set():
        health = poll()
        now = clock()
        event = tracker.observe(health.ok, now)
        if not health.ok:
            last_detail = health.detail
        if on_poll is not None:
            on_poll(health, tracker, now)
        if event == "up":
            log(f"healthy ({health.detail})")
        elif event == "down":
            log(f"health failing: {health.detail}; snapshot if it lasts {after_s:g} s")
        elif event == "back":
            log(f"healthy again ({health.detail})")
        elif event == "incident":
            failing_s = tracker.failing_for_s(now)
            log(f"unhealthy for {failing_s:.1f} s ({last_detail}): incident {tracker.incidents}")
            on_incident(failing_s, last_detail)
            if on_poll is not None:  # the incident count moved: publish it now, not a poll later
                on_poll(health, tracker, clock())
            if max_incidents is not None and tracker.incidents >= max_incidents:
                log(f"handled {tracker.incidents} incident(s): done")
                break
            if not stop.is_set():
                log("waiting for health to come back before the next incident")
        else:
            log.debug(f"poll: {'ok' if health.ok else 'failing'} ({health.detail})")
        # A fixed schedule without catch-up: after a long snapshot, poll at once, then on time.
        next_poll = max(next_poll + interval_s, clock())
        stop.wait(max(0.0, next_poll - clock()))
    return tracker.incidents


# ------------------------------------------------------------------ metrics out
# The probe convention's codes, also exported: 0 ok, 1 warning, 2 critical, 3 unknown.
STATUS_CODE = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}
METRIC_HELP = {
    "hangdoctor_up": ("gauge", "1 when the watched server answered the last poll"),
    "hangdoctor_status": ("gauge", "the last poll's verdict: 0 ok, 1 warning, 2 critical, 3 unknown"),
    "hangdoctor_state": ("gauge", "1 for the state the last poll found"),
    "hangdoctor_work_pending": ("gauge", "1 when requests are running, queued or connected"),
    "hangdoctor_seconds_since_progress": ("gauge", "seconds work has been pending with no progress (0: moving or idle)"),
    "hangdoctor_failing_seconds": ("gauge", "seconds the server has failed the watch's condition"),
    "hangdoctor_incidents_total": ("counter", "incidents handled (snapshot taken, --then run) since watch started"),
    "hangdoctor_last_poll_timestamp_seconds": ("gauge", "when the last poll ended (Unix time)"),
    "hangdoctor_process_up": ("gauge", "1 while the process (a rank, the engine core, the API server) is alive"),
    "hangdoctor_process_cpu_seconds_total": ("counter", "CPU time of the process"),
}
STATE_NAMES = ("idle", "progressing", "pending", "stalling", "slow", "not-answering", "hung",
               "unhealthy", "dead", "unknown")


def _number(value: float) -> str:
    """Every digit kept (``%g`` would turn a Unix time into 1.8e+09)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(target: str, health: Health, incidents: int, failing_s: float, at: float) -> str:
    """The Prometheus text exposition of one poll (the textfile and ``/metrics`` serve it)."""
    v = health.verdict or {}
    status = v.get("status") or ("ok" if health.ok else "critical")
    state = v.get("state") or ("idle" if health.ok else "not-answering")
    if v:
        answered = v.get("health") is None or v["health"].get("code") is not None
    else:
        answered = health.ok
    t = f'target="{_label(target)}"'
    rows: list[tuple[str, str, float]] = [
        ("hangdoctor_up", t, 1.0 if answered else 0.0),
        ("hangdoctor_status", t, float(STATUS_CODE.get(status, 3))),
    ]
    rows += [("hangdoctor_state", f'{t},state="{s}"', 1.0 if s == state else 0.0) for s in STATE_NAMES]
    if v:
        rows.append(("hangdoctor_work_pending", t, 1.0 if v.get("work_pending") else 0.0))
        rows.append(("hangdoctor_seconds_since_progress", t, float(v.get("seconds_since_progress") or 0.0)))
    rows += [
        ("hangdoctor_failing_seconds", t, round(failing_s, 3)),
        ("hangdoctor_incidents_total", t, float(incidents)),
        ("hangdoctor_last_poll_timestamp_seconds", t, round(at, 3)),
    ]
    for p in v.get("processes") or []:
        lab = f'{t},pid="{p["pid"]}",name="{_label(p.get("name") or "")}"'
        rows.append(("hangdoctor_process_up", lab, 1.0 if p.get("alive") else 0.0))
        if p.get("cpu_s") is not None:
            rows.append(("hangdoctor_process_cpu_seconds_total", lab, float(p["cpu_s"])))
    out: list[str] = []
    for name, (kind, text) in METRIC_HELP.items():
        mine = [r for r in rows if r[0] == name]
        if not mine:
            continue
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        out += [f"{name}{{{labels}}} {_number(value)}" for _n, labels, value in mine]
    return "\n".join(out) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Replace ``path`` atomically: node-exporter never reads half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class MetricsServer:
    """``GET /metrics`` (any path) answers the last poll's text, from a daemon thread."""

    def __init__(self, host: str, port: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self
        self.text = "# no poll yet\n"

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                body = owner.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:  # scrapes are not news
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
