"""A pre-kill snapshot bundle within a deadline, whatever the host does: ``take_snapshot``,
used by the snapshot and watch commands.

The bundle format lives in ``hangdoctor.bundle``; the collection and analysis in
``hangdoctor.cli.diagnosis``.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, diagnosis).
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import click

from hangdoctor.cli.diagnosis import _run_diagnosis
from hangdoctor.cli.options import EXIT_INTERNAL, EXIT_NO_COLLECT, _command_line, _exit_code
from hangdoctor.errors import HangdoctorError, UsageError

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
            self.result = _run_diagnosis(hosts, kw)
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
    from hangdoctor.reach.base import HostResult

    results = [HostResult(name=h, error=why, remedy=remedy) for h in hosts] or [
        HostResult(name="?", error=why, remedy=remedy)
    ]
    try:
        from hangdoctor.triage.analyze import analyze

        return analyze([], [], command=_command_line(), host_results=results)
    except Exception as exc:  # the bundle must still be written
        return {
            "analysis_version": 1,
            "verdict": "inconclusive",
            "causes": [],
            "headline": why,
            "verdict_reason": why,
            "command": _command_line(),
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
        code = EXIT_INTERNAL
    elif not finished or collector.result is None:
        deadline_hit = True
        why = f"no result within --deadline {deadline_s:g} s (collection budget {collect_s:.1f} s)"
        errors.append(why)
        analysis = _empty_analysis(hosts, why, "the host may be wedged; raise --deadline")
        code = EXIT_NO_COLLECT
    else:
        analysis, results, _wall = collector.result
        snapshots = [r.snapshot for r in results if r.snapshot is not None]
        for r in results:
            if r.error:
                errors.append(_host_error(r.name, r.error, r.remedy))
                deadline_hit = deadline_hit or "deadline" in r.error
        code = _exit_code(analysis, any(r.error for r in results))
        # With -v, _run_diagnosis has already printed the host errors.
        errors_shown = verbose
    timeouts, source_hit_deadline = _timeouts(snapshots)
    deadline_hit = deadline_hit or source_hit_deadline
    analysis["wall_s"] = round(time.monotonic() - t0, 3)
    messages = (capture.getvalue().splitlines() if capture is not None else [])[:MAX_KEPT_MESSAGES]

    meta = {
        "command": _command_line(),
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


def _finish(code: int, hurry: bool) -> None:
    """Exit with ``code``; with ``hurry``, skip interpreter teardown: a wedged collector thread
    (its executor threads are joined at exit) or a loaded machine could outlast the deadline."""
    if hurry:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
