"""``hangdoctor snapshot``: save a pre-kill snapshot bundle of the server(s), within --deadline.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, prekill), never another command module.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from typing import Any, Iterator

import click

from hangdoctor.cli.options import EXIT_CODES_HELP, _collection_options, terminal_style
from hangdoctor.cli.prekill import (
    HURRY_S,
    SNAPSHOT_DEADLINE_S,
    _finish,
    process_age_s,
    take_snapshot,
)
from hangdoctor.textsafe import clean_text


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
            width, use_color = terminal_style(sys.stderr)
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


@click.command(
    "snapshot", help=snapshot_main.__doc__, epilog=EXIT_CODES_HELP + BUNDLE_EPILOG
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
