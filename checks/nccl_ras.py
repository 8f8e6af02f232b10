"""NCCL RAS: ranks reported missing, collective counts that differ between ranks and do not move.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence


@check("nccl.ras", "NCCL RAS: missing ranks and collective counts across the window",
       needs=["nccl_ras"], causes=["rank-died", "nccl-desync", "nccl-transport"])
def nccl_ras(ev: Evidence):
    """NCCL's RAS service (libnccl >= 2.24) knows every communicator of the job: which ranks it
    can no longer reach (``missing_ranks``), each rank's status flags and how many collectives of
    each kind it has run. hangdoctor asks it twice, at both ends of the window. A rank RAS reports
    missing is gone or unreachable (rank-died); ranks of one communicator whose counts differ and
    do not move across the window stopped at different collectives (nccl-desync: the ranks behind
    never entered the collective the others wait in); counts that move are progress. A rank whose
    communicator never finished init, or carries an async error, points at the transport.
    One sample only: a count difference is normal while collectives run, so it weighs little.

    Confirm by hand: printf 'CLIENT PROTOCOL 2\\nSTATUS\\n' | nc -q 3 127.0.0.1 28028
    (or the ``ncclras`` client shipped with NCCL).
    """
    comms = ev.nccl.communicators
    if not comms:
        texts = ev.nccl.ras_text
        if texts and any("MISSING" in t.upper() or "DEAD" in t.upper() for t in texts):
            return fired("NCCL RAS (text) reports missing or dead ranks",
                         support("rank-died", 0.4, "NCCL RAS reports missing/dead ranks: "
                                 + next(t for t in texts).strip().splitlines()[-1][:160]))
        return cleared("NCCL RAS answered with no communicator" if not texts
                       else "NCCL RAS answered (text format): no missing rank in its summary")
    signals = []
    moving = []
    still = []
    for c in comms:
        name = f"communicator {c.hash} ({c.size} ranks)" if c.size else f"communicator {c.hash}"
        if c.missing:
            # missing in both samples: not a blip of a rank that is merely slow to answer RAS
            persistent = c.samples < 2 or bool(c.missing_first)
            who = "; ".join(_missing_label(m) for m in c.missing[:8])
            odd = [{"rank": m.get("rank"), "pid": m.get("pid"), "why": "reported missing by NCCL RAS"}
                   for m in c.missing[:16]]
            signals.append(support("rank-died", 0.7 if persistent else 0.4,
                                   f"NCCL RAS: {name} is missing {len(c.missing)} rank(s): {who}",
                                   odd=odd))
        for r in c.ranks:
            st = r.status
            if st.get("init_state") not in (None, 0):
                signals.append(support("nccl-transport", 0.4,
                                       f"NCCL RAS: {r.label} of {name} has not finished communicator "
                                       f"init (init_state {st.get('init_state')})"))
            if st.get("async_error") not in (None, 0):
                signals.append(support("nccl-transport", 0.3,
                                       f"NCCL RAS: {r.label} of {name} reports NCCL async error "
                                       f"{st.get('async_error')}"))
            if st.get("abort_flag") or st.get("destroy_flag"):
                signals.append(support("rank-died", 0.25,
                                       f"NCCL RAS: {r.label} of {name} is being aborted/destroyed"))
        if c.moved:
            moving.append(f"NCCL collectives of {name} advanced over the window")
            continue
        behind = c.behind()
        if behind and not c.missing:
            ops = c.differing_ops()
            detail = "; ".join(f"{op}: " + ", ".join(f"rank {k}={v}" for k, v in sorted(
                vals.items(), key=lambda kv: (kv[0] is None, kv[0]))) for op, vals in ops.items())
            odd = [{"rank": r.rank, "pid": r.pid,
                    "why": f"{r.total_last} collectives while the others ran more"} for r in behind]
            weight = 0.65 if c.samples > 1 else 0.3
            signals.append(support(
                "nccl-desync", weight,
                f"NCCL RAS: in {name}, " + ", ".join(r.label for r in behind[:6])
                + f" ran fewer collectives than the others ({detail})"
                + (", and no count moved over the window" if c.samples > 1 else " (one sample)"),
                odd=odd))
        elif c.samples > 1 and c.ranks and not c.missing:
            still.append(f"NCCL collective counts of {name} did not move")
            signals.append(against("rank-died", 0.3, f"NCCL RAS: every rank of {name} is present"))
            signals.append(against("nccl-desync", 0.2,
                                   f"NCCL RAS: every rank of {name} ran the same number of collectives"))
    if comms and all(c.size == 1 for c in comms):
        signals.append(against("nccl-desync", 0.4, "NCCL RAS: every communicator has a single rank: "
                                                    "no peer to be out of step with"))
        signals.append(against("rank-died", 0.3, "NCCL RAS: every communicator has a single rank, present"))
    facts = {"moving": moving, "still": still}
    if moving and not any(s.weight > 0 for s in signals):
        return cleared("; ".join(moving), against("nccl-desync", 0.4, moving[0]),
                       against("rank-died", 0.3, moving[0]), facts=facts)
    positive = [s for s in signals if s.weight > 0]
    if positive:
        return fired(positive[0].text, *signals, facts=facts)
    return cleared(f"NCCL RAS: {len(comms)} communicator(s), no rank missing, counts consistent",
                   *signals, facts=facts)


def _missing_label(m: dict) -> str:
    bits = [f"rank {m.get('rank')}"]
    extra = ", ".join(x for x in (f"pid {m['pid']}" if m.get("pid") is not None else "",
                                  f"host {m['host']}" if m.get("host") else "",
                                  f"GPU {m['cuda_dev']}" if m.get("cuda_dev") is not None else "") if x)
    return bits[0] + (f" ({extra})" if extra else "")
