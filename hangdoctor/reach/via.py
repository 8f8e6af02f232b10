"""``--via 'COMMAND …'``: the probe runs through any command that gives a shell's stdin and
stdout in the target's namespaces: ``podman exec -i NAME``, ``nsenter -t PID -a``,
``srun --overlap --jobid J -w NODE``, ``enroot exec PID``, ``ssh -J bastion node``.

The command line is split as a POSIX shell would, and ``sh -c SCRIPT`` is appended to it as
arguments. ``ssh`` joins its arguments into one command line for the remote shell, so after
``ssh`` the script is appended as one quoted word instead.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Optional

from hangdoctor.errors import UsageError
from hangdoctor.reach.exec_pipe import ExecPipeTarget

# Commands that hand their arguments to a remote shell as one string.
_REMOTE_SHELL_COMMANDS = ("ssh", "autossh", "gcloud", "mosh")


def parse_via(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"--via {command!r}: {exc}", "quote it like a shell command") from None
    if not argv:
        raise UsageError("--via needs a command", "e.g. --via 'podman exec -i NAME'")
    return argv


class ViaTarget(ExecPipeTarget):
    runtime = "via"

    def __init__(self, command: str, *, name: Optional[str] = None, **kwargs: Any) -> None:
        argv = parse_via(command)
        remote = os.path.basename(argv[0]) in _REMOTE_SHELL_COMMANDS
        super().__init__(name or f"via:{command}", argv, quote_for_shell=remote, **kwargs)
