"""Which container each diagnosed process lives in, and its PIDs in both namespaces.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import Signal, check, cleared, fired

from ._container import containers, label, members


@check("container.placement", "Which container the server runs in", causes=[])
def container_placement(ev):
    """Names the container (runtime, name, id, image; the pod and node in Kubernetes) of the
    diagnosed processes, from their cgroup and the runtime's state (or ``docker inspect`` /
    ``kubectl get pod``), with each process's PID inside the container and on the host
    (``NSpid``), the container's CPU quota and the GPUs it sees. A plain finding: it speaks
    for no cause, but says which container the evidence came from and which PIDs the host's
    kernel log would name.

    Confirm by hand: cat /proc/PID/cgroup; grep NSpid /proc/PID/status; docker ps --no-trunc | grep ID
    """
    rows = containers(ev)
    if not rows:
        return cleared("the diagnosed processes run on the host, in no container")
    signals = []
    for host, c in rows:
        parts = [label(c)]
        if c.get("short_id"):
            parts.append(f"id {c['short_id']}")
        if c.get("image"):
            parts.append(f"image {c['image']}")
        if c.get("node"):
            parts.append(f"node {c['node']}")
        procs = members(ev, host, c)
        pairs = []
        for p in procs[:8]:
            ns = p.raw.get("ns_pids") or []
            if len(ns) > 1:
                pairs.append(f"{ns[-1]}={ns[0]}")
        if pairs:
            parts.append("container pid = host pid: " + ", ".join(pairs))
        elif c.get("probe_inside") and c.get("init_host_pid"):
            parts.append(f"seen from inside; its pid 1 is host pid {c['init_host_pid']}")
        cg = c.get("cgroup") or {}
        if cg.get("cpu_quota_cores") or c.get("cpu_limit_cores"):
            parts.append(f"CPU quota {cg.get('cpu_quota_cores') or c.get('cpu_limit_cores')} cores")
            if cg.get("cpu_throttled_delta"):
                parts.append(f"throttled {cg['cpu_throttled_delta']} times in the window")
        gpus = c.get("gpu_devices")
        if gpus is not None:
            parts.append(f"GPUs it sees: {', '.join(f'/dev/nvidia{g}' for g in gpus) or 'none'}")
        signals.append(Signal(None, 0.0, f"{host}: " + "; ".join(parts)))
    return fired(signals[0].text, *signals)
