"""What the libraries themselves print: every program line matched against the message
templates read out of their own source (``hangdoctor/knowledge/generated/messages.json``).

Each template carries its package and version, the phase it belongs to, whether it is a
mechanism (it says why), a symptom (it says only that someone is stuck) or progress, and the
causes it points to. A line that matches speaks for those causes at the template's weight; a
symptom never for more than the symptom cap, so the line people see most ("No available shared
memory broadcast block") points the search and never decides it.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re
from typing import Any

from hangdoctor.checkapi import Signal, against, check, cleared, fired, skipped, support
from hangdoctor.evidence.model import Evidence
from hangdoctor.knowledge.matcher import SYMPTOM_CAP, view_of_evidence

MECHANISM_CAP = 0.45  # one library line, however telling, is one observation
MAX_LINES = 30000

# a wait that ran out of time, raised by the waiting side: vLLM's multiproc_executor.get_response
# (mq.dequeue(timeout=...) -> TimeoutError, "RPC call to {method} timed out"), shm_broadcast's
# dequeue, torch's ProcessGroupNCCL watchdog ("Watchdog caught collective operation timeout",
# then "To avoid data inconsistency, we are taking the entire process down"), c10d's store
_TIMEOUT = re.compile(r"\bTimeoutError\b|\btimed out\b|Watchdog caught collective operation timeout|"
                      r"DistStoreError\b.*[Tt]imeout")
# a process that died on its own: a signal, the OOM killer, an exit code (before any timeout)
_DIED = re.compile(r"\bKilled\b|SIGKILL|SIGSEGV|SIGBUS|SIGABRT|[Ss]egmentation fault|core dumped|"
                   r"exit(?:ed)? (?:with )?code -?\d+|exitcode\s*:\s*-?\d+|died unexpectedly|"
                   r"exited unexpectedly|Out of memory|out of memory")


def _messages() -> Any:
    try:
        from hangdoctor.knowledge import generated
    except ImportError:
        return None
    return generated


@check("library.messages", "Messages the libraries print, read from their own source",
       causes=["nccl-desync", "rank-died", "rendezvous-stall", "nccl-transport", "shm-exhausted",
               "gpu-fault", "gpu-kernel-spin", "host-oom-or-swap", "gpu-oom", "cuda-graph-capture",
               "compile-in-progress", "io-stall", "lock-contention", "frontend-hang",
               "request-deadlock", "driver-or-runtime-mismatch", "post-load-deadlock"])
def library_messages(ev: Evidence):
    """Matches the program lines of the evidence (never a poster's sentences) against the
    message templates generated from torch, NCCL, vLLM, SGLang, TGI, huggingface_hub and the
    other libraries (tools/gen_knowledge); each match speaks for the causes its template names.
    A death that follows a wait which timed out on the waiting side, with nothing dead before it,
    is the stop's consequence: it speaks against rank-died, which then ranks among the symptoms.

    Confirm by hand: grep the library's source for the template the report names (its file and
    line are in the evidence), e.g. `pip download --no-deps vllm && unzip -p vllm-*.whl FILE`.
    """
    gen = _messages()
    if gen is None:
        return skipped(["generated message templates"], "the generated tables are not installed")
    view = view_of_evidence(ev)
    lines = (view.lines["text"] + view.lines["log"] + view.lines["kernel"])[-MAX_LINES:]
    if not lines:
        return skipped(["log or pasted output"], "no program output to read")
    # one signal per event: two templates of one message (a release that reworded it, a second
    # call site) are one observation, not two
    best: dict[str, tuple[dict[str, Any], str]] = {}
    deaths: set[str] = set()  # lines a library's message says a process or the engine died in
    for line in dict.fromkeys(lines):
        for m in gen.match_message(line):
            key = str(m.get("event") or m["id"])
            if m.get("causes") and key not in best:
                best[key] = (m, line)
            if m.get("kind") != "symptom" and any(c.get("cause") == "rank-died" for c in m.get("causes") or []):
                deaths.add(line)
    if not best:
        return cleared("no line matches a library's message template that names a cause")
    signals: list[Signal] = []
    for m, line in best.values():
        symptom = m.get("kind") == "symptom"
        cap = SYMPTOM_CAP if symptom else MECHANISM_CAP
        where = f"{m.get('package')} {m.get('version')} {m.get('file')}:{m.get('line')}"
        text = f"{m.get('meaning') or m.get('event')} ({where}) — e.g. `{' '.join(line.split())[:160]}`"
        refs = [f"library-message:{m['id']}"] + (["symptom"] if symptom else [])
        for c in m["causes"]:
            signals.append(support(c["cause"], min(cap, float(c.get("weight") or 0.1)), text, refs=list(refs)))
    first_death = next((i for i, x in enumerate(lines) if x in deaths or _DIED.search(x)), None)
    first_timeout = next((i for i, x in enumerate(lines) if _TIMEOUT.search(x)), None)
    # the first death after the timeout: no process died before the wait timed out
    if first_death is not None and first_timeout is not None and first_timeout < first_death:
        signals.append(against(
            "rank-died", 0.6,
            "the death follows a wait that timed out, raised by the waiting side, and nothing died "
            f"before it: the timeout is the stop, the death its consequence (`{lines[first_timeout].strip()[:120]}`, "
            "then `" + lines[first_death].strip()[:120] + "`)", refs=["consequence", "vllm:v1/executor/multiproc_executor.py",
                                                                  "torch:ProcessGroupNCCL.cpp"]))
    events = sorted({str(m.get("event")) for m, _ in best.values()})
    return fired(f"{len(best)} library message(s): " + ", ".join(events[:8]), *signals)
