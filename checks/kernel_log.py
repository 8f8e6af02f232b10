"""The kernel log: NVIDIA Xid errors, OOM-killer reports, PCIe AER errors, hung tasks.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

# Xid codes and what they usually mean (NVIDIA's Xid catalogue).
_XID = {
    13: ("graphics engine exception", 0.5), 31: ("GPU memory page fault", 0.5), 43: ("GPU stopped processing", 0.55),
    45: ("preemptive cleanup after a fault", 0.3), 48: ("double-bit ECC error", 0.8), 61: ("internal micro-controller breakpoint", 0.6),
    62: ("internal micro-controller halt", 0.7), 63: ("ECC page retirement / row remapping event", 0.6),
    64: ("ECC page retirement / row remapper failure", 0.75), 74: ("NVLink error", 0.7), 79: ("GPU has fallen off the bus", 0.9),
    92: ("high single-bit ECC error rate", 0.4), 94: ("contained ECC error", 0.6), 95: ("uncontained ECC error", 0.85),
    119: ("GSP RPC timeout", 0.8), 120: ("GSP error", 0.75), 140: ("unrecovered ECC error", 0.8),
}


@check("kernel.log", "Kernel log: Xid, OOM killer, PCIe AER, hung tasks", needs=["kernel_log"],
       causes=["gpu-fault", "host-oom-or-swap", "rank-died", "io-stall"])
def kernel_log(ev: Evidence):
    """Reads kernel log lines (dmesg): ``NVRM: Xid`` (79 fallen off the bus, 48/63/64/94/95
    ECC, 13/31/43 faults, 119/120 GSP), OOM-killer reports (a killed PID of the server's tree
    is a dead rank), PCIe AER errors, and ``task ... blocked for more than 120 seconds``.

    Confirm by hand: sudo dmesg -T | grep -iE 'xid|killed process|oom|aer|blocked for more than'
    """
    from hangdoctor.evidence.kernel import relevance, scope_of

    kv = ev.kernel
    signals = []
    tree_pids = {p.pid for p in ev.processes}
    # Host-wide lines weigh by whether they name the diagnosed processes or their GPUs and by
    # when they were logged; the rest is context (said in the summary, never a cause).
    scope = scope_of(ev.snapshots, ev.processes, ev.gpus)
    context = 0
    for x in kv.xids[-5:]:
        what, w = _XID.get(x.code, ("Xid error", 0.5))
        kind, factor = relevance(scope, pid=x.pid, name=x.name, text=x.text, pci=x.pci,
                                 host_wide=True)
        if kind == "context":
            context += 1
            continue
        who = f", pid {x.pid} ({x.name})" if x.pid else ""
        signals.append(support("gpu-fault", round(w * factor, 3),
                               f"Xid {x.code} on {x.pci or 'a GPU'}: {what}{who}"))
    for o in kv.oom_kills[-5:]:
        kind, factor = relevance(scope, pid=o.pid, name=None, text=o.text)
        if o.pid is not None and o.pid not in tree_pids:
            kind = "context"  # another program's process: a fact of the host, not of the server
        if kind == "context":
            context += 1
            continue
        # an OOM kill of anyone says the host ran out of memory while the server ran
        signals.append(support("host-oom-or-swap", 0.6 if kind == "names" else 0.45,
                               f"the OOM killer killed pid {o.pid} ({o.name})"))
        if o.pid in tree_pids or (o.name and any(o.name == p.name for p in ev.workers)):
            signals.append(support("rank-died", 0.6, f"the OOM killer killed pid {o.pid} ({o.name}) of the server",
                                   odd=[{"pid": o.pid, "rank": None, "why": "killed by the OOM killer"}]))
    for line in kv.aer[-3:]:
        kind, factor = relevance(scope, pid=None, name=None, text=line, host_wide=True)
        if kind == "context":
            context += 1
            continue
        signals.append(support("gpu-fault", round(0.35 * factor, 3), f"PCIe AER error: {line.strip()[:140]}"))
    for h in kv.hung_tasks[-3:]:
        kind, _factor = relevance(scope, pid=h.pid, name=h.name, text=h.text)
        if h.pid is not None and h.pid not in tree_pids:
            kind = "context"  # it names a pid outside the diagnosed trees: context, never a cause
        if kind == "context":
            context += 1
            continue
        if h.pid in tree_pids:
            w = 0.5
        elif kind == "names":
            w = 0.4  # a task of the server's name, logged lately
        else:
            w = 0.1  # another process stuck in I/O while the server ran: a shared disk, maybe
        signals.append(support("io-stall", w, f"kernel: task {h.name}:{h.pid} blocked for more than {h.blocked_s} s"))
    ctx = (f"; {context} older line(s) about other processes kept as context" if context else "")
    if signals:
        signals.sort(key=lambda s: -s.weight)
        return fired(signals[0].text + ctx, *signals)
    if context:
        return cleared(f"the kernel log names none of the diagnosed processes or their GPUs since "
                       f"they started ({context} line(s) of context)")
    return cleared("no Xid, OOM-killer, AER or hung-task lines in the kernel log",
                   against("gpu-fault", 0.3, "no Xid or AER lines in the kernel log"),
                   against("host-oom-or-swap", 0.2, "no OOM-killer lines in the kernel log"))
