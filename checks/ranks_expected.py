"""Are all the ranks the job expects alive? A missing rank leaves the others waiting.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import ref


@check("ranks.expected", "Live ranks against the job's expected world size", needs=["processes"],
       causes=["rank-died"])
def ranks_expected(ev: Evidence):
    """Compares the ranks alive with what the job expects (WORLD_SIZE, --tensor-parallel-size,
    --tp, --num-shard, --nproc-per-node), and looks for a GPU whose process is gone and whose
    memory was freed while the other GPUs still hold theirs (FIELD-NOTES: a dead rank frees
    its GPU memory).

    Confirm by hand: ps -eo pid,ppid,stat,cmd | grep -E 'rank|TP'; nvidia-smi --query-compute-apps=pid,used_memory --format=csv
    """
    expected, source = ev.expected_world_size()
    workers = [p for p in ev.processes if p.role in ("worker",) or p.rank is not None]
    live = [p for p in workers if p.alive]
    live_ranks = {p.rank for p in live if p.rank is not None}
    signals = []
    if expected is not None and workers:
        count = len(live_ranks) if live_ranks else len(live)
        # several processes per rank (a worker and its helpers) must not hide a missing rank
        if count < expected:
            missing = sorted(set(range(expected)) - live_ranks) if live_ranks else []
            dead = [p for p in workers if not p.alive]
            text = (f"{count} of {expected} expected ranks alive ({source})"
                    + (f"; missing rank{'s' if len(missing) != 1 else ''} {', '.join(map(str, missing))}" if missing else ""))
            odd = [{"host": p.host, "pid": p.pid, "rank": p.rank, "why": "not alive"} for p in dead]
            if not odd and missing:
                odd = [{"pid": None, "rank": m, "why": "no live process has this rank"} for m in missing]
            signals.append(support("rank-died", 0.65, text, [ref(p) for p in dead], odd=odd))
            signals.append(against("post-load-deadlock", 0.5, "a rank is gone: the survivors' waits are "
                                   "explained by it, not by a handshake between live workers"))
            if ev.has("log") and missing:
                errs = [e for e in ev.log.of("error", "traceback", "shard-exit") if e.rank in missing]
                if errs:
                    e = errs[-1]
                    signals.append(support("rank-died", 0.5, f"the missing rank {e.rank} logged an error "
                                           f"before it vanished: {e.text.strip()[:140]}"))
    # GPU memory freed by a dead rank
    gpus_by_host: dict = {}
    for g in ev.gpus:
        gpus_by_host.setdefault(g.host, []).append(g)
    for host, gs in gpus_by_host.items():
        if len(gs) < 2:
            continue
        loaded = [g for g in gs if (g.mem_used_mib or 0) > 4096 and g.pids]
        freed = [g for g in gs if not g.pids and (g.mem_used_mib or 0) < 1024]
        # only meaningful if this job uses those GPUs: a job spread on all GPUs but one
        if loaded and freed and len(loaded) + len(freed) == len(gs) and expected and expected == len(gs):
            idx = ", ".join(str(g.index) for g in freed)
            signals.append(support("rank-died", 0.45,
                                   f"GPU {idx} on {host} has no process and its memory was freed, "
                                   f"while {len(loaded)} other GPU{'s' if len(loaded) != 1 else ''} still "
                                   f"{'hold' if len(loaded) != 1 else 'holds'} weights"))
    if signals:
        return fired(signals[0].text, *signals)
    if expected is not None and workers:
        return cleared(f"{len(live_ranks) or len(live)} of {expected} expected ranks alive",
                       against("rank-died", 0.6, f"all {expected} expected ranks are alive ({source})"))
    if workers and all(p.alive for p in workers):
        n = len(workers)
        return cleared(f"{n} worker{'s' if n != 1 else ''} alive; expected world size unknown",
                       against("rank-died", 0.3, "the one worker seen is alive" if n == 1
                               else f"all {n} workers seen are alive"))
    return cleared("no worker processes to count")
