"""GPU memory at the limit: CUDA out of memory during load or warm-up.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence


@check("gpu.memory", "GPU memory against its total", needs=["gpus"], causes=["gpu-oom"])
def gpu_memory(ev: Evidence):
    """A GPU whose used memory sits at its total during load or warm-up is where a CUDA
    out-of-memory error comes from; the log usually says ``CUDA out of memory`` too.

    Confirm by hand: nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv
    """
    full = []
    for g in ev.gpus:
        total = g.raw.get("mem_total_mib")
        used = g.mem_used_mib
        if total and used is not None and used >= 0.97 * float(total):
            full.append((g, used, total))
    if full:
        text = ", ".join(f"GPU {g.index}: {used:.0f} of {total} MiB used" for g, used, total in full)
        return fired(f"GPU memory at its limit: {text}", support("gpu-oom", 0.35, f"GPU memory at its limit: {text}"))
    if ev.gpus:
        return cleared("every GPU has free memory", against("gpu-oom", 0.3, "every GPU has free memory"))
    return cleared("no GPU samples")
