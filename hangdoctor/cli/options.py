"""What the commands share: exit codes, click option decorators, messages on stderr, the
terminal's style, loading the checks, writing a report and the exit code it gives.

No command lives here, and nothing here imports a command module.

Layer: cli; may import: the standard library, click and hangdoctor outside hangdoctor.cli.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from hangdoctor.errors import UsageError

# Exit codes (also in the README): a script can act on them.
EXIT_HEALTHY = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_HUNG = 3
EXIT_NO_COLLECT = 4
EXIT_PROGRESSING = 5
EXIT_DEAD = 6
EXIT_INCONCLUSIVE = 7
VERDICT_EXIT = {
    "healthy": EXIT_HEALTHY,
    "hung": EXIT_HUNG,
    "progressing": EXIT_PROGRESSING,
    "dead": EXIT_DEAD,
    "inconclusive": EXIT_INCONCLUSIVE,
}
EXIT_CODES_HELP = """\b
Exit codes:
  0  healthy            3  hung              5  progressing (slow, not hung)
  6  dead               7  inconclusive      4  could not collect (host or source failed;
  2  bad usage or input                         a partial report is still written; nothing
  1  internal error                             collected: the error line only)"""


def _err(msg: str) -> None:
    from hangdoctor.textsafe import clean_text  # remote text never reaches the terminal raw

    click.echo(clean_text(msg), err=True)


def _output_options(f: Any) -> Any:
    f = click.option("-o", "--output", "output", type=click.Path(), default=None,
                     help="write the report here; the format follows the suffix (.html, .md, .json)")(f)
    f = click.option("--format", "fmt", type=click.Choice(["html", "json", "md"]), default=None,
                     help="report format when the suffix does not say")(f)
    f = click.option("--json", "as_json", is_flag=True, help="print the analysis as JSON on stdout (only JSON)")(f)
    f = click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="also load the checks in this folder")(f)
    f = click.option("-q", "--quiet", is_flag=True, help="no terminal summary")(f)
    return _terminal_options(f)


def _terminal_options(f: Any) -> Any:
    f = click.option("--wide", is_flag=True,
                     help="never cut the summary's lines to the terminal's width")(f)
    f = click.option("--color", "color", type=click.Choice(["auto", "always", "never"]),
                     default="auto", show_default=True,
                     help="colour in the summary; auto: on a terminal, unless NO_COLOR is set")(f)
    return f


def _stream_is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def terminal_style(stream: Any, wide: bool = False, color: str = "auto") -> tuple[int | None, bool]:
    """(width, colour) for a summary written to ``stream``.

    Width: None (cut nothing) when the stream is not a terminal or with ``--wide``; else
    ``COLUMNS`` when it is set (as shells and tmux export it), else the terminal's own width.
    Colour: ``--color always|never``; auto means a terminal, no ``NO_COLOR`` (no-color.org:
    any non-empty value), and not ``TERM=dumb``. The command line beats the environment.
    """
    tty = _stream_is_tty(stream)
    width: int | None = None
    if tty and not wide:
        cols = os.environ.get("COLUMNS", "").strip()
        if cols.isdigit() and int(cols) > 0:
            width = int(cols)
        else:
            try:
                width = os.get_terminal_size(stream.fileno()).columns or 80
            except (AttributeError, ValueError, OSError):
                width = 80
    if color == "always":
        use_color = True
    elif color == "never":
        use_color = False
    else:
        use_color = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return width, use_color


def invoked_as() -> str:
    """How to run hangdoctor again from this shell: ``hangdoctor`` when that is on PATH and is
    this program, else the path it was run by (``.venv/bin/hangdoctor``) or
    ``PYTHON -m hangdoctor``: a command to copy must work without an activated venv."""
    import shutil

    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith(("__main__.py", "-c")) or not argv0:
        py = sys.executable or "python3"
        rel = os.path.relpath(py) if not os.path.relpath(py).startswith("../..") else py
        return f"{rel if len(rel) < len(py) else py} -m hangdoctor"
    on_path = shutil.which("hangdoctor")
    try:
        if on_path and os.path.samefile(on_path, argv0 if os.sep in argv0 else on_path):
            return "hangdoctor"
    except OSError:
        pass
    if os.sep not in argv0:
        return "hangdoctor"
    rel = os.path.relpath(argv0)
    return rel if len(rel) <= len(argv0) else argv0


def _load_checks(checks_dirs: tuple[str, ...]) -> list[Any]:
    from hangdoctor.checkapi.registry import all_checks

    checks, problems = all_checks(list(checks_dirs))
    for p in problems:
        _err(f"hangdoctor: warning: {p}")
    return checks


def _command_line() -> str:
    from hangdoctor.redact import redact_argv

    return " ".join(["hangdoctor"] + redact_argv(sys.argv[1:]))


def _emit(analysis: dict[str, Any], output: str | None, fmt: str | None, as_json: bool, quiet: bool,
          extra_paths: list[str] | None = None, wide: bool = False, color: str = "auto") -> None:
    from hangdoctor.report.render import render_json, render_terminal, write_report

    written = None
    if output:
        try:
            used = write_report(analysis, output, fmt)
        except ValueError as exc:
            raise UsageError(str(exc), "use -o report.html, report.md or report.json, or --format") from None
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}", "choose a writable path") from None
        written = f"{output} ({used})"
    if as_json:
        sys.stdout.write(render_json(analysis) + "\n")
        sys.stdout.flush()
    if not quiet:
        # The summary goes to stdout, or to stderr when stdout carries the JSON.
        stream = sys.stderr if as_json else sys.stdout
        width, use_color = terminal_style(stream, wide, color)
        shown = analysis
        nxt = str(analysis.get("next_command") or "")
        prog = invoked_as()
        if "hangdoctor diagnose " in nxt and prog != "hangdoctor":
            # the command to run next, as this shell can run it (no activated venv needed)
            shown = dict(analysis, next_command=nxt.replace("hangdoctor diagnose ", prog + " diagnose "))
        text = render_terminal(shown, color=use_color, width=width).rstrip("\n")
        if written:
            text += f"\nreport: {written}"
        for p in extra_paths or []:
            text += f"\n{p}"
        # colour=: click would strip our (already decided) colour codes off a pipe
        click.echo(text, err=as_json, color=use_color)


def _exit_code(analysis: dict[str, Any], host_failures: bool) -> int:
    if host_failures:
        return EXIT_NO_COLLECT
    return VERDICT_EXIT.get(analysis.get("verdict", "inconclusive"), EXIT_INCONCLUSIVE)


REPORT_SUFFIXES = (".html", ".htm", ".md", ".markdown", ".json")  # render.FORMATS' keys


def check_report_path(path: str | None, fmt: str | None, option: str = "-o") -> None:
    """Refuse, before collecting, a report path that could not be written."""
    if not path or path == "-":
        return
    if path.endswith(os.sep) or os.path.isdir(path):
        example = "snapshot.json" if option == "--save-snapshot" else "report.html"
        raise UsageError(f"{option} {path} is a folder", f"give a file name, e.g. {example}")
    suffix = os.path.splitext(path)[1].lower()
    if not fmt and suffix not in REPORT_SUFFIXES:
        raise UsageError(f"{option} {path}: unknown report format {suffix or '(no suffix)'!r}",
                         "use a name ending in .html, .md or .json, or add --format")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: folder {parent} does not exist", "create it, or give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: folder {parent} is not writable", "give a writable path")


def _check_window(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if 0 < value < 0.2:
        raise click.BadParameter("give 0 (one sample) or at least 0.2 seconds", ctx=ctx, param=param)
    return value


def _diagnose_options(f: Any) -> Any:
    opts = [
        click.option("--pid", "pids", multiple=True, metavar="PID", help="root PID of the server (repeat; HOST:PID with several hosts); default: find the servers"),
        click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False), help="file of hosts, one a line (optional pid=1,2 after the host); or slurm:JOBID, slurm+ssh:JOBID, k8s:[NS/]SELECTOR"),
        click.option("--via", multiple=True, metavar="COMMAND", help="run the probe through this command, e.g. 'podman exec -i NAME', 'nsenter -t PID -a' (repeat)"),
        click.option("--context", default=None, help="kubectl context for k8s: targets"),
        click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None, help="kubeconfig for k8s: targets"),
        click.option("--port", type=int, multiple=True, metavar="PORT",
                     help="the server's API port: without --pid, the process listening on it is the one diagnosed; also probed over HTTP"),
        click.option("--log", type=str, default=None, metavar="FILE", help="the server's log file (on the target host)"),
        click.option("--window", type=click.FloatRange(0, 600), default=2.0, show_default=True, callback=_check_window,
                     help="sampling window in seconds (0.2 or more); 0: one sample, no window: faster, but progress cannot be seen"),
        click.option("--deadline", type=click.FloatRange(5, 3600), default=45.0, show_default=True, help="hard limit for the whole collection, in seconds"),
        click.option("--native", is_flag=True, help="py-spy --native (C/CUDA frames; ~0.5 s per torch process)"),
        click.option("--locals", is_flag=True, help="py-spy --locals (redacted; may still show prompts)"),
        click.option("--sudo", is_flag=True, help="run py-spy through sudo -n on the target"),
        click.option("--no-gpu", is_flag=True, help="do not query NVML"),
        click.option("--no-nccl-ras", is_flag=True, help="do not query NCCL RAS (read-only; on by default when a process loaded NCCL)"),
        click.option("--fr-dump", is_flag=True, help="ask each NCCL rank to dump its Flight Recorder (writes to TORCH_NCCL_DEBUG_INFO_PIPE_FILE; opt-in)"),
        click.option("--no-redact", is_flag=True, help="keep secrets in the output: for private use only"),
        click.option("-i", "--identity", multiple=True, type=click.Path(), help="SSH private key (repeat)"),
        click.option("--ssh-option", multiple=True, help="SSH option as Key=Value (e.g. Port=2222, User=ops)"),
        click.option("--ssh-config", type=click.Path(dir_okay=False), default=None, help="OpenSSH client config (default ~/.ssh/config)"),
        click.option("--known-hosts", type=click.Path(dir_okay=False), default=None, help="known_hosts file (default ~/.ssh/known_hosts)"),
        # issue 13: engine progress
        click.option("--probe-generate", is_flag=True,
                     help="send one 1-token completion after the window (model from /v1/models); off by default"),
        click.option("--api-key", envvar="HANGDOCTOR_API_KEY", default=None, show_envvar=True,
                     help="API key for --probe-generate (never written to reports)"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _collection_options(
    deadline_default_s: float, deadline_help: str, port_help: str | None = None
) -> Any:
    """diagnose's collection options (for snapshot and watch), with this command's own
    --deadline default (and --port help)."""

    def decorate(f: Any) -> Any:
        f = _diagnose_options(f)
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


_NO_REDACT_ON_LOAD = click.option(
    "--no-redact", is_flag=True,
    help="keep the secrets of a snapshot taken with --no-redact: for private use only")
