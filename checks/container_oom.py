"""OOM kills and memory limits of the container's cgroup.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, skipped, support

from ._container import containers, label, size


@check(
    "container.oom",
    "The container's cgroup: OOM kills and the memory limit",
    causes=["rank-died", "host-oom-or-swap"],
)
def container_oom(ev):
    """A container's memory limit is its own small host: the cgroup's OOM killer kills a
    rank (the survivors then wait for it forever) without the host's memory ever running
    low. Fires on OOM kills counted by the cgroup (``memory.events`` oom_kill on cgroup v2,
    ``memory.oom_control`` on v1) during the window or since the container started, on a
    container the runtime restarted after an OOM kill (Kubernetes lastState OOMKilled,
    Docker State.OOMKilled), on memory use at the limit, and on a cgroup frozen under OOM
    with the killer disabled (``under_oom 1``: every task waits). Ruled out when the
    counters are zero and use is below the limit.

    Confirm by hand: cat /sys/fs/cgroup/memory/docker/ID/memory.oom_control (v1) or /sys/fs/cgroup/PATH/memory.events (v2); kubectl get pod POD -o jsonpath='{.status.containerStatuses[*].lastState}'
    """
    rows = [
        (h, c)
        for h, c in containers(ev)
        if c.get("cgroup") or c.get("last_exit_reason") or c.get("oom_killed") is not None
    ]
    if not rows:
        return skipped(["container cgroup"], "no container's cgroup was read")
    signals, fine = [], []
    for _host, c in rows:
        who = label(c)
        cg = c.get("cgroup") or {}
        limit = cg.get("memory_limit_bytes") or c.get("memory_limit_bytes")
        limit_text = f" (limit {size(limit)})" if limit else ""
        delta = cg.get("oom_kill_delta") or 0
        total = cg.get("oom_kill") or 0
        if delta > 0:
            text = f"{who}: its cgroup OOM-killed {delta} process(es) during the window{limit_text}"
            signals += [support("rank-died", 0.6, text), support("host-oom-or-swap", 0.5, text)]
        elif total > 0:
            text = (
                f"{who}: its cgroup has OOM-killed {total} process(es) since it started{limit_text}"
            )
            signals += [support("rank-died", 0.45, text), support("host-oom-or-swap", 0.35, text)]
        if cg.get("under_oom"):
            signals.append(
                support(
                    "host-oom-or-swap",
                    0.6,
                    f"{who}: the cgroup is under OOM with the killer disabled: "
                    "its tasks wait for memory that never comes",
                )
            )
        if c.get("last_exit_reason") == "OOMKilled" and (c.get("restart_count") or 0) > 0:
            signals.append(
                support(
                    "rank-died",
                    0.4,
                    f"{who}: restarted {c['restart_count']} time(s), the last one "
                    f"after an OOM kill{limit_text}",
                )
            )
        elif c.get("oom_killed") is True and c.get("runtime") == "docker":
            signals.append(
                support("rank-died", 0.35, f"{who}: Docker says its last run ended in an OOM kill")
            )
        usage = cg.get("memory_usage_bytes")
        if limit and usage is not None and usage >= 0.95 * limit:
            signals.append(
                support(
                    "host-oom-or-swap",
                    0.4,
                    f"{who}: using {size(usage)} of its {size(limit)} memory limit",
                )
            )
        if not any(s.text.startswith(who) for s in signals):
            if usage is not None:
                fine.append(f"{who}: no OOM kills, {size(usage)} used{limit_text or ' (no limit)'}")
            else:
                fine.append(f"{who}: no OOM kills")
    if signals:
        return fired(signals[0].text, *signals)
    return cleared("; ".join(fine), against("host-oom-or-swap", 0.3, "; ".join(fine)))
