"""Memory anomalies: host RAM exhausted, swapping, /dev/shm small or full; high VMS explained.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import Signal, against, check, cleared, fired, support
from hangdoctor.evidence.model import GIB, MIB, Evidence


@check("memory.host", "Host memory, swap, /dev/shm and process memory", needs=["host_memory"],
       causes=["host-oom-or-swap", "shm-exhausted"])
def memory_host(ev: Evidence):
    """MemAvailable near zero, pages swapped in or out during the window, OOM kills counted by
    the kernel during the window: ``host-oom-or-swap``. /dev/shm smaller than 1 GiB (a
    container's 64 MB default) or nearly full: ``shm-exhausted`` (NCCL and vLLM's shared-memory
    broadcast need it). Virtual memory of hundreds of GiB is normal for a CUDA process (address
    space reservations) and is said so, not flagged.

    Confirm by hand: free -h; vmstat 1 5; df -h /dev/shm; grep -E 'VmRSS|VmSize|VmSwap' /proc/PID/status
    """
    signals = []
    for host, hm in ev.host_memory:
        total = hm.get("mem_total_bytes") or 0
        avail = hm.get("mem_available_bytes")
        if total and avail is not None and avail < 0.05 * total:
            signals.append(support("host-oom-or-swap", 0.6, f"{host}: only {avail / GIB:.1f} GiB of {total / GIB:.0f} GiB available"))
        swapped = (hm.get("swap_in_pages_delta") or 0) + (hm.get("swap_out_pages_delta") or 0)
        if swapped > 256:
            signals.append(support("host-oom-or-swap", 0.5, f"{host}: {swapped} pages swapped in/out during the window"))
        if (hm.get("oom_kill_delta") or 0) > 0:
            signals.append(support("host-oom-or-swap", 0.6, f"{host}: the kernel OOM-killed {hm['oom_kill_delta']} "
                                   f"process{'es' if hm['oom_kill_delta'] != 1 else ''} during the window"))
    for host, shm in ev.shm:
        total = shm.get("total_bytes") or 0
        free = shm.get("free_bytes") or 0
        if total and total < 1 * GIB:
            signals.append(support("shm-exhausted", 0.45, f"{host}: /dev/shm is only {total / MIB:.0f} MiB (container default 64 MiB?)"))
        elif total and free < 0.05 * total:
            signals.append(support("shm-exhausted", 0.55, f"{host}: /dev/shm nearly full ({free / MIB:.0f} MiB free of {total / MIB:.0f} MiB)"))
    big_vms = [p for p in ev.processes if (p.vms_bytes or 0) > 64 * GIB and (p.rss_bytes or 0) < 0.1 * (p.vms_bytes or 1)]
    if big_vms:
        p = big_vms[0]
        signals.append(Signal(None, 0.0, f"{p.label} maps {p.vms_bytes / GIB:.0f} GiB virtual with {p.rss_bytes / GIB:.1f} GiB "
                              "resident: normal for a CUDA process (address-space reservations), not a leak"))
    if any(s.weight > 0 for s in signals):
        return fired(next(s.text for s in signals if s.weight > 0), *signals)
    parts = []
    for host, hm in ev.host_memory:
        if hm.get("mem_available_bytes") is not None:
            parts.append(f"{host}: {hm['mem_available_bytes'] / GIB:.1f} GiB available, no swapping")
    for _host, shm in ev.shm:
        if shm.get("total_bytes"):
            parts.append(f"/dev/shm {shm['free_bytes'] / GIB:.1f} of {shm['total_bytes'] / GIB:.1f} GiB free")
    clear = [against("host-oom-or-swap", 0.6, "; ".join(parts[:1]) or "host memory normal")]
    if ev.shm:
        clear.append(against("shm-exhausted", 0.5, "/dev/shm large enough and not full"))
    return cleared("; ".join(parts) or "memory normal", *clear, *signals)
