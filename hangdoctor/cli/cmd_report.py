"""``hangdoctor report``: re-render a saved analysis, a snapshot or a bundle without the host.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, documents), never another command module.
"""

from __future__ import annotations

import os
import sys

import click

from hangdoctor import bounded
from hangdoctor.cli.documents import _bundle_documents
from hangdoctor.cli.options import (
    _NO_REDACT_ON_LOAD,
    _command_line,
    _err,
    _load_checks,
    check_report_path,
)
from hangdoctor.errors import InputError, UsageError


@click.command("report", epilog="Without -o: Markdown on stdout (--format json: JSON; --format html: NAME.html).")
@click.argument("document")
@click.option("-o", "--output", default=None, type=click.Path(),
              help="report file; the format follows the suffix (.html, .md, .json); - for stdout")
@click.option("--format", "fmt", type=click.Choice(["html", "json", "md"]), default=None,
              help="report format when -o's suffix does not say, or for stdout")
@click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False),
              help="also load the checks in this folder (when DOCUMENT is a snapshot)")
@_NO_REDACT_ON_LOAD
def report(document: str, output: str | None, fmt: str | None, checks_dirs: tuple[str, ...],
           no_redact: bool = False) -> None:
    """Re-render a saved analysis, a snapshot or a snapshot bundle (NAME.tar.gz or its
    folder) without the host. Without -o the report goes to stdout, as Markdown."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.report.render import render_json, render_markdown, write_report
    from hangdoctor.snapshot import io as snapshot_io
    from hangdoctor.triage.analyze import analyze as run_analysis

    check_report_path(output, fmt)
    bundle = _bundle_documents(document) if document != "-" else None
    if bundle is not None:
        # the bundle's analysis is what was concluded at the time; re-analyse only without it
        kind, text = ("analysis", bundle["analysis.json"]) if "analysis.json" in bundle \
            else ("snapshot", bundle["snapshot.json"])
        name = document
    else:
        whole = snapshot_io.read_snapshot_file(document) if document != "-" else None
        name, text = (document, whole) if whole is not None else read_input(document)
        kind = sniff_json_document(text, name)
    if kind == "analysis":
        analysis = bounded.loads(text, name)  # its depth too (sniffing checked the rest)
        if not no_redact:
            analysis = snapshot_io.redact_loaded_analysis(analysis)
    elif kind == "snapshot":
        snaps = snapshot_io.load_snapshot_text(text, name, redact=not no_redact)
        analysis = run_analysis(snaps, _load_checks(checks_dirs), command=_command_line())
        snapshot_io.mark_unredacted(analysis, snaps)
    else:
        raise InputError(f"{name} is neither a hangdoctor analysis, a snapshot nor a bundle",
                         f"for raw evidence use: hangdoctor analyze {document}")
    if not output or output == "-":
        if fmt == "html" and not output:
            stem = os.path.basename(document.rstrip("/")) if document != "-" else "report"
            for suffix in (".tar.gz", ".tgz", ".json"):
                if stem.endswith(suffix):
                    stem = stem[: -len(suffix)]
            output = f"{stem or 'report'}.html"
        else:
            body = render_json(analysis) if fmt == "json" else render_markdown(analysis)
            sys.stdout.write(body if body.endswith("\n") else body + "\n")
            return
    try:
        used = write_report(analysis, output, fmt)
    except ValueError as exc:
        raise UsageError(str(exc), "use -o report.html, report.md or report.json") from None
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}", "choose a writable path") from None
    _err(f"report: {output} ({used})")
