"""NVML that hangs or fails, GPUs lost, ECC errors: the GPU itself is at fault.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence


@check("gpu.health", "NVML answers, GPUs present, no ECC errors", causes=["gpu-fault"])
def gpu_health(ev: Evidence):
    """A wedged driver makes NVML and nvidia-smi stop answering: hangdoctor records the call
    that did not return as evidence instead of hanging. A GPU reported lost (Xid 79 territory)
    or with uncorrected ECC errors is a fault.

    Confirm by hand: timeout 10 nvidia-smi; nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER
    """
    signals = []
    for m in ev.manifest:
        if m.get("source") in ("nvml", "nvidia-smi") and m.get("status") in ("timeout", "failed"):
            text = f"NVML on {m.get('host')}: {m.get('status')}: {m.get('detail') or 'no detail'}"
            signals.append(support("gpu-fault", 0.75 if m.get("status") == "timeout" else 0.45, text))
    for g in ev.gpus:
        if g.lost:
            signals.append(support("gpu-fault", 0.85, f"GPU {g.index} on {g.host} is lost (NVML: GPU is lost)"))
        errs = g.raw.get("errors") or {}
        ecc = errs.get("ecc_uncorrected_volatile") or 0
        if ecc:
            signals.append(support("gpu-fault", 0.45, f"GPU {g.index}: {ecc} uncorrected ECC errors since boot"))
        if errs.get("xid_last"):
            signals.append(support("gpu-fault", 0.6, f"GPU {g.index}: last Xid {errs['xid_last']}"))
    if signals:
        return fired(signals[0].text, *signals)
    if ev.gpus:
        return cleared(f"NVML answered for {len(ev.gpus)} GPU(s); none lost, no ECC errors",
                       against("gpu-fault", 0.5, "NVML answered in time; no GPU lost, no uncorrected ECC errors"))
    status = ev.manifest_status("nvml")
    if status == "unavailable":
        return cleared("no NVIDIA driver on this host")
    return cleared("no GPU evidence")
