"""The environment audit: versions, NCCL source, MPI, interposers, topology, container settings.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import Signal, check, cleared, fired
from hangdoctor.evidence.model import Evidence
from hangdoctor.knowledge import audit, matcher


@check("env.audit", "Environment audit: driver, CUDA, NCCL, torch, MPI, interposers, container",
       causes=["driver-or-runtime-mismatch", "nccl-transport", "shm-exhausted", "cuda-interposer-deadlock"])
def env_audit(ev: Evidence):
    """Extracts the environment from every line the evidence carries (collect_env, pip lists,
    launch commands, env dumps, NCCL INFO lines, nvidia-smi): driver branch, CUDA runtime, NCCL
    version and where it comes from (pip wheel or system), torch and the NCCL its wheel ships,
    MPI flavour, LD_PRELOAD interposers, the GPU topology, tensor/data/pipeline parallelism,
    --shm-size / --ipc. Pairings and minimum versions are data with their public source
    (knowledge/environment.json); the causes they speak for are rules (knowledge/rules.json,
    ``env.*``), so this check reports and the knowledge check weighs.

    Confirm by hand: python collect_env.py; nvidia-smi; nvidia-smi topo -m; env | grep -E 'NCCL|LD_PRELOAD'
    """
    view = matcher.view_of_evidence(ev)
    env = audit.summary(view.facts)
    found = audit.findings(view.facts)
    if not env:
        return cleared("no versions, launch flags or settings in the evidence", facts={"environment": {}})
    if not found:
        shown = ", ".join(f"{k}={v}" for k, v in list(env.items())[:6])
        return cleared(f"nothing known-bad in the environment ({shown})", facts={"environment": env})
    return fired(found[0], *[Signal(None, 0.0, f) for f in found], facts={"environment": env})
