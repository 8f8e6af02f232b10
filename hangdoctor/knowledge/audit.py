"""The environment audit: facts derived from the extracted ones and ``environment.json`` (known
pairings and minimum versions, each with its public source), and a short summary of the
environment for the report.

Layer: knowledge; may import: the standard library, hangdoctor.knowledge and the foundation.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from hangdoctor.knowledge.facts import version_tuple

HERE = os.path.dirname(os.path.abspath(__file__))


@lru_cache(maxsize=1)
def environment_data() -> dict[str, Any]:
    with open(os.path.join(HERE, "environment.json"), encoding="utf-8") as f:
        return json.load(f)


def _first(facts: dict[str, Any], key: str) -> Any:
    v = facts.get(key)
    return v[0] if isinstance(v, list) and v else v


def derive(facts: dict[str, Any]) -> dict[str, Any]:
    """Add the derived facts to ``facts`` (in place) and return it."""
    data = environment_data()
    torch = facts.get("torch_version")
    ncc = facts.get("nccl_version") or []
    if torch:
        minor = ".".join(str(x) for x in version_tuple(torch)[:2])
        want = data["torch_nccl"]["pairs"].get(minor)
        if want:
            facts["torch_nccl_expected"] = want
            others = [v for v in ncc if version_tuple(v) != version_tuple(want)]
            if ncc and len(others) == len(ncc):
                facts["torch_nccl_mismatch"] = f"torch {torch} ships NCCL {want}, the evidence shows {', '.join(ncc)}"
    cuda = [c for c in facts.get("cuda_version") or [] if version_tuple(c)]
    archs = facts.get("gpu_arch") or []
    mins = data["min_cuda_for_arch"]["archs"]
    for arch in archs:
        need = mins.get(str(arch))
        if need and cuda and all(version_tuple(c) < version_tuple(need) for c in cuda):
            facts["cuda_too_old_for_arch"] = f"sm_{arch} needs CUDA {need} or later; the evidence shows CUDA {', '.join(cuda)}"
    drv = _first(facts, "driver_version")
    if drv:
        facts["driver_branch"] = str(drv).split(".")[0]
    if facts.get("nccl_pip"):
        facts["nccl_source"] = "pip wheel"
    elif facts.get("nccl_system"):
        facts["nccl_source"] = "system library"
    pcie = facts.get("consumer_gpu") or facts.get("workstation_gpu") or facts.get("topo_pcie_only") or (
        facts.get("pcie_gpu") and not facts.get("nvlink"))
    if facts.get("tp", 1) >= 2 and pcie and not facts.get("custom_ar_disabled"):
        facts["custom_ar_on_pcie"] = True
    if facts.get("docker") and not facts.get("ipc_host") and not facts.get("shm_size"):
        facts["docker_default_shm"] = True
    return facts


def summary(facts: dict[str, Any]) -> dict[str, Any]:
    """What the report shows under 'environment': only what the evidence said."""
    keys = ("driver_version", "driver_branch", "cuda_version", "nccl_version", "nccl_source",
            "torch_version", "torch_nccl_expected", "vllm_version", "sglang_version", "flashinfer_version",
            "mpi4py_version", "gpu_arch", "tp", "dp", "pp", "nnodes", "shm_size", "ipc_host",
            "ld_preload", "interposer", "spec_decode", "enforce_eager", "custom_ar_disabled",
            "topo_links", "max_model_len", "kv_cache_tokens")
    out = {k: facts[k] for k in keys if facts.get(k) not in (None, [], False)}
    if facts.get("mpich"):
        out["mpi"] = "MPICH"
    elif facts.get("openmpi"):
        out["mpi"] = "Open MPI"
    nccl_env = {k[4:]: v for k, v in facts.items() if k.startswith("env:NCCL_")}
    if nccl_env:
        out["nccl_env"] = nccl_env
    return out


def findings(facts: dict[str, Any]) -> list[str]:
    """The audit's findings, each one line with its reason."""
    out = []
    for key in ("torch_nccl_mismatch", "cuda_too_old_for_arch"):
        if facts.get(key):
            out.append(str(facts[key]))
    notes = environment_data()["driver_branches"]["notes"]
    if facts.get("driver_branch") in notes:
        out.append(f"driver branch {facts['driver_branch']}: {notes[facts['driver_branch']]}")
    if facts.get("custom_ar_on_pcie"):
        out.append("tensor parallel over PCIe GPUs with the custom all-reduce on: it relies on P2P "
                   "(--disable-custom-all-reduce tells whether P2P is the problem)")
    if facts.get("docker_default_shm"):
        out.append("a container started without --ipc=host or --shm-size gets 64 MB of /dev/shm")
    for lib in facts.get("ld_preload") or []:
        out.append(f"LD_PRELOAD={lib}: every CUDA call goes through it")
    return out
