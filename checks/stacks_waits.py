"""Every worker parked in a receive or wait, nothing moving: the post-load deadlock picture."""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import describe_kind, rank_label, ranks_with_stacks

_PARKED = ("ipc-wait",)


@check("stacks.waits", "Workers parked in a receive or wait", needs=["stacks"],
       causes=["post-load-deadlock"])
def stacks_waits(ev: Evidence):
    """Fires when the main thread of every worker is parked in a receive or wait
    (multiprocessing ``Connection.recv``, ``Queue.get``, zmq ``recv``, socket ``recv``,
    ``Event.wait``...) and, where the window shows it, their CPU stays near zero and their
    stacks do not change. Each side waits for a message the other never sends.

    Confirm by hand: py-spy dump --pid PID on each worker; cat /proc/PID/wchan (anon_pipe_read, unix_stream_read_generic, futex_wait)
    """
    ranks = ranks_with_stacks(ev)
    if not ranks:
        return cleared("no worker stacks")
    parked = [r for r in ranks if r.wait_kind in _PARKED and not (r.stack.main and r.stack.main.active)]
    busy = [r for r in ranks if r.wait_kind in ("running",) or (r.stack.main and r.stack.main.active)]
    if len(parked) == len(ranks):
        frames = sorted({r.stack.main.top.short for r in parked if r.stack.main.top})
        text = (f"all {len(parked)} workers' main threads wait in {describe_kind('ipc-wait')}: "
                + "; ".join(frames[:3]))
        signals = [support("post-load-deadlock", 0.5, text, [f"pid:{r.pid}" for r in parked])]
        if ev.has_timing:
            cpu = sum((r.proc.cpu_delta_s or 0.0) for r in parked)
            moved = [r for r in parked if r.stack.moved]
            if cpu <= 0.05 * max(1, len(parked)) * (ev.window_s or 1) and not moved:
                signals.append(support("post-load-deadlock", 0.3,
                                       f"their CPU over {ev.window_s:.1f} s totals {cpu:.2f} s and their "
                                       "stacks did not change"))
            elif moved:
                signals.append(against("post-load-deadlock", 0.5,
                                       f"stacks of {len(moved)} worker(s) changed during the window"))
        return fired(text, *signals)
    if busy:
        what = ", ".join(f"{rank_label(r)} in {describe_kind(r.wait_kind)}" for r in busy[:4])
        return cleared(f"{len(busy)} worker(s) active, not parked in a wait",
                       against("post-load-deadlock", 0.5, f"worker(s) active, not parked in a wait: {what}"))
    kinds = sorted({describe_kind(r.wait_kind) for r in ranks})
    return cleared(f"{len(parked)} of {len(ranks)} workers parked in a wait; others in {', '.join(kinds)}",
                   against("post-load-deadlock", 0.3, f"not every worker waits on IPC ({', '.join(kinds)})"))
