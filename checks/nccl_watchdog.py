"""PyTorch NCCL watchdog lines: collective sequence numbers that differ between ranks.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence


@check("nccl.watchdog", "NCCL watchdog timeouts and sequence numbers per rank", needs=["log"],
       causes=["nccl-desync"])
def nccl_watchdog(ev: Evidence):
    """PyTorch's NCCL watchdog prints ``WorkNCCL(SeqNum=N, OpType=OP, ...)`` when a collective
    times out. Ranks whose last SeqNum or OpType differs from the others' are the odd ones out:
    they ran a different number or kind of collectives.

    Confirm by hand: grep -n 'WorkNCCL(SeqNum' LOG | sort -t= -k2 -n
    """
    events = ev.log.of("watchdog-timeout")
    if not events:
        return cleared("no NCCL watchdog timeout lines")
    per_rank: dict = {}
    rankless = 0
    for e in events:
        r = e.rank if e.rank is not None else e.data.get("rank")
        if r is None:
            # a record pasted without its rank: each distinct one stands for a rank (or a group)
            key = (e.data.get("seqnum"), e.data.get("optype"))
            if any(k == key for k in [(x.data.get("seqnum"), x.data.get("optype"))
                                      for rr, x in per_rank.items() if isinstance(rr, str)]):
                continue
            rankless += 1
            r = f"?{rankless}"
        per_rank[r] = e
    keyed = {r: (e.data.get("seqnum"), e.data.get("optype")) for r, e in per_rank.items()}
    distinct = set(keyed.values())
    if len(per_rank) >= 2 and len(distinct) >= 2:
        from collections import Counter

        common, _ = Counter(keyed.values()).most_common(1)[0]
        odd = [{"pid": per_rank[r].pid, "rank": r,
                "why": f"SeqNum={k[0]} OpType={k[1]} while most ranks are at SeqNum={common[0]} OpType={common[1]}"}
               for r, k in keyed.items() if k != common]
        parts = "; ".join(f"rank {r}: SeqNum={k[0]} {k[1]}" for r, k in sorted(keyed.items(), key=lambda kv: str(kv[0])))
        # records without their rank may be one rank's at two moments: they count for less
        w = 0.4 if rankless == len(per_rank) else 0.75
        return fired(f"watchdog timeouts disagree between ranks: {parts}",
                     support("nccl-desync", w, f"NCCL watchdog timeouts disagree between ranks: {parts}", odd=odd))
    e = events[-1]
    if len(per_rank) >= 2:
        return fired(f"{len(per_rank)} ranks timed out in the same collective ({e.data.get('optype')} SeqNum={e.data.get('seqnum')})",
                     support("nccl-desync", 0.3, f"ranks timed out together in {e.data.get('optype')} "
                             f"SeqNum={e.data.get('seqnum')}: a participant outside them never joined"))
    return fired(f"a collective timed out: {e.text.strip()[:160]}",
                 support("nccl-desync", 0.35, f"a NCCL collective timed out: {e.text.strip()[:160]}"),
                 against("post-load-deadlock", 0.3, "a NCCL collective was running"))
