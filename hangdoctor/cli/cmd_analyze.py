"""``hangdoctor analyze``: saved snapshots, bundles or pasted evidence, analysed without the host.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, documents), never another command module.
"""

from __future__ import annotations

import sys

import click

from hangdoctor.cli.documents import _read_documents
from hangdoctor.cli.options import (
    _NO_REDACT_ON_LOAD,
    EXIT_CODES_HELP,
    _command_line,
    _emit,
    _err,
    _exit_code,
    _load_checks,
    _output_options,
    check_report_path,
)
from hangdoctor.errors import InputError

_WHAT_IS_READ = ("give py-spy dumps, faulthandler dumps, tracebacks, server / NCCL logs, dmesg, "
                 "nvidia-smi, ps or env output, a saved snapshot or a snapshot bundle")


@click.command("analyze", epilog=EXIT_CODES_HELP)
@click.argument("evidence", nargs=-1, required=True)
@_output_options
@_NO_REDACT_ON_LOAD
def analyze(evidence: tuple[str, ...], output: str | None, fmt: str | None, as_json: bool,
            checks_dirs: tuple[str, ...], quiet: bool, wide: bool, color: str,
            no_redact: bool = False) -> None:
    """Analyse saved snapshots, snapshot bundles (NAME.tar.gz or the folder) or raw evidence
    pasted in a ticket (py-spy dumps, logs, dmesg, nvidia-smi, ps, env): any mix, any file
    names; a folder stands for its files; - reads standard input."""
    from hangdoctor.snapshot.io import mark_unredacted
    from hangdoctor.triage.analyze import analyze as run_analysis

    check_report_path(output, fmt)
    checks = _load_checks(checks_dirs)
    notes: list[str] = []
    snapshots, texts, unrecognised, typed = _read_documents(evidence, redact=not no_redact, notes=notes)
    for line in notes:
        _err(f"hangdoctor: {line}")
    if texts:
        from hangdoctor.parsers.assemble import analyze_inputs

        pasted = analyze_inputs(texts)
        entries = {e.get("source"): e for e in pasted.get("pasted") or [] if isinstance(e, dict)}
        empty = [n for n, _t in texts if n in entries and not entries[n].get("kinds")]
        unrecognised += [typed.get(n, n) for n in empty]
        if len(empty) < len(texts):
            snapshots.append(pasted)
    if unrecognised and not snapshots:
        raise InputError(f"nothing recognised in {', '.join(unrecognised)}", _WHAT_IS_READ)
    if len(unrecognised) > 3:  # a folder's worth: one line, not one per file
        _err(f"hangdoctor: warning: nothing recognised in {len(unrecognised)} files "
             f"({', '.join(unrecognised[:3])}, …); left out")
    else:
        for name in unrecognised:
            _err(f"hangdoctor: warning: nothing recognised in {name}; left out")
    analysis = run_analysis(snapshots, checks, command=_command_line())
    mark_unredacted(analysis, snapshots)
    _emit(analysis, output, fmt, as_json, quiet, wide=wide, color=color)
    sys.exit(_exit_code(analysis, False))
