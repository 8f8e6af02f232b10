"""Operations commands: ``hangdoctor snapshot`` (pre-kill bundles) and ``hangdoctor watch``.

``register(main)`` builds both commands and adds them to the CLI group. They reuse cli.py's
collection options, diagnosis and exit codes; the bundle format lives in ``hangdoctor.bundle``
and the health loop in ``hangdoctor.watch``.

cli.py imports this module at its end, so this module reaches cli.py only inside functions
(``_cli()``): importing either module first then works.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import click

from hangdoctor.errors import HangdoctorError, UsageError
from hangdoctor.textsafe import clean_text

SNAPSHOT_DEADLINE_S = 20.0
# Rendering the reports and writing the archive took ~0.3 s for a 5-process snapshot on the
# 2-core CI machine, analysis ~0.1 s; the reserve keeps 3-5x that, and grows with the deadline
# because longer collections bring more evidence to render.
MIN_MARGIN_S = 2.0
MAX_MARGIN_S = 10.0
MIN_COLLECT_S = 1.0
# Interpreter teardown takes ~0.1 s, and seconds on a loaded machine: skip it this near the end.
HURRY_S = 1.0
# The sampling window takes at most this share of the collection budget: py-spy dumps, NVML
# and the HTTP probe need the rest.
WINDOW_SHARE = 0.5
MAX_KEPT_MESSAGES = 50
COLLECTION_KEYS = (
    "pids", "hosts_file", "port", "log", "window", "native", "locals", "sudo", "no_gpu",
    "no_redact", "identity", "ssh_option", "ssh_config", "known_hosts", "checks_dirs",
    "via", "context", "kubeconfig",
)  # fmt: skip


def _cli() -> Any:
    """hangdoctor.cli, imported when first needed (it imports this module at its end)."""
    from hangdoctor import cli

    return cli


def _margin_s(deadline_s: float) -> float:
    """Seconds of ``--deadline`` kept back from collection for analysis, rendering, writing."""
    return min(MAX_MARGIN_S, max(MIN_MARGIN_S, 0.15 * deadline_s))


def process_age_s() -> float:
    """Seconds since this process started (0.0 where /proc cannot tell).

    ``--deadline`` counts from the start of the process, as a wrapper that kills it would:
    interpreter start and imports take ~0.3 s on an idle machine and seconds on a loaded one.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        # /proc's start time counts clock ticks since boot, as CLOCK_BOOTTIME does.
        now_s = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, now_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


@dataclass
class SnapshotOutcome:
    """What one snapshot run produced."""

    bundle: str | None
    analysis: dict[str, Any]
    exit_code: int
    duration_s: float
    deadline_hit: bool
    errors: list[str] = field(default_factory=list)  # one line per host that failed
    problems: list[str] = field(default_factory=list)  # bundle-side trouble (rendering, bugs)
    collector_alive: bool = False  # a collection thread outlived the deadline
    errors_shown: bool = False  # the host errors were already printed (with -v)

    def summary(self) -> dict[str, Any]:
        """The one-line ``--json`` result."""
        causes = self.analysis.get("causes") or []
        return {
            "verdict": self.analysis.get("verdict"),
            "top_cause": causes[0].get("id") if causes else None,
            "score": causes[0].get("score") if causes else None,
            "bundle": self.bundle,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
        }


class _Collector:
    """Runs ``_run_diagnosis`` in a daemon thread, so a wedged source cannot outlive the deadline."""

    def __init__(self, hosts: tuple[str, ...], kw: dict[str, Any]) -> None:
        self.result: tuple[dict[str, Any], list[Any], float] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._run, args=(hosts, kw), name="hd-snapshot", daemon=True
        )

    def _run(self, hosts: tuple[str, ...], kw: dict[str, Any]) -> None:
        try:
            self.result = _cli()._run_diagnosis(hosts, kw)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc

    def run(self, wait_s: float, capture: io.StringIO | None) -> bool:
        """Start, wait up to ``wait_s``; True if it finished. ``capture`` takes its stderr."""
        old = sys.stderr
        if capture is not None:
            sys.stderr = capture
        try:
            self.thread.start()
            self.thread.join(max(0.0, wait_s))
        finally:
            sys.stderr = old
        return not self.thread.is_alive()


