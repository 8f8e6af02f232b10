"""A container's /dev/shm too small or full for the NCCL / shared-memory users inside it.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re

from hangdoctor.checkapi import against, check, cleared, fired, skipped, support

from ._container import GIB, containers, label, members, size

# What needs large shared memory in an inference server: NCCL's SHM transport (nccl-*),
# Python's multiprocessing.shared_memory (psm_*, vLLM's shared-memory broadcast), torch's
# tensor sharing (torch_*), Gloo and PyTorch's DataLoader. multiprocessing's POSIX semaphores
# (sem.*, 32 bytes each) are in every Queue's /dev/shm and need none: alone they are no user.
_SHM_FILES = re.compile(r"^(nccl-|psm_|torch_|vllm|sglang|__KMP_REGISTERED|cuda\.shm)")
_ENGINES = re.compile(
    r"vllm|sglang|text-generation|tensorrt_llm|trtllm|torchrun|torch\.distributed"
)


def _users(ev, host, c) -> list[str]:
    found = []
    procs = members(ev, host, c)
    nccl = [p for p in procs if any(k.startswith("NCCL_") for k in p.env)]
    if nccl:
        found.append(f"{len(nccl)} process(es) with NCCL_* settings")
    dist = [p for p in procs if p.raw.get("is_torch_distributed")]
    if dist:
        found.append(f"{len(dist)} torch.distributed process(es)")
    engines = [p for p in procs if _ENGINES.search(p.cmdline_text)]
    if engines and not dist:
        found.append(f"{len(engines)} inference-engine process(es)")
    files = [e.get("name", "") for e in (c.get("shm") or {}).get("entries") or []]
    shm_files = [f for f in files if _SHM_FILES.match(f)]
    if shm_files:
        found.append(
            f"{len(shm_files)} shared-memory segment(s) in it ({', '.join(shm_files[:3])})"
        )
    return found


def _fix(c) -> str:
    if c.get("runtime") == "kubernetes":
        return (
            "mount an emptyDir with medium: Memory (and a sizeLimit) at /dev/shm, or set "
            "hostIPC: true"
        )
    runtime = c.get("runtime") if c.get("runtime") in ("docker", "podman") else "docker"
    return f"{runtime} run --shm-size=16g (or --ipc=host)"


@check(
    "container.shm",
    "The container's /dev/shm against its shared-memory users",
    causes=["shm-exhausted"],
)
def container_shm(ev):
    """A container gets its own /dev/shm: 64 MiB by default in Docker and Kubernetes, which
    NCCL's shared-memory transport, vLLM's shared-memory broadcast and torch's tensor sharing
    outgrow, and then fail with SIGBUS or wait forever. Fires for a /dev/shm under 1 GiB with
    such users inside (NCCL settings, torch.distributed ranks, an inference engine, their
    segments in /dev/shm), or nearly full (under 5 % free) whoever uses it. Ruled out when
    the container's /dev/shm is large enough and not full.

    Confirm by hand: docker exec CONTAINER df -h /dev/shm; docker inspect -f '{{.HostConfig.ShmSize}} {{.HostConfig.IpcMode}}' CONTAINER; ls -la /proc/PID/root/dev/shm
    """
    rows = [(h, c) for h, c in containers(ev) if (c.get("shm") or {}).get("total_bytes")]
    if not rows:
        return skipped(["container /dev/shm"], "no container's /dev/shm was read")
    signals, fine = [], []
    for host, c in rows:
        shm = c["shm"]
        total, free = shm["total_bytes"], shm.get("free_bytes") or 0
        who = label(c)
        users = _users(ev, host, c)
        mode = c.get("ipc_mode")
        mode_text = f", --ipc {mode}" if mode and c.get("runtime") != "kubernetes" else ""
        if free < 0.05 * total:
            signals.append(
                support(
                    "shm-exhausted",
                    0.7,
                    f"{who}: /dev/shm is full ({size(free)} free of {size(total)}{mode_text})"
                    + (f"; users: {'; '.join(users)}" if users else "")
                    + f" — {_fix(c)}",
                )
            )
        elif total < 1 * GIB and users:
            signals.append(
                support(
                    "shm-exhausted",
                    0.55,
                    f"{who}: /dev/shm is only {size(total)}{mode_text} and "
                    f"{'; '.join(users)} use shared memory — {_fix(c)}",
                )
            )
        elif total < 1 * GIB:
            fine.append(f"{who}: /dev/shm is {size(total)} but nothing in it uses shared memory")
        else:
            fine.append(f"{who}: /dev/shm {size(free)} free of {size(total)}")
    if signals:
        return fired(signals[0].text, *signals)
    return cleared("; ".join(fine), against("shm-exhausted", 0.4, "; ".join(fine)))
