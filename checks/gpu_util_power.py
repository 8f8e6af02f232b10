"""GPU utilisation read against power (FIELD-NOTES: utilisation alone lies).

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import has_nccl_threads


@check("gpu.util-power", "GPU utilisation against power draw", needs=["gpus"],
       causes=["nccl-desync", "gpu-kernel-spin", "post-load-deadlock", "rendezvous-stall", "request-deadlock"])
def gpu_util_power(ev: Evidence):
    """NVML utilisation is the fraction of time a kernel was resident. A NCCL kernel
    spin-waiting for a peer shows 100 % at idle power (~119 W on an H200), and so does a kernel
    that never ends. High utilisation at idle power: a kernel waiting, not working. High
    utilisation at high power: working. Zero utilisation with weights resident: everyone waits
    on the host side (the post-load deadlock picture). Zero with only a CUDA context's worth of
    memory: the job never got past start-up (rendezvous).

    Confirm by hand: nvidia-smi --query-gpu=index,utilization.gpu,power.draw,power.limit,memory.used --format=csv -lms 250
    """
    waiting, busy, idle_loaded, idle_ctx = [], [], [], []
    for g in ev.gpus:
        r = g.reading()
        mem = g.mem_used_mib or 0
        if r == "waiting":
            waiting.append(g)
        elif r == "busy":
            busy.append(g)
        elif r == "idle" and g.pids:
            (idle_loaded if mem >= 4096 else idle_ctx).append(g)
    signals = []
    def desc(g):
        return f"GPU {g.index}" + (f" on {g.host}" if len({x.host for x in ev.gpus}) > 1 else "")
    if waiting:
        names = ", ".join(f"{desc(g)} {g.mean('util_pct'):.0f} % at {g.mean('power_w'):.0f} W" for g in waiting)
        text = f"{names}: utilisation high at idle power, a kernel waiting, not working"
        # Whose GPU is it? A rank with a NCCL process group makes a collective the likelier wait.
        owners = [r for r in ev.ranks if r.gpu is not None and r.gpu in waiting]
        nccl = any(has_nccl_threads(r) for r in owners)
        if owners and nccl:
            signals.append(support("nccl-desync", 0.35, text + " (its rank has a NCCL process group)"))
            signals.append(support("gpu-kernel-spin", 0.25, text))
        elif owners:
            signals.append(support("nccl-desync", 0.2, text + " (its rank has no NCCL process group)"))
            signals.append(support("gpu-kernel-spin", 0.35, text))
        else:
            signals.append(support("nccl-desync", 0.3, text))
            signals.append(support("gpu-kernel-spin", 0.3, text))
        signals.append(against("post-load-deadlock", 0.5, f"{names}: a kernel is resident, so not every "
                               "rank waits on the host side"))
    if busy and not waiting:
        names = ", ".join(f"{desc(g)} {g.mean('util_pct'):.0f} % at {g.mean('power_w'):.0f} W" for g in busy)
        signals.append(against("post-load-deadlock", 0.7, f"GPUs working: {names}"))
        signals.append(against("nccl-desync", 0.4, f"GPUs working: {names}"))
        signals.append(against("request-deadlock", 0.6, f"GPUs working: {names}"))
    if idle_loaded and not busy and not waiting:
        names = ", ".join(f"{desc(g)} ({g.mem_used_mib / 1024:.1f} GiB)" for g in idle_loaded)
        signals.append(support("post-load-deadlock", 0.25, f"weights resident and GPUs idle: {names}"))
    if idle_ctx and not busy and not waiting and not idle_loaded:
        names = ", ".join(f"{desc(g)} ({g.mem_used_mib:.0f} MiB)" for g in idle_ctx)
        signals.append(support("rendezvous-stall", 0.2, f"GPUs idle holding only a CUDA context: {names}"))
    if not waiting:
        signals.append(against("gpu-kernel-spin", 0.6, "no GPU shows high utilisation at idle power"))
    facts = {}
    if busy:
        facts["moving"] = [f"GPU {g.index} busy at {g.mean('power_w'):.0f} W" for g in busy]
    if waiting:
        facts["still"] = [f"GPU {g.index} waiting (100 % util, idle power)" for g in waiting]
    if any(s.weight > 0 for s in signals):
        return fired(next(s.text for s in signals if s.weight > 0), *signals, facts=facts)
    summary = ", ".join(f"GPU {g.index}: {g.reading()}" for g in ev.gpus)
    return cleared(summary, *signals, facts=facts)
