"""Small helpers shared by the built-in checks (not a check module: the name starts with _).

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hangdoctor.evidence.model import Evidence, Rank


def ref(p: Any) -> str:
    return f"pid:{p.pid}"


def rank_label(r: Rank) -> str:
    return f"rank {r.rank} (pid {r.pid})" if r.rank is not None else f"pid {r.pid}"


def odd_entry(r: Rank, why: str) -> dict[str, Any]:
    return {"host": r.host, "pid": r.pid, "rank": r.rank, "why": why}


def ranks_with_stacks(ev: Evidence) -> list[Rank]:
    return [r for r in ev.ranks if r.stack is not None and r.stack.ok and r.stack.main is not None
            and r.proc.alive]


def majority(values: list[str]) -> tuple[str | None, int]:
    if not values:
        return None, 0
    value, count = Counter(values).most_common(1)[0]
    return value, count


def describe_kind(kind: str) -> str:
    if kind.startswith("collective:"):
        return kind.split(":", 1)[1]
    return {
        "cuda-sync": "a CUDA synchronize",
        "ipc-wait": "a pipe/queue/socket wait",
        "rendezvous": "process-group rendezvous",
        "nccl-init": "NCCL communicator init",
        "lock": "a file lock",
        "io": "file reads",
        "compile": "compilation",
        "graph-capture": "CUDA graph capture",
        "serving-idle": "an idle event loop",
        "running": "running code",
        "unknown": "an unrecognised place",
    }.get(kind, kind)


def has_nccl_threads(r: Rank) -> bool:
    """Does this rank run NCCL collectives? PyTorch's ProcessGroupNCCL starts a watchdog thread
    (``pt_nccl_watchdg``, heartbeat ``pt_nccl_heartbt``) and NCCL names its own service threads
    ``NCCL ...``; a rank with neither has no NCCL process group, so no NCCL collective can be
    what its GPU waits on."""
    names = [t.get("name") or "" for t in r.proc.threads or []]
    if r.stack and r.stack.ok:
        names += r.stack.thread_names()
    return any(n.startswith(("NCCL", "pt_nccl_")) for n in names)
