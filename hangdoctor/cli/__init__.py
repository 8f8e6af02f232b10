"""The command line: the click group ``main``, its commands, and ``run()`` (the console entry).

Only this package turns errors into messages and exit codes. stdout carries the requested
output (``--json`` means pure JSON); the terminal summary, progress and errors go to stderr.
Each command lives in its own ``cmd_<name>`` module; what several commands share lives in
``options``, ``diagnosis``, ``documents``, ``nextcmd`` and ``prekill``. Dependencies flow one way: this
module imports the command modules, they import the shared modules, never the reverse.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's modules.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from hangdoctor import __version__
from hangdoctor.cli.options import EXIT_INTERNAL, _err
from hangdoctor.errors import HangdoctorError

# command name -> (module, attribute). A command's module is imported when that command runs
# (or for --help): `hangdoctor probe`, run every few seconds by a kubelet, pays for click and
# itself, not for the analysis and report modules the other commands import (~60 ms of CPU).
COMMANDS = {
    "diagnose": ("cmd_diagnose", "diagnose"),
    "analyze": ("cmd_analyze", "analyze"),
    "report": ("cmd_report", "report"),
    "checks": ("cmd_checks", "list_checks"),
    "demo": ("cmd_demo", "demo"),
    "snapshot": ("cmd_snapshot", "snapshot"),
    "watch": ("cmd_watch", "watch"),
    "probe": ("cmd_probe", "probe"),
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in COMMANDS and name not in self.commands:
            import importlib

            module, attr = COMMANDS[name]
            self.add_command(getattr(importlib.import_module(f"hangdoctor.cli.{module}"), attr), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HangdoctorError as exc:
            _err(f"hangdoctor: {exc.one_line()}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _err("hangdoctor: interrupted")
            ctx.exit(130)
        except click.UsageError as exc:
            # click's own form is three lines (usage, a hint, the error); ours is one, with
            # where to look, as for every other error
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            _err(f"hangdoctor: {exc.format_message().rstrip('.')} (see: {where} --help)")
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except BrokenPipeError:  # `hangdoctor checks | head`: the reader left, that is fine
            import os

            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), sys.stdout.fileno())
            ctx.exit(0)
        except Exception as exc:  # never a traceback on the terminal
            import os
            import traceback

            if os.environ.get("HANGDOCTOR_DEBUG"):
                traceback.print_exc()
            _err(f"hangdoctor: internal error: {type(exc).__name__}: {exc} "
                 "(please report it; HANGDOCTOR_DEBUG=1 shows the traceback)")
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="hangdoctor")
def main() -> None:
    """Is the inference server hung, and why? Collects evidence from a live host (local or over
    SSH), runs checks over it, ranks the likely causes, and writes a report.

    \b
      hangdoctor diagnose localhost --pid 46294 -o report.html
      hangdoctor diagnose root@gpu-node-3            # find the servers there
      hangdoctor analyze pasted-dump.txt server.log  # evidence from a ticket
      hangdoctor demo                                # a real diagnosis of a built-in hung server
    """




def run() -> None:
    """The console entry point: ``main``, then leave without tearing the interpreter down.

    Every command closes what it opened itself (connections, scenario processes, temp dirs),
    so the interpreter's own shutdown only frees modules: ~70 ms with asyncssh and the
    analysis loaded, paid after the answer is out. Tests drive ``main`` through CliRunner.
    """
    try:
        main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        _err(str(code))
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader left (`| head`) or the stream was closed
            pass
    os._exit(code)
