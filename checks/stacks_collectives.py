"""Cross-rank reasoning on stacks: ranks in different collectives, or a rank outside any
collective while the others wait in one (nccl-desync), and the spinning-kernel look-alike.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from collections import defaultdict

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import describe_kind, has_nccl_threads, odd_entry, rank_label, ranks_with_stacks

_WAITING = ("cuda-sync",)
_OUTSIDE = ("ipc-wait", "unknown", "running", "serving-idle", "io", "lock", "compile")


@check("stacks.collectives", "Collectives across ranks (py-spy stacks)", needs=["stacks"],
       causes=["nccl-desync", "gpu-kernel-spin", "nccl-transport"])
def stacks_collectives(ev: Evidence):
    """Groups the ranks by the collective their main thread is in (``all_reduce``,
    ``broadcast``, ``barrier``... in torch/distributed/distributed_c10d.py) or by a CUDA
    synchronize (with NCCL the host blocks later, at the next synchronisation point, so a rank
    stuck in NCCL usually shows ``synchronize`` / ``.item()``, not the collective).

    Fires ``nccl-desync`` when ranks sit in different collectives, or when some ranks wait in a
    collective while a live rank is outside any collective; names the odd ranks. A rank in a
    synchronize with no NCCL communicator (no NCCL proxy threads) and a peer parked elsewhere
    looks exactly like a kernel that never ends: then both ``nccl-desync`` and
    ``gpu-kernel-spin`` are ranked, and the difference is said.

    Confirm by hand: py-spy dump --pid PID on every rank (add --native to see cudaDeviceSynchronize / ncclKernel waits)
    """
    ranks = ranks_with_stacks(ev)
    if len(ranks) < 1:
        return cleared("no rank stacks to compare")
    kinds = {r.pid: r.wait_kind for r in ranks}
    coll = [r for r in ranks if r.wait_kind.startswith("collective:")]
    sync = [r for r in ranks if r.wait_kind in _WAITING]
    outside = [r for r in ranks if r.wait_kind in _OUTSIDE]
    signals = []

    by_op: dict[str, list] = defaultdict(list)
    for r in coll:
        by_op[r.wait_kind].append(r)
    if len(by_op) >= 2:
        groups = sorted(by_op.items(), key=lambda kv: (-len(kv[1]), min(x.rank if x.rank is not None else 1 << 30 for x in kv[1])))
        main_op, main_ranks = groups[0]
        odd = [odd_entry(r, f"in {describe_kind(k)} while {len(main_ranks)} rank(s) are in {describe_kind(main_op)}")
               for k, rs in groups[1:] for r in rs]
        parts = "; ".join(f"{', '.join(rank_label(r) for r in rs)} in {describe_kind(k)}" for k, rs in groups)
        signals.append(support("nccl-desync", 0.8, f"ranks are in different collectives: {parts}",
                               [f"pid:{r.pid}" for r in coll], odd=odd))
    if (coll or sync) and outside:
        waiting = coll + sync
        odd = [odd_entry(r, f"outside any collective ({describe_kind(r.wait_kind)}) while "
                            f"{len(waiting)} rank(s) wait") for r in outside]
        w_text = ", ".join(f"{rank_label(r)} in {describe_kind(r.wait_kind)}" for r in waiting[:6])
        o_text = ", ".join(f"{rank_label(r)} in {describe_kind(r.wait_kind)}" for r in outside[:6])
        if coll:
            signals.append(support("nccl-desync", 0.6, f"{w_text}, but {o_text}: the odd rank(s) never "
                                   "entered the collective", [f"pid:{r.pid}" for r in waiting + outside], odd=odd))
        else:
            nccl = [r for r in sync if has_nccl_threads(r)]
            if nccl:
                signals.append(support("nccl-desync", 0.6, f"{w_text} with a NCCL process group, but "
                                       f"{o_text}: most likely a collective waits for a peer that never "
                                       "joined", [f"pid:{r.pid}" for r in waiting + outside], odd=odd))
                signals.append(support("gpu-kernel-spin", 0.25, f"{w_text}: a kernel that never ends looks the "
                                       "same to NVML and py-spy; NCCL watchdog timeout lines (after "
                                       "TORCH_NCCL timeout) or the flight recorder would tell them apart",
                                       [f"pid:{r.pid}" for r in sync]))
            else:
                signals.append(support("gpu-kernel-spin", 0.55, f"{w_text} with no NCCL process group (no "
                                       f"pt_nccl_watchdg / NCCL threads), and {o_text}: no collective can be "
                                       "pending, so a kernel that never finishes", [f"pid:{r.pid}" for r in sync]))
                signals.append(support("nccl-desync", 0.2, f"{w_text} while {o_text}: a collective waiting "
                                       "for a peer looks the same from NVML and py-spy, but the waiting rank "
                                       "has no NCCL process group", odd=odd))
    if not signals and len(coll) == len(ranks) and len(by_op) == 1 and len(ranks) >= 2:
        moved = [r for r in ranks if r.stack and r.stack.moved]
        op = describe_kind(coll[0].wait_kind)
        if not moved:
            signals.append(support("nccl-desync", 0.25, f"all {len(ranks)} ranks wait in {op} and nothing "
                                   "moved: a participant outside these processes (another node?) never joined"))
            signals.append(support("nccl-transport", 0.2, f"all {len(ranks)} ranks wait in {op}: if this is "
                                   "the first collective, NCCL transport setup may be stuck"))
    if not signals and len(ranks) == 1 and coll and ev.origin != "live":
        r = coll[0]
        signals.append(support("nccl-desync", 0.3, f"{rank_label(r)} waits in {describe_kind(r.wait_kind)}; "
                               "the other ranks' stacks were not given: dump every rank and compare",
                               [f"pid:{r.pid}"]))
    if signals:
        return fired(signals[0].text, *signals)
    if coll or sync:
        return cleared(f"{len(coll) + len(sync)} rank(s) in a collective or synchronize, consistently",
                       against("nccl-desync", 0.3, "all ranks are in the same collective"))
    text = ", ".join(sorted({describe_kind(k) for k in kinds.values()}))
    # issue 13: the engine model can see a rank in its collective where the Python stack shows
    # only compiled code (vLLM's CPU all-reduce runs inside the compiled graph): no "against"
    waiting = ev.engine.collective_waiters() if ev.has_timing else []
    if waiting:
        return cleared(f"no collective frame in the stacks, but {waiting[0].label} spins in the "
                       "step's compiled graph, where the all-reduce waits")
    return cleared(f"no rank is in a collective or a CUDA synchronize ({text})",
                   against("nccl-desync", 0.6, f"no rank is in a collective or a CUDA synchronize ({text})"),
                   against("gpu-kernel-spin", 0.3, "no rank's host thread waits in a CUDA synchronize"))
