"""``hangdoctor diagnose``: collect from the host(s), analyse, write the report and the snapshot.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, diagnosis, nextcmd), never another command module.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from hangdoctor.cli.diagnosis import _run_diagnosis, deadline_for_window, window_that_fits
from hangdoctor.cli.nextcmd import runnable
from hangdoctor.cli.options import (
    EXIT_CODES_HELP,
    EXIT_NO_COLLECT,
    _diagnose_options,
    _emit,
    _err,
    _exit_code,
    _output_options,
    check_report_path,
)
from hangdoctor.errors import UsageError


def _render_json(analysis: dict[str, Any]) -> str:
    from hangdoctor.report.render import render_json

    return render_json(analysis)


def _given_source_failed(results: list[Any], kw: dict[str, Any]) -> bool:
    """A --log that does not exist on a host (found out there, after collection): exit 4, as
    for a source that could not be collected; the summary says which and why. A log that is
    there but could not be read whole (rotated into a FIFO mid-window) keeps the verdict's code."""
    if not kw.get("log"):
        return False
    return any(isinstance(m, dict) and m.get("source") == "log" and m.get("status") == "failed"
               and "No such file" in str(m.get("detail") or "")
               for r in results for m in (r.snapshot or {}).get("manifest") or [])


def _save_snapshots(path: str, results: list[Any], derived: bool = False) -> None:
    snaps = [r.snapshot for r in results if r.snapshot is not None]
    doc: Any = snaps[0] if len(snaps) == 1 else {"schema_version": 1, "hosts": snaps}
    from hangdoctor.snapshot.io import write_snapshot_file

    try:
        write_snapshot_file(path, doc, derived=derived)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", "choose a writable path") from None


def _fit_window(kw: dict[str, Any]) -> None:
    """A --window longer than the deadline leaves room for is not cut without a word: without
    --deadline the deadline grows to hold it; with one, a warning says what will be measured."""
    window, deadline = float(kw.get("window") or 0.0), float(kw.get("deadline") or 45.0)
    if window <= 0 or window_that_fits(window, deadline) >= window:
        return
    need = deadline_for_window(window)
    source = click.get_current_context().get_parameter_source("deadline")
    if source in (None, click.core.ParameterSource.DEFAULT):
        kw["deadline"] = need
        return
    _err(f"hangdoctor: warning: --window {window:g} does not fit in --deadline {deadline:g}: "
         f"the window is cut to {window_that_fits(window, deadline):.1f} s "
         f"(--deadline {need:g} or more keeps it whole)")


@click.command("diagnose", epilog=EXIT_CODES_HELP)
@click.argument("hosts", nargs=-1)
@_diagnose_options
@_output_options
@click.option("--save-snapshot", type=click.Path(), default=None,
              help="save the raw snapshot JSON here (default: next to -o as NAME.snapshot.json)")
def diagnose(hosts: tuple[str, ...], **kw: Any) -> None:
    """Diagnose the inference server(s) on HOST: localhost, [user@]host[:port], an ssh alias,
    docker:NAME or k8s:[NAMESPACE/]POD[/CONTAINER]."""
    if not hosts and not kw.get("hosts_file") and not kw.get("via"):
        raise UsageError("no host given", "hangdoctor diagnose localhost --pid PID")
    # Every path is checked before the window starts, not after it.
    check_report_path(kw.get("output"), kw.get("fmt"))
    snap_path = kw.get("save_snapshot")
    derived = False
    from hangdoctor.outfile import companions_ok

    if not snap_path and kw.get("output") and companions_ok(kw["output"]):
        out = Path(kw["output"])
        snap_path = str(out.with_name(out.stem + ".snapshot.json"))
        derived = True  # a predictable name: never written through a symlink planted there
    if snap_path:
        check_report_path(snap_path, "json", "--save-snapshot" if kw.get("save_snapshot") else
                          f"-o {kw.get('output')}: the snapshot saved next to it,")
    _fit_window(kw)
    analysis, results, wall_s = _run_diagnosis(hosts, kw)
    analysis["wall_s"] = round(wall_s, 3)
    given = [int(p) for p in kw.get("pids") or () if str(p).isdigit()]
    analysis["next_command"] = runnable(analysis.get("next_command"), kw, [r.name for r in results],
                                        {"": given})
    if results and all(r.snapshot is None and r.error for r in results):
        # Nothing reached: each target's one line (what failed, what to do) is on stderr
        # already; a summary or a report of no evidence would only bury it. --json still
        # answers with the analysis, whose host results carry the same errors.
        analysis["exit_code"] = EXIT_NO_COLLECT
        if kw.get("as_json"):
            sys.stdout.write(_render_json(analysis) + "\n")
        sys.exit(EXIT_NO_COLLECT)
    extra = []
    if snap_path and any(r.snapshot for r in results):
        try:
            _save_snapshots(snap_path, results, derived)
            extra.append(f"snapshot: {snap_path}")
        except UsageError as exc:
            if not derived:
                raise
            _err(f"hangdoctor: warning: snapshot not saved: {exc.one_line()}")  # the report still is
    failures = any(r.error for r in results) or _given_source_failed(results, kw)
    # the exit code in the document too (diagnose.schema.json): a consumer of the JSON alone
    # tells "could not collect" from a verdict
    analysis["exit_code"] = _exit_code(analysis, failures)
    _emit(analysis, kw.get("output"), kw.get("fmt"), kw.get("as_json", False), kw.get("quiet", False), extra,
          wide=kw.get("wide", False), color=kw.get("color") or "auto")
    sys.exit(analysis["exit_code"])
