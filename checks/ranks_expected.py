"""Are all the ranks the job expects alive? A missing rank leaves the others waiting.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import ref
from ._window import is_helper

# Ranks a log names: "[rank1]:", "[Rank 0]", "[TP1]", "rank=3", "world_size=2"
_RANK_NAMED = re.compile(r"\[(?:rank|Rank|RANK|TP|tp)\s*(\d{1,4})\]|\brank[= ](\d{1,4})\b")
_WORLD = re.compile(r"\bworld[_ ]size[=: ]+(\d{1,4})\b", re.IGNORECASE)


def _from_log(ev: Evidence) -> tuple[int | None, str | None]:
    """The world size a log states or implies (the highest rank it names, plus one)."""
    if not ev.has("log"):
        return None, None
    world, named = None, set()
    for line in ev.log.lines[-2000:]:
        m = _WORLD.search(line)
        if m:
            world = max(world or 0, int(m.group(1)))
        for a, b in _RANK_NAMED.findall(line):
            named.add(int(a or b))
    if world:
        return world, f"world_size={world} in the server log"
    if len(named) >= 2:
        return max(named) + 1, f"the log names ranks {', '.join(map(str, sorted(named)))}"
    return None, None


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
    if expected is None:
        expected, source = _from_log(ev)
    # helpers (the resource tracker, a fork server, compile workers) are never ranks
    workers = [p for p in ev.processes if (p.role in ("worker",) or p.rank is not None) and not is_helper(p)]
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
            if ev.has("log") and not missing:
                # the live ranks' numbers are unknown: a rank that logged an exception is the one
                raised = [ln for ln in ev.log.lines[-2000:] if _RANK_NAMED.search(ln)
                          and re.search(r"\b\w*(Error|Exception)\b|Traceback", ln)]
                if raised:
                    signals.append(support("rank-died", 0.5, f"a rank logged an exception: {raised[-1].strip()[:160]}"))
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
