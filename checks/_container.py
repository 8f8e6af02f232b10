"""Helpers for the container checks (not a check module: the name starts with _).

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from typing import Any

from hangdoctor.evidence.model import Evidence, Proc

GIB = 1 << 30
MIB = 1 << 20


def containers(ev: Evidence) -> list[tuple[str, dict[str, Any]]]:
    """(host, container facts) for every container a snapshot names (collect/container.py)."""
    out = []
    for s in ev.snapshots:
        host = (s.get("host") or {}).get("name", "?")
        for c in s.get("containers") or []:
            if isinstance(c, dict):
                out.append((host, c))
    return out


def label(c: dict[str, Any]) -> str:
    """``docker container vllm (3f2a…, image vllm/vllm-openai)``, or the pod's name."""
    runtime = c.get("runtime") or "container"
    if c.get("pod"):
        where = f"pod {c.get('namespace') + '/' if c.get('namespace') else ''}{c['pod']}"
        if c.get("name"):
            where += f" container {c['name']}"
    else:
        where = f"{runtime} container {c.get('name') or c.get('short_id') or '(the one hangdoctor ran in)'}"
    return where


def members(ev: Evidence, host: str, c: dict[str, Any]) -> list[Proc]:
    short = c.get("short_id") or str(c.get("id") or "")[:12]
    pids = set(c.get("pids") or [])
    return [
        p
        for p in ev.processes
        if p.host == host and (p.raw.get("container_id") == short or p.pid in pids)
    ]


def size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"
