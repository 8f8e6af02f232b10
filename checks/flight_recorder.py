"""PyTorch Flight Recorder dumps: the collective each rank entered and never finished.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from collections import Counter

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence


@check("nccl.flight-recorder", "Flight Recorder: the last collective each rank entered",
       needs=["flight_recorder"], causes=["nccl-desync", "rank-died", "nccl-transport", "gpu-kernel-spin"])
def flight_recorder(ev: Evidence):
    """PyTorch's NCCL watchdog dumps its Flight Recorder (a ring buffer of the last collectives:
    op, sequence number, sizes, state, the Python frames that issued it) when a collective times
    out and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``. hangdoctor reads the dumps already written (never
    asks for one unless ``--fr-dump``) and, per process group, finds the first collective that
    had not completed on each rank. Ranks stuck at different sequence numbers or in different
    ops at the same number are out of step (nccl-desync; the rank behind is named). All ranks in
    the same collective, nobody behind: a participant outside them, or the transport. The very
    first collective not completing points at the transport (communicator set-up). A collective
    that was enqueued but never started on the GPU (known only with TORCH_NCCL_ENABLE_TIMING=1)
    waits behind another kernel on its stream (gpu-kernel-spin). A dump older than the processes
    is from an earlier run and is not used.

    Confirm by hand: python -m torch.distributed.flight_recorder.fr_trace DUMP_DIR
    (``torchfrtrace``), or unpickle one dump and read ``entries[-5:]``.
    """
    ranks = ev.nccl.fr_ranks
    fresh = [r for r in ranks if not r.stale]
    if not fresh:
        return cleared(f"{len(ranks)} Flight Recorder dump(s), all older than the processes "
                       "(an earlier run): not used")
    signals = []
    # group the per-rank views by process group
    pgs: dict[str, list] = {}
    for r in fresh:
        for g in r.groups:
            pgs.setdefault(g.pg, []).append((r, g))
    for pg, members in sorted(pgs.items()):
        label = f"process group {pg}" + (f" ({members[0][1].desc})" if members[0][1].desc else "")
        pending = [(r, g) for r, g in members if g.pending is not None]
        if not pending:
            continue
        if len(members) >= 2:
            keys = {(r.rank): (g.pending.seq, g.pending.op) if g.pending else (None, None)
                    for r, g in members}
            common, _ = Counter(keys.values()).most_common(1)[0]
            odd_ranks = [(r, g) for r, g in members if keys[r.rank] != common]
            if odd_ranks:
                parts = "; ".join(_where(r, g) for r, g in members)
                odd = [{"rank": r.rank, "why": _where(r, g)} for r, g in odd_ranks]
                signals.append(support(
                    "nccl-desync", 0.75,
                    f"Flight Recorder, {label}: ranks stopped at different collectives: {parts}",
                    odd=odd))
                continue
            p = pending[0][1].pending
            signals.append(support(
                "nccl-desync", 0.35,
                f"Flight Recorder, {label}: all {len(members)} dumped ranks wait in {p.op} "
                f"#{p.seq} ({_sizes(p.sizes)}), issued at {p.caller or '?'}: a participant "
                "without a dump never joined it"))
        r, g = pending[0]
        p = g.pending
        if _group_size(g.ranks) == 1:
            # a collective of a one-rank group waits for no peer: what holds it is its stream
            signals.append(support(
                "gpu-kernel-spin", 0.45,
                f"Flight Recorder, {label}: rank {r.rank}'s {p.op} #{p.seq} never completed, in a group "
                "of one rank (no peer to wait for): a kernel ahead of it on the stream does not finish"))
            signals.append(against("nccl-desync", 0.4, f"{label} has a single rank: no peer to be out of step with"))
        elif p.seq == 1 or (g.last_completed in (None, 0) and p.seq in (None, 1)):
            signals.append(support(
                "nccl-transport", 0.45,
                f"Flight Recorder, {label}: the first collective ({p.op} #{p.seq}) never completed "
                f"on rank {r.rank}: communicator set-up or transport"))
        elif g.timing_on and p.state == "scheduled":
            signals.append(support(
                "gpu-kernel-spin", 0.4,
                f"Flight Recorder, {label}: rank {r.rank}'s {p.op} #{p.seq} was enqueued but never "
                "started on the GPU: a kernel ahead of it on the stream does not finish"))
        elif len(members) == 1 and _group_size(g.ranks) != 1:
            signals.append(support(
                "nccl-desync", 0.3,
                f"Flight Recorder, {label}: rank {r.rank} timed out in {p.op} #{p.seq} "
                f"({_sizes(p.sizes)}) after {g.last_completed} completed collectives, issued at "
                f"{p.caller or '?'}" + ("" if g.timing_on else
                                        "; whether it started on the GPU is unknown "
                                        "(TORCH_NCCL_ENABLE_TIMING was off)")))
    positive = [s for s in signals if s.weight > 0]
    if positive:
        return fired(positive[0].text, *signals)
    return cleared(f"{len(fresh)} Flight Recorder dump(s): every collective completed")


def _group_size(ranks: object) -> int | None:
    """``'[0, 1, 2]'`` (as pg_config writes it) -> 3; None when unknown."""
    if isinstance(ranks, list):
        return len(ranks)
    text = str(ranks or "").strip()
    if not text.startswith("[") or not text.endswith("]"):
        return None
    inner = text[1:-1].strip()
    return len([x for x in inner.split(",") if x.strip()]) if inner else 0


def _where(r, g) -> str:
    if g.pending is None:
        return f"rank {r.rank}: all done up to #{g.last_completed}"
    p = g.pending
    return f"rank {r.rank}: in {p.op} #{p.seq} ({_sizes(p.sizes)})"


def _sizes(sizes: list) -> str:
    if not sizes:
        return "sizes unknown"
    return " ".join("x".join(str(d) for d in s) if isinstance(s, list) else str(s) for s in sizes[:2])
