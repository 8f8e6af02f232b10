"""``hangdoctor watch``: poll a server's health; on an incident take one snapshot bundle and
run --then.

The health loop lives in ``hangdoctor.watch``, the bundle in ``hangdoctor.cli.prekill``.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, prekill), never another command module.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import click

from hangdoctor.cli.options import _collection_options, _load_checks
from hangdoctor.cli.prekill import SNAPSHOT_DEADLINE_S, _finish, take_snapshot
from hangdoctor.errors import HangdoctorError, UsageError

WATCH_EPILOG = """\b
Exit codes: 0 stopped (SIGTERM/SIGINT, --once, --max-snapshots), 2 bad usage.

\b
--then runs through /bin/sh -c with HANGDOCTOR_BUNDLE, HANGDOCTOR_VERDICT,
HANGDOCTOR_EXIT_CODE, HANGDOCTOR_TOP_CAUSE and HANGDOCTOR_HOST set. hangdoctor
itself never signals the server: only your --then command may."""


def _url_port(url: str) -> int | None:
    """The TCP port a health URL names (80/443 by default)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None


def _url_path(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _listen_address(text: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (default host 127.0.0.1: a scrape from elsewhere is opt-in)."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--metrics-listen {text!r} is not [HOST:]PORT", "e.g. --metrics-listen 0.0.0.0:9464")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def watch_main(
    host: str,
    url: tuple[str, ...] | str | None,
    interval_s: float,
    after_s: float,
    then_cmd: str | None,
    then_timeout_s: float,
    out_dir: str,
    max_snapshots: int | None,
    once: bool,
    verbose: bool,
    progress: bool = False,
    no_connections: bool = False,
    textfile: str | None = None,
    metrics_listen: str | None = None,
    **kw: Any,
) -> None:
    """Watch HOST's server health; when it has failed for --after seconds, take ONE snapshot
    bundle into --out-dir, run --then once, and wait for health to come back before the next
    incident. Polls --url and/or TCP --port (at least one). Logs one line per state change on
    stderr. SIGTERM/SIGINT stop it (exit 0) after the current step.

    With --progress, health is one signal among several: each poll reads the engine's counters
    (/metrics), the client connections on the API port and the --pid processes (no ptrace),
    and the incident is work pending with no progress for --after seconds, or a server gone
    or not answering; never a busy healthy server or an idle one.

    \b
      hangdoctor watch localhost --pid 46294 --url http://127.0.0.1:8000/health \\
          --after 120 --out-dir /var/tmp/hangs --then 'systemctl restart vllm'
    """
    from hangdoctor import watch as watch_mod
    from hangdoctor.reach.multi import parse_pid_args

    ports = list(kw.get("port") or [])
    urls = [url] if isinstance(url, str) else list(url or [])
    if kw.get("hosts_file"):
        raise UsageError("watch takes one HOST, not --hosts", "run one watch per host")
    # Refuse bad --pid / --checks-dir now, not at the first incident hours later.
    pid_list = parse_pid_args(list(kw.get("pids") or []), [host]).get(host) or []
    _load_checks(kw.get("checks_dirs") or ())
    if not urls and not ports:
        raise UsageError(
            "nothing to watch", "give --url http://HOST:PORT/health and/or --port PORT"
        )
    for u in urls:
        if not u.lower().startswith(("http://", "https://")) or _url_port(u) is None:
            raise UsageError(
                f"--url {u!r} is not an http(s) URL", "e.g. --url http://127.0.0.1:8000/health"
            )
    if not kw.get("pids"):
        # Without --pid, the snapshot is of the process that listens on the watched port(s),
        # not of whatever other server runs on the host.
        snap_ports = list(ports)
        for u in urls:
            port = _url_port(u)
            if port is not None and port not in snap_ports:
                snap_ports.append(port)
        kw = dict(kw, port=tuple(snap_ports))
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create --out-dir {out_dir}: {exc.strerror or exc}", "give a writable folder"
        ) from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--out-dir {out_dir} is not writable", "give a writable folder")

    if textfile and not textfile.endswith(".prom"):
        raise UsageError(f"--textfile {textfile}: node-exporter reads only *.prom files",
                         "name it e.g. /var/lib/node_exporter/textfile/hangdoctor.prom")
    listen = _listen_address(metrics_listen) if metrics_listen else None
    log = watch_mod.Logger(verbose=verbose)
    timeout_s = min(interval_s, 10.0)
    tcp_host = watch_mod.tcp_host_of(host)
    api_port = ports[0] if ports else _url_port(urls[0])
    if progress and tcp_host not in ("127.0.0.1", "::1"):
        raise UsageError("--progress watches a server on this host (its connections and processes "
                         "are read from /proc)", "run watch on the server's host, or in its pod")
    # without --url, /health is still asked (a 404 is an answer: the server is there)
    health_path = _url_path(urls[0]) if urls else "/health"
    target = f"{tcp_host}:{api_port}"
    progress_state: dict[str, Any] = {}

    def poll_progress() -> Any:
        from hangdoctor.collect import liveness
        from hangdoctor.triage import progress_verdict

        prev = progress_state.get("state")
        offset = prev.get("log_offset") if prev else None
        # at least 2 s: a short --interval must not make a busy server "not answering"
        look = liveness.sample(api_port, tcp_host, health_path, max(2.0, timeout_s),
                               [int(p) for p in pid_list], kw.get("log"), offset)
        # after_s=0: any poll without progress while work waits fails; the tracker below
        # turns --after seconds of failing polls into the incident
        verdict, progress_state["state"] = progress_verdict.judge(
            look, prev, after_s=0.0, warn_after_s=0.0, slow_s=max(2.0, timeout_s),
            use_connections=not no_connections)
        ok = verdict["status"] != progress_verdict.CRITICAL
        detail = verdict["summary"].split(": ", 1)[-1] if ok else verdict["summary"]
        return watch_mod.Health(ok, f"{verdict['state']}: {detail}" if ok else detail, verdict)

    def poll() -> Any:
        details = []
        for u in urls:
            health = watch_mod.check_url(u, timeout_s)
            if not health.ok:
                return health
            details.append(health.detail)
        for port in ports:
            health = watch_mod.check_port(tcp_host, port, timeout_s)
            if not health.ok:
                return health
            details.append(health.detail)
        return watch_mod.Health(True, ", ".join(details))

    state = {"collector_alive": False}

    def on_incident(failing_s: float, detail: str) -> None:
        outcome = None
        try:
            outcome = take_snapshot((host,), kw, out_dir, kw["deadline"])
        except HangdoctorError as exc:
            log(f"snapshot failed: {exc.one_line()}")
        if outcome is not None:
            s = outcome.summary()
            log(
                f"snapshot: {s['bundle']}: verdict {s['verdict']} (exit {s['exit_code']}), "
                f"top cause {s['top_cause'] or '-'}, {s['duration_s']:.1f} s"
            )
            for line in outcome.errors + outcome.problems:
                log(f"snapshot: {line}")
            state["collector_alive"] = state["collector_alive"] or outcome.collector_alive
        if then_cmd:
            s = outcome.summary() if outcome is not None else {}
            env = {
                "HANGDOCTOR_BUNDLE": s.get("bundle") or "",
                "HANGDOCTOR_VERDICT": s.get("verdict") or "",
                "HANGDOCTOR_EXIT_CODE": str(s.get("exit_code", "")),
                "HANGDOCTOR_TOP_CAUSE": s.get("top_cause") or "",
                "HANGDOCTOR_HOST": host,
                "HANGDOCTOR_FAILING_S": f"{failing_s:.1f}",
            }
            log("running --then")
            try:
                rc, took_s = watch_mod.run_then(then_cmd, env, then_timeout_s)
            except OSError as exc:
                log(f"--then could not start: {exc.strerror or exc}")
            else:
                if rc is None:
                    log(f"--then still running after {then_timeout_s:g} s: stopped it")
                else:
                    log(f"--then exited {rc} after {took_s:.1f} s")

    stop = threading.Event()
    received: list[str] = []  # at most two entries: the second signal exits at once

    def on_signal(signum: int, _frame: Any) -> None:
        # Only flags here: writing to stderr from a handler can re-enter a write in progress.
        received.append(signal.Signals(signum).name)
        if len(received) > 1:
            raise SystemExit(128 + signum)  # asked twice: stop now
        stop.set()
        watch_mod.abort_poll()  # a poll stuck on a slow server ends now, not at its timeout

    server = None
    if listen:
        try:
            server = watch_mod.MetricsServer(*listen)
        except OSError as exc:
            raise UsageError(f"--metrics-listen {metrics_listen}: {exc.strerror or exc}",
                             "give a free port, e.g. --metrics-listen 0.0.0.0:9464") from None
        log(f"serving /metrics on {listen[0]}:{server.port}")
    metrics_problem: list[str] = []

    def on_poll(health: Any, tracker: Any, now: float) -> None:
        import time as _time

        if not (server or textfile):
            return
        text = watch_mod.render_metrics(target, health, tracker.incidents,
                                        tracker.failing_for_s(now), _time.time())
        if server:
            server.text = text
        if textfile:
            try:
                watch_mod.write_textfile(textfile, text)
                metrics_problem.clear()
            except OSError as exc:
                if not metrics_problem:  # once per failure spell, not once per poll
                    metrics_problem.append(str(exc))
                    log(f"cannot write --textfile {textfile}: {exc.strerror or exc}")

    old_handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    what = " and ".join(filter(None, [", ".join(urls), ", ".join(f"port {p}" for p in ports)]))
    if progress:
        what = f"progress on {target}" + (f" ({health_path} one signal of several)" if health_path else "")
    log(
        f"watching {host}: {what} every {interval_s:g} s; snapshot after {after_s:g} s failing, into {out_dir}"
    )
    try:
        watch_mod.watch_loop(
            poll_progress if progress else poll,
            on_incident,
            interval_s=interval_s,
            after_s=after_s,
            stop=stop,
            log=log,
            max_incidents=1 if once else max_snapshots,
            on_poll=on_poll,
        )
    finally:
        if server:
            server.close()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    log(f"{received[0]}: stopped" if received else "stopped")
    _finish(0, state["collector_alive"])