def _check_output(path: str) -> None:
    """Refuse early (before collecting) a bundle path that cannot be written."""
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise UsageError(
            f"cannot write the bundle: folder {parent} does not exist",
            "create it, or give another -o",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write the bundle: folder {parent} is not writable", "give a writable -o"
        )
    from hangdoctor import bundle as bundle_mod  # lazy: tarfile and hashlib, ~12 ms
    from hangdoctor.outfile import check_output_path

    if bundle_mod.is_tar_path(path):
        check_output_path(path, "bundle")  # a dangling symlink fails here, not after collecting
    elif os.path.lexists(path):
        raise UsageError(
            f"{path} exists and is not a folder",
            "give a new folder name, an existing folder, or NAME.tar.gz",
        )


def _empty_analysis(hosts: tuple[str, ...], why: str, remedy: str) -> dict[str, Any]:
    """The analysis of nothing, for a run that got no snapshot in time."""
    from hangdoctor.target.base import HostResult

    results = [HostResult(name=h, error=why, remedy=remedy) for h in hosts] or [
        HostResult(name="?", error=why, remedy=remedy)
    ]
    try:
        from hangdoctor.triage.analyze import analyze

        return analyze([], [], command=_cli()._command_line(), host_results=results)
    except Exception as exc:  # the bundle must still be written
        return {
            "analysis_version": 1,
            "verdict": "inconclusive",
            "causes": [],
            "headline": why,
            "verdict_reason": why,
            "command": _cli()._command_line(),
            "problems": [f"analysis failed: {type(exc).__name__}: {exc}"],
        }


