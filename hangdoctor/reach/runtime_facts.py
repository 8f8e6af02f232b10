"""A probe that ran inside a container, seen from outside: the runtime's own view of the
container (``docker inspect``, ``kubectl get pod``) merged into the probe's snapshot, and what
the probe could not do in there (ptrace, the kernel log) restated for the host.

Pure: snapshot dicts in, the same dicts changed.

Layer: reach; may import: the standard library and hangdoctor.collect.container (the ptrace
fix per runtime).
"""

from __future__ import annotations

from typing import Any


def host_kernel_log(snapshot: dict[str, Any]) -> None:
    """In a container the kernel log is the host's, and reading it needs CAP_SYSLOG, which
    containers lack: not a permission to fix in the container, but a source to read on the
    host. Said so, rather than as a refusal with a sysctl remedy."""
    host = snapshot.get("host") or {}
    if not isinstance(host, dict) or not host.get("in_container"):
        return
    for m in snapshot.get("manifest") or []:
        if isinstance(m, dict) and m.get("source") == "kernel_log" and m.get("status") == "denied":
            m["status"] = "unavailable"
            m["detail"] = (
                f"the host's kernel log is not readable in the container ({m.get('detail')})"
            )
            m["remedy"] = "read it on the host (dmesg -T), or diagnose from the host by PID"


def merge_runtime_facts(snapshot: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """Add the runtime's view of the target container (``docker inspect``, ``kubectl get
    pod``) to the snapshot of a probe that ran inside it.

    The probe names its container when its cgroup path does (cgroup v1); with a private
    cgroup namespace it sees ``/`` and names none: every process it saw is then in this one.
    What the probe measured stays; the runtime's facts fill in the rest. A refused ptrace's
    fix is given again for this runtime (the probe could only guess it from inside), naming
    the container and the host pid of its init. Returns the entry.
    """
    from hangdoctor.collect.ptrace_denial import ptrace_fix

    containers = snapshot.get("containers")
    if not isinstance(containers, list):
        containers = snapshot["containers"] = []
    cid = str(facts.get("id") or "")
    entry = None
    for c in containers:
        if isinstance(c, dict) and cid and str(c.get("id") or "").startswith(cid[:12]):
            entry = c
    inside = [c for c in containers if isinstance(c, dict) and c.get("probe_inside")]
    if entry is None and len(inside) == 1:
        entry = inside[0]  # the probe ran in the target: its container is this one
    if entry is None:
        entry = {"pids": [], "short_id": cid[:12] or None}
        containers.append(entry)
    for key, value in facts.items():
        if value is not None and entry.get(key) in (None, "", []):
            entry[key] = value
    entry["probe_inside"] = True
    short = entry.get("short_id") or cid[:12]
    for proc in snapshot.get("processes") or []:
        if isinstance(proc, dict) and not proc.get("container_id"):
            proc["container_id"] = short
            if proc.get("pid") not in entry["pids"]:
                entry["pids"].append(proc.get("pid"))
    names = {
        "container": facts.get("name"),
        "pod": facts.get("pod"),
        "namespace": facts.get("namespace"),
        "host_pid": entry.get("init_host_pid"),
    }
    fixes = {}
    for key, st in (snapshot.get("stacks") or {}).items():
        if isinstance(st, dict) and st.get("denied_reason"):
            st["remedy"] = ptrace_fix(str(st["denied_reason"]), facts.get("runtime"), names)
            fixes[key] = st["remedy"]
    for m in snapshot.get("manifest") or []:
        if not isinstance(m, dict) or m.get("status") != "denied":
            continue
        source = str(m.get("source") or "")
        pid = source.partition(":")[2]
        if pid in fixes:
            m["remedy"] = fixes[pid]
        elif fixes and source in ("stacks", "environ"):
            m["remedy"] = next(iter(fixes.values()))
    return entry
