"""The command printed to run next, made runnable as printed: the target as the user reached
it (``--via 'CMD'`` quoted, a host name quoted for the shell), the options that reach it again
(``-i``, ``--known-hosts``, ``--ssh-config``, ``--ssh-option``, ``--sudo``, ``--context``,
``--kubeconfig``, ``--checks-dir``, the ``--log`` given) and the values this run knows in place
of placeholders (``HOST``, ``PID``). Triage writes the command from the evidence alone; only
the command line knows how the host was reached.

Layer: cli; may import: the standard library and hangdoctor.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

DIAGNOSE = "hangdoctor diagnose "


def target_words(name: str) -> str:
    """How to name this target on a command line again."""
    if name.startswith("via:"):
        return "--via " + shlex.quote(name[len("via:"):])
    return shlex.quote(name)


def carried_options(kw: dict[str, Any], command: str) -> list[str]:
    """The options of this run that the next run needs to reach the same target."""
    out: list[str] = []
    for key in kw.get("identity") or ():
        out += ["-i", key]
    if kw.get("known_hosts"):
        out += ["--known-hosts", kw["known_hosts"]]
    if kw.get("ssh_config"):
        out += ["--ssh-config", kw["ssh_config"]]
    for opt in kw.get("ssh_option") or ():
        out += ["--ssh-option", opt]
    if kw.get("sudo"):
        out.append("--sudo")
    if kw.get("context"):
        out += ["--context", kw["context"]]
    if kw.get("kubeconfig"):
        out += ["--kubeconfig", kw["kubeconfig"]]
    for d in kw.get("checks_dirs") or ():
        out += ["--checks-dir", d]
    if kw.get("log") and " --log " not in command:
        out += ["--log", kw["log"]]
    return [shlex.quote(x) for x in out]


def runnable(command: str | None, kw: dict[str, Any], targets: list[str],
             pids: dict[str, list[int]] | None = None) -> str | None:
    """``command`` with its ``hangdoctor diagnose`` part made runnable as printed."""
    if not command or DIAGNOSE not in command:
        return command
    head, _, rest = command.partition(DIAGNOSE)
    # the command's words end where its comment starts
    m = re.search(r"\s+#", rest)
    words, comment = (rest[: m.start()], rest[m.start():]) if m else (rest, "")
    for name in sorted(targets, key=len, reverse=True):
        if words == name or words.startswith(name + " "):
            words = target_words(name) + words[len(name):]
            break
    else:
        if len(targets) == 1 and (words == "HOST" or words.startswith("HOST ")):
            words = target_words(targets[0]) + words[len("HOST"):]
    given = [p for ps in (pids or {}).values() for p in ps]
    if len(given) == 1:
        words = re.sub(r"(--pid )PID\b", rf"\g<1>{given[0]}", words)
    extra = carried_options(kw, words)
    if extra:
        # before -o, which reads best last; else at the end of the words
        at = words.find(" -o ")
        words = (words[:at] + " " + " ".join(extra) + words[at:]) if at >= 0 else (words + " " + " ".join(extra))
    return head + DIAGNOSE + words + comment