@click.command("watch", help=watch_main.__doc__, epilog=WATCH_EPILOG)
@click.argument("host")
@click.option(
    "--url",
    multiple=True,
    metavar="URL",
    help="health URL to poll (healthy: 2xx/3xx in time), e.g. http://127.0.0.1:8000/health; "
    "repeat to watch several (all must answer); without --pid the snapshot is of the "
    "process listening on its port",
)
@_collection_options(
    SNAPSHOT_DEADLINE_S,
    "hard limit for each snapshot, bundle written included, in seconds",
    "TCP port to poll (healthy: it accepts a connection); also probed over HTTP in snapshots",
)
@click.option(
    "--interval",
    "interval_s",
    type=click.FloatRange(0.1, 3600),
    default=5.0,
    show_default=True,
    help="seconds between polls (the HTTP timeout is min(interval, 10))",
)
@click.option(
    "--after",
    "after_s",
    type=click.FloatRange(0, 86400),
    default=60.0,
    show_default=True,
    help="take a snapshot when health has failed continuously this long (seconds)",
)
@click.option(
    "--then",
    "then_cmd",
    default=None,
    help="shell command run once per incident, after the snapshot",
)
@click.option(
    "--then-timeout",
    "then_timeout_s",
    type=click.FloatRange(1, 86400),
    default=300.0,
    show_default=True,
    help="seconds before the --then command is stopped",
)
@click.option(
    "--out-dir",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="folder for the snapshot bundles (created if missing)",
)
@click.option(
    "--max-snapshots",
    type=click.IntRange(1),
    default=None,
    help="stop after this many incidents",
)
@click.option("--once", is_flag=True, help="stop after the first incident is handled")
@click.option("--progress", is_flag=True,
              help="judge progress, not health alone: the engine's counters, client connections, "
                   "the --pid processes and --log growth (for a server without engine counters); "
                   "the API port is the first --port, else --url's")
@click.option("--no-connections", is_flag=True,
              help="with --progress: do not count client connections as pending work")
@click.option("--textfile", type=click.Path(dir_okay=False), default=None,
              help="write the metrics after every poll to this node-exporter textfile (*.prom)")
@click.option("--metrics-listen", default=None, metavar="[HOST:]PORT",
              help="serve the metrics on http://HOST:PORT/metrics (HOST defaults to 127.0.0.1)")
@click.option("-v", "--verbose", is_flag=True, help="also log every poll")
def watch(**kw: Any) -> None:
    watch_main(**kw)