def _timeouts(snapshots: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """Sources that timed out (``host:source``), and whether one of them met the deadline."""
    out, at_deadline = [], False
    for snap in snapshots:
        host = (snap.get("host") or {}).get("name")
        for entry in snap.get("manifest") or []:
            if isinstance(entry, dict) and entry.get("status") == "timeout":
                out.append(f"{host}:{entry.get('source')}")
                at_deadline = at_deadline or "deadline" in str(entry.get("detail") or "")
    return out, at_deadline


def _host_error(name: str, error: str, remedy: str | None) -> str:
    text = error if error.startswith(f"{name}:") else f"{name}: {error}"
    return text + (f" ({remedy})" if remedy else "")


def take_snapshot(
    hosts: tuple[str, ...],
    kw: dict[str, Any],
    output: str | None,
    deadline_s: float,
    *,
    verbose: bool = False,
    started_s: float | None = None,
) -> SnapshotOutcome:
    """Collect, analyse and write one bundle within ``deadline_s``; never raises for the host.

    Collection gets ``deadline_s`` minus a reserve for analysis, rendering and writing. A host
    that cannot be reached, or a collection still busy at the deadline, still yields a bundle
    (MANIFEST + the analysis of what there is) and the could-not-collect exit code. Raises
    UsageError for bad options or an unwritable output path. ``started_s`` (a
    ``time.monotonic()`` value, default now) is when the deadline started counting.
    """
    t0 = time.monotonic() if started_s is None else started_s
    started_epoch_s = time.time() - (time.monotonic() - t0)
    if not hosts and not kw.get("hosts_file") and not kw.get("via"):
        raise UsageError("no host given", "hangdoctor snapshot localhost --pid PID")
    label = hosts[0] if len(hosts) == 1 else (f"{hosts[0]}+{len(hosts) - 1}" if hosts else "hosts")
    from hangdoctor import bundle as bundle_mod  # lazy: tarfile and hashlib, ~12 ms

    path = bundle_mod.resolve_output(output, label, started_epoch_s)
    _check_output(path)

    margin_s = _margin_s(deadline_s)
    # What is left after the collection wait: analysis (in the thread) must be done by then.
    write_reserve_s = max(1.0, margin_s / 2)
    collect_kw = {k: kw.get(k) for k in COLLECTION_KEYS}
    # A pre-kill bundle is written whatever the host does: for a pid that is gone the bundle
    # (log tail, kernel log: an OOM kill) still says why, and the verdict is "dead"; a --log
    # that is not there is a source that failed, in the bundle's manifest.
    collect_kw["take_what_there_is"] = True
    collect_s = max(MIN_COLLECT_S, t0 + deadline_s - margin_s - time.monotonic())
    collect_kw["deadline"] = collect_s
    # A tight deadline shrinks the sampling window rather than losing the whole snapshot.
    window_s = float(2.0 if kw.get("window") is None else kw["window"])
    collect_kw["window"] = min(window_s, max(0.2, collect_s * WINDOW_SHARE))
    if verbose:
        click.echo(
            f"hangdoctor snapshot: collecting from {', '.join(hosts) or kw.get('hosts_file')} "
            f"(collection {collect_s:.1f} s of --deadline {deadline_s:g} s)",
            err=True,
        )
    collector = _Collector(hosts, collect_kw)
    capture = None if verbose else io.StringIO()
    collect_t0 = time.monotonic()
    finished = collector.run(t0 + deadline_s - write_reserve_s - time.monotonic(), capture)
    collect_end = time.monotonic()

    problems: list[str] = []
    snapshots: list[dict[str, Any]] = []
    results: list[Any] = []
    errors: list[str] = []
    deadline_hit = False
    errors_shown = False
    if finished and collector.error is not None:
        exc = collector.error
        if isinstance(exc, HangdoctorError) and exc.exit_code == 2:
            raise exc  # bad options: nothing was collected, no bundle
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc
        why = f"collection failed: {type(exc).__name__}: {exc}"
        problems.append(why)
        errors.append(why)
        analysis = _empty_analysis(hosts, why, "this is a hangdoctor bug; please report it")
        code = _cli().EXIT_INTERNAL
    elif not finished or collector.result is None:
        deadline_hit = True
        why = f"no result within --deadline {deadline_s:g} s (collection budget {collect_s:.1f} s)"
        errors.append(why)
        analysis = _empty_analysis(hosts, why, "the host may be wedged; raise --deadline")
        code = _cli().EXIT_NO_COLLECT
    else:
        analysis, results, _wall = collector.result
        snapshots = [r.snapshot for r in results if r.snapshot is not None]
        for r in results:
            if r.error:
                errors.append(_host_error(r.name, r.error, r.remedy))
                deadline_hit = deadline_hit or "deadline" in r.error
        code = _cli()._exit_code(analysis, any(r.error for r in results))
        # With -v, _run_diagnosis has already printed the host errors.
        errors_shown = verbose
    timeouts, source_hit_deadline = _timeouts(snapshots)
    deadline_hit = deadline_hit or source_hit_deadline
    analysis["wall_s"] = round(time.monotonic() - t0, 3)
    messages = (capture.getvalue().splitlines() if capture is not None else [])[:MAX_KEPT_MESSAGES]

    meta = {
        "command": _cli()._command_line(),
        "hangdoctor_pid": os.getpid(),
        "deadline_s": deadline_s,
        "collection_budget_s": round(collect_s, 3),
        "window_s": collect_kw["window"],
        "timings_s": {
            "startup": round(collect_t0 - t0, 3),
            "collection_and_analysis": round(collect_end - collect_t0, 3),
        },
        "deadline_hit": deadline_hit,
        "timeouts": timeouts,
        "exit_code": code,
        "hosts": [
            {
                "name": r.name,
                "ok": not r.error,
                "error": r.error,
                "remedy": r.remedy,
                "duration_s": round(r.duration_s, 3),
            }
            for r in results
        ]
        or [{"name": h, "ok": False, "error": errors[0] if errors else None} for h in hosts],
        "messages": messages,
    }
    try:
        written = bundle_mod.write_bundle(
            path, snapshots=snapshots, analysis=analysis, meta=meta, started_epoch_s=started_epoch_s
        )
    except OSError as exc:
        raise UsageError(
            f"cannot write the bundle {path}: {exc.strerror or exc}", "give a writable -o"
        ) from None
    problems += written.problems
    return SnapshotOutcome(
        bundle=path,
        analysis=analysis,
        exit_code=code,
        duration_s=time.monotonic() - t0,
        deadline_hit=deadline_hit,
        errors=errors,
        problems=problems,
        collector_alive=collector.thread.is_alive(),
        errors_shown=errors_shown,
    )


def _collection_options(
    deadline_default_s: float, deadline_help: str, port_help: str | None = None
) -> Any:
    """cli.py's collection options, with this command's own --deadline default (and --port help)."""

    def decorate(f: Any) -> Any:
        f = _cli()._diagnose_options(f)
        for param in getattr(f, "__click_params__", []):
            if param.name == "deadline":
                param.default = deadline_default_s
                param.help = deadline_help
            elif param.name == "port" and port_help:
                param.help = port_help
        return click.option(
            "--checks-dir",
            "checks_dirs",
            multiple=True,
            type=click.Path(file_okay=False),
            help="also load the checks in this folder",
        )(f)

    return decorate


def _finish(code: int, hurry: bool) -> None:
    """Exit with ``code``; with ``hurry``, skip interpreter teardown: a wedged collector thread
    (its executor threads are joined at exit) or a loaded machine could outlast the deadline."""
    if hurry:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM ends the run through SystemExit, so half-written temporaries are removed."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


BUNDLE_EPILOG = """

\b
The bundle (a folder, or NAME.tar.gz / NAME.tgz):
  MANIFEST.json   every file with size and sha256, the source manifest, the
                  version, the command line (redacted), times, deadline_hit
  snapshot.json   the raw snapshot     analysis.json  the analysis
  report.html     report.md            raw/stacks/PID.txt (py-spy text), PID.json
  raw/processes.json  raw/gpus.json  raw/log-tail.txt  raw/kernel.txt  raw/http.json"""


def snapshot_main(
    hosts: tuple[str, ...], output: str | None, as_json: bool, verbose: bool, **kw: Any
) -> None:
    """Save a pre-kill snapshot bundle of the server(s) on HOST, within --deadline, whatever
    the host does. Quiet: prints the bundle path (or, with --json, one JSON line) on stdout,
    nothing on stderr unless -v or an error. Never signals the server.

    \b
      hangdoctor snapshot localhost --pid 46294 -o before-restart.tar.gz --deadline 10
    """
    started_s = time.monotonic() - process_age_s()
    with _sigterm_raises():
        outcome = take_snapshot(
            hosts, kw, output, kw["deadline"], verbose=verbose, started_s=started_s
        )
    for line in [] if outcome.errors_shown else outcome.errors:
        click.echo(clean_text(f"hangdoctor: {line}"), err=True)
    for line in outcome.problems:
        if line not in outcome.errors:
            click.echo(clean_text(f"hangdoctor: warning: {line}"), err=True)
    if verbose:
        from hangdoctor.report.render import render_terminal

        try:
            width, use_color = _cli().terminal_style(sys.stderr)
            click.echo(
                render_terminal(outcome.analysis, color=use_color, width=width).rstrip("\n"),
                err=True,
                color=use_color,
            )
        except Exception as exc:  # the summary is a courtesy; the bundle is written
            click.echo(clean_text(f"hangdoctor: warning: no terminal summary: {exc}"), err=True)
        click.echo(f"bundle: {outcome.bundle} ({outcome.duration_s:.1f} s)", err=True)
    if as_json:
        click.echo(json.dumps(outcome.summary()))
    else:
        click.echo(outcome.bundle)
    time_left_s = started_s + kw["deadline"] - time.monotonic()
    _finish(outcome.exit_code, outcome.collector_alive or time_left_s < HURRY_S)


# ------------------------------------------------------------------ watch

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
    **kw: Any,
) -> None:
    """Watch HOST's server health; when it has failed for --after seconds, take ONE snapshot
    bundle into --out-dir, run --then once, and wait for health to come back before the next
    incident. Polls --url and/or TCP --port (at least one). Logs one line per state change on
    stderr. SIGTERM/SIGINT stop it (exit 0) after the current step.

    \b
      hangdoctor watch localhost --pid 46294 --url http://127.0.0.1:8000/health \\
          --after 120 --out-dir /var/tmp/hangs --then 'systemctl restart vllm'
    """
    from hangdoctor import watch as watch_mod
    from hangdoctor.target.multi import parse_pid_args

    ports = list(kw.get("port") or [])
    urls = [url] if isinstance(url, str) else list(url or [])
    if kw.get("hosts_file"):
        raise UsageError("watch takes one HOST, not --hosts", "run one watch per host")
    # Refuse bad --pid / --checks-dir now, not at the first incident hours later.
    parse_pid_args(list(kw.get("pids") or []), [host])
    _cli()._load_checks(kw.get("checks_dirs") or ())
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

    log = watch_mod.Logger(verbose=verbose)
    timeout_s = min(interval_s, 10.0)
    tcp_host = watch_mod.tcp_host_of(host)

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

    old_handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    what = " and ".join(filter(None, [", ".join(urls), ", ".join(f"port {p}" for p in ports)]))
    log(
        f"watching {host}: {what} every {interval_s:g} s; snapshot after {after_s:g} s failing, into {out_dir}"
    )
    try:
        watch_mod.watch_loop(
            poll,
            on_incident,
            interval_s=interval_s,
            after_s=after_s,
            stop=stop,
            log=log,
            max_incidents=1 if once else max_snapshots,
        )
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    log(f"{received[0]}: stopped" if received else "stopped")
    _finish(0, state["collector_alive"])


