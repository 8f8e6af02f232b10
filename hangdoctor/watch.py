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
