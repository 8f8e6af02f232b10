"""What the poster says was NOT there: negations in a ticket's prose, read as context.

A person's sentences are never matched as log lines (hangdoctor/parsers/prose.py), but one kind
of sentence carries a measurement the evidence may lack: "no Xid in dmesg", "nvidia-smi shows no
errors", "no OOM killer", "no worker died". Such a negation speaks (weakly) against the cause it
rules out; it never speaks for one, and a cause it speaks against still ranks on its own evidence.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re

from hangdoctor.checkapi import against, check, cleared, fired, skipped
from hangdoctor.evidence.model import Evidence

_NEG = r"(?:\bno\b|\bnot\b|\bnever\b|\bwithout\b|\bnothing\b|\bnone\b|\bisn't\b|\bwasn't\b|\bdidn't\b|\bdoesn't\b|\bzero\b)"
# (what is denied, the causes it speaks against, weight)
_DENIED: list[tuple[re.Pattern[str], tuple[str, ...], float, str]] = [
    (re.compile(_NEG + r"[^.;:!?]{0,40}\b(?:Xid|ECC|GPU errors?|fallen off the bus|NVRM)", re.I),
     ("gpu-fault",), 0.25, "the poster saw no Xid / ECC / GPU error"),
    (re.compile(_NEG + r"[^.;:!?]{0,40}\b(?:OOM|out of memory|oom[- ]kill\w*|OutOfMemory)", re.I),
     ("host-oom-or-swap", "gpu-oom"), 0.25, "the poster saw no out-of-memory"),
    (re.compile(_NEG + r"[^.;:!?]{0,40}\b(?:(?:worker|rank|process)(?:es)? (?:died|crashed|exited)|EngineDeadError|"
                r"crash(?:ed)?|segfault|core dump)", re.I),
     ("rank-died",), 0.2, "the poster saw no process die"),
    (re.compile(_NEG + r"[^.;:!?]{0,30}\b(?:compil\w+|nvcc|ptxas|JIT)", re.I),
     ("compile-in-progress",), 0.15, "the poster saw no compilation"),
]
# a sentence that denies, then affirms ("no Xid, but ...") is read only up to the "but"
_BUT = re.compile(r"\b(?:but|however|although|except)\b", re.I)


def _prose_lines(ev: Evidence) -> list[str]:
    out: list[str] = []
    for s in ev.snapshots:
        for item in s.get("pasted_prose") or []:
            if isinstance(item, dict) and not item.get("document"):
                out.extend(x for x in item.get("lines") or [] if isinstance(x, str))
    return out[:5000]


@check("prose.negations", "What the poster says was not there (prose, as context)", needs=[],
       causes=["gpu-fault", "host-oom-or-swap", "gpu-oom", "rank-died", "compile-in-progress"])
def prose_negations(ev: Evidence):
    """Reads the poster's sentences (never matched as log lines) for negations of an
    observation: "no Xid", "no OOM", "no worker died", "nothing compiles". Each speaks against
    the cause it denies; nothing here speaks for a cause.

    Confirm by hand: read the ticket's text; then `dmesg -T | grep -i -e xid -e oom` on the host.
    """
    lines = _prose_lines(ev)
    if not lines:
        return skipped(["pasted prose"], "no sentences of the poster's to read")
    signals = []
    seen: set[str] = set()
    for line in lines:
        head = _BUT.split(line, maxsplit=1)[0]
        for rx, causes, weight, what in _DENIED:
            m = rx.search(head)
            if not m or what in seen:
                continue
            seen.add(what)
            quote = line.strip()[:160]
            for c in causes:
                signals.append(against(c, weight, f"{what}: \"{quote}\""))
    if not signals:
        return cleared("the poster's sentences deny nothing the checks weigh")
    return fired(f"the poster rules out {len(seen)} observation(s)", *signals)