def _build_commands() -> list[click.Command]:
    """The click commands, decorated with cli.py's options (built on first registration)."""
    cli = _cli()

    @click.command(
        "snapshot", help=snapshot_main.__doc__, epilog=cli.EXIT_CODES_HELP + BUNDLE_EPILOG
    )
    @click.argument("hosts", nargs=-1)
    @_collection_options(
        SNAPSHOT_DEADLINE_S, "hard limit for the whole run, bundle written included, in seconds"
    )
    @click.option(
        "-o",
        "--output",
        default=None,
        type=click.Path(),
        help="bundle path: NAME.tar.gz / NAME.tgz (archive), a new folder, or an existing folder "
        "to put a default-named archive in (default: ./hangdoctor-snapshot-HOST-TIME.tar.gz)",
    )
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="print one JSON line: verdict, top_cause, score, bundle, exit_code, duration_s",
    )
    @click.option(
        "-v", "--verbose", is_flag=True, help="progress and the terminal summary on stderr"
    )
    def snapshot(**kw: Any) -> None:
        snapshot_main(**kw)

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
    @click.option("-v", "--verbose", is_flag=True, help="also log every poll")
    def watch(**kw: Any) -> None:
        watch_main(**kw)

    return [snapshot, watch]  # type: ignore[list-item]


_COMMANDS: list[click.Command] = []


def register(main: click.Group) -> None:
    """Add ``snapshot`` and ``watch`` to the CLI group (idempotent)."""
    if not _COMMANDS:
        _COMMANDS.extend(_build_commands())
    for command in _COMMANDS:
        if command.name not in main.commands:
            main.add_command(command)
