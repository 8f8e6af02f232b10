"""Errors in the server log: OOMs, shared memory, SIGBUS, shard exits, locks, rendezvous, NCCL.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

# kinds that only say someone is stuck (downstream symptoms): they point the search, capped, and
# are marked so that triage never lets them decide a ranking on their own
_SYMPTOMS = frozenset({"shm-broadcast-wait", "waiting-for-shard", "sglang-watchdog"})
_SYMPTOM_CAP = 0.2

# kind -> (cause, weight, what)
_RULES = {
    "cuda-oom": ("gpu-oom", 0.75, "CUDA out of memory"),
    "host-oom": ("host-oom-or-swap", 0.5, "host out of memory"),
    "shm-no-space": ("shm-exhausted", 0.7, "no space in shared memory"),
    "sigbus": ("shm-exhausted", 0.55, "SIGBUS (a shared-memory mapping that could not be backed)"),
    "shm-broadcast-wait": ("request-deadlock", 0.25, "the shared-memory broadcast waits for a worker"),
    "shard-exit": ("rank-died", 0.6, "a shard/rank exited"),
    "waiting-for-shard": ("rank-died", 0.2, "the launcher waits for a shard"),
    "lock-wait": ("lock-contention", 0.55, "waiting for a lock"),
    "rendezvous": ("rendezvous-stall", 0.4, "rendezvous / store-based barrier"),
    "nccl-warn": ("nccl-transport", 0.3, "NCCL warning"),
    "sglang-watchdog": ("request-deadlock", 0.2, "SGLang's scheduler watchdog fired"),
}


@check("log.errors", "Errors and warnings in the server log", needs=["log"],
       causes=["gpu-oom", "host-oom-or-swap", "shm-exhausted", "rank-died", "lock-contention",
               "rendezvous-stall", "nccl-transport", "request-deadlock"])
def log_errors(ev: Evidence):
    """Maps recognised log lines to causes: ``torch.OutOfMemoryError: CUDA out of memory``,
    ``MemoryError`` / ``Killed``, ``No space left on device`` under /dev/shm, ``Bus error``,
    vLLM's ``No available shared memory broadcast block``, TGI shard exits, file-lock waits,
    store-based-barrier timeouts, NCCL ``WARN`` lines.

    Confirm by hand: grep -nE 'out of memory|Bus error|No space left|WARN|Timed out|shard' LOG
    """
    lv = ev.log
    signals = []
    for kind, (cause, weight, what) in _RULES.items():
        events = lv.of(kind)
        if not events:
            continue
        e = events[-1]
        who = f" (rank {e.rank})" if e.rank is not None else ""
        text = f"{what}{who}: {e.text.strip()[:160]}" + (f" (+{len(events) - 1} more)" if len(events) > 1 else "")
        w = weight
        if kind == "waiting-for-shard":
            # TGI keeps printing this while a shard loads; only a long wait is suspicious
            if len(events) < 5:
                continue
        if kind == "host-oom" and all(ev_.data.get("sigkill_only") for ev_ in events):
            # a bare "Killed" is printed for any SIGKILL (a watchdog, a person), not only the OOM killer
            w, text = 0.15, f"a process was killed (SIGKILL; the OOM killer is one possibility): {e.text.strip()[:120]}"
        if kind == "nccl-warn" and lv.last("nccl-init") is not None and "COMPLETE" in lv.last("nccl-init").text.upper():
            w = 0.15
        refs = []
        if kind in _SYMPTOMS:
            w, refs = min(w, _SYMPTOM_CAP), ["symptom"]
        signals.append(support(cause, w, text, refs=refs,
                               odd=[{"pid": e.pid, "rank": e.rank, "why": what}] if kind == "shard-exit" else []))
    if signals:
        signals.sort(key=lambda s: -s.weight)
        return fired(signals[0].text, *signals)
    return cleared("no OOM, shared-memory, SIGBUS, shard-exit, lock, rendezvous or NCCL warning lines in the log")
