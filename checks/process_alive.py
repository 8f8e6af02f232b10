"""Is the server alive? Root gone, zombie or stopped processes, threads in D state."""

from __future__ import annotations

from hangdoctor.checkapi import Signal, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import ref

_FS_WCHAN = ("nfs", "fuse", "io_schedule", "wait_on_page", "folio_wait", "rpc_wait", "ceph",
             "lustre", "xfs", "ext4", "blk", "bit_wait_io", "jbd2", "read_pages", "filemap")


@check("process.alive", "Server processes alive, zombie, stopped or blocked in D state",
       needs=["processes"], causes=["rank-died", "io-stall"])
def process_alive(ev: Evidence):
    """Reads the state letter of every process of the tree (start and end of the window).

    Fires when the root is gone or a zombie (verdict ``dead``), when a worker exited or is a
    zombie (``rank-died``), when a process is stopped (state T: SIGSTOP or a debugger), or when
    threads sit in uninterruptible sleep on a file-system wait channel (``io-stall``).

    Confirm by hand: ps -o pid,stat,wchan:32,cmd --ppid ROOT_PID; cat /proc/PID/task/*/wchan
    """
    signals = []
    facts: dict = {}
    roots = ev.roots
    if roots and all(not r.alive for r in roots):
        gone = ", ".join(f"pid {r.pid} ({'zombie' if r.zombie else r.exit_info or 'gone'})" for r in roots)
        facts["dead"] = True
        facts["dead_reason"] = f"the server's root process is not alive: {gone}"
        return fired(facts["dead_reason"], Signal(None, 0.0, facts["dead_reason"], [ref(r) for r in roots]),
                     facts=facts)
    if roots:
        facts["dead"] = False
    for p in ev.processes:
        if p in roots:
            continue
        if p.zombie or p.raw.get("alive") is False:
            what = "is a zombie (exited, not reaped)" if p.zombie else (p.exit_info or "exited")
            root_pids = {r.pid for r in roots}
            workerish = (p.role in ("worker", "engine") or p.rank is not None
                         or (p.ppid in root_pids and str(p.name or "").startswith("python")))
            if workerish:
                signals.append(support("rank-died", 0.7, f"worker {p.label} {what}", [ref(p)]))
            else:
                signals.append(Signal(None, 0.0, f"{p.label} {what}", [ref(p)]))
    for p in ev.processes:
        if p.state in ("T", "t"):
            signals.append(Signal(None, 0.0, f"{p.label} is stopped (state {p.state}: SIGSTOP or a "
                                  "debugger); it cannot make progress until continued", [ref(p)]))
            facts.setdefault("still", []).append(f"{p.label} stopped")
            facts.setdefault("stopped", []).append(p.pid)
    d_threads = []
    for p in ev.processes:
        for t in p.threads or []:
            if t.get("status") == "D" and (t.get("status_end") in (None, "D")):
                d_threads.append((p, t))
        if p.state == "D" and not any(x[0] is p for x in d_threads):
            d_threads.append((p, {"tid": p.pid, "name": p.name, "wchan": p.wchan}))
    if d_threads:
        fs = [(p, t) for p, t in d_threads if any(k in (t.get("wchan") or "") for k in _FS_WCHAN)]
        chosen = fs or d_threads
        p, t = chosen[0]
        text = (f"{len(d_threads)} thread(s) in uninterruptible sleep (D), e.g. {p.label} thread "
                f"{t.get('name')} on {t.get('wchan') or 'an unknown wait channel'}")
        signals.append(support("io-stall", 0.55 if fs else 0.3, text, [ref(p)]))
    if any(s.weight > 0 for s in signals) or any(s.cause is None for s in signals):
        return fired(signals[0].text, *signals, facts=facts)
    n = len(ev.processes)
    return cleared(f"all {n} processes alive; none zombie, stopped or in D state", facts=facts)
