"""cgroups of a process: ``/proc/PID/cgroup`` parsed, the container it names (runtime, engine,
id, pod uid), and the cgroup's counters (memory limit, use and OOM kills; CPU quota and
throttling; pids), cgroup v1 or v2, read from the host or from inside the container.

Samples::

    /proc/PID/cgroup (v1)  4:memory:/docker/f388813adde25db2eed1b73e7e52abf983ea4c4712b2ce5d01efe2144054b322
    /proc/PID/cgroup (v2)  0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e...slice/cri-containerd-9a1c....scope

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import os
import re

from hangdoctor.collect import procfs

# Annotations only (PEP 563): typing is not imported at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a page-rounded 2^63 - 1

_HEX64 = r"([0-9a-f]{64})"
# (runtime, engine, pattern) in the order they are tried: Kubernetes first (its containers
# are also docker/containerd/cri-o ones), then the engines, then any 64-hex leaf.
_CGROUP_PATTERNS = [
    ("kubernetes", "containerd", re.compile(r"kubepods.*cri-containerd[-:]" + _HEX64)),
    ("kubernetes", "cri-o", re.compile(r"kubepods.*crio-(?:conmon-)?" + _HEX64)),
    ("kubernetes", "docker", re.compile(r"kubepods.*docker-" + _HEX64)),
    ("kubernetes", "", re.compile(r"kubepods.*/" + _HEX64 + r"(?:\.scope)?$")),
    ("docker", "docker", re.compile(r"(?:/docker[/-]|docker-)" + _HEX64)),
    ("podman", "podman", re.compile(r"libpod-(?:conmon-)?" + _HEX64)),
    ("containerd", "containerd", re.compile(r"cri-containerd[-:]" + _HEX64)),
    ("cri-o", "cri-o", re.compile(r"crio-" + _HEX64)),
    ("container", "", re.compile(r"/" + _HEX64 + r"(?:\.scope)?$")),
]
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


# ---------------------------------------------------------------- cgroup paths


def parse_cgroup(text: Optional[str]) -> Dict[str, str]:
    """``/proc/PID/cgroup`` as controller -> path (``""`` is the v2 unified hierarchy)."""
    out = {}  # type: Dict[str, str]
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out[""] = path
        for c in controllers.split(","):
            if c:
                out[c.replace("name=", "")] = path
    return out


def identify(cgroups: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """Runtime, engine, id (and pod uid) from the cgroup paths, or None (not a container)."""
    paths = [cgroups.get(k) for k in ("memory", "", "pids", "cpu", "systemd")]
    paths += list(cgroups.values())
    for path in paths:
        if not path:
            continue
        for runtime, engine, pat in _CGROUP_PATTERNS:
            m = pat.search(path)
            if m:
                found = {"runtime": runtime, "engine": engine, "id": m.group(1)}  # type: Dict[str, Any]
                pod = _POD_UID.search(path)
                if runtime == "kubernetes" and pod:
                    found["pod_uid"] = pod.group(1).replace("_", "-")
                return found
    return None


# ---------------------------------------------------------------- cgroup counters


def _read_int(path: str) -> Optional[int]:
    text = procfs.read_text(path, 256)
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return -1
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def _read_kv(path: str) -> Dict[str, int]:
    out = {}
    for line in (procfs.read_text(path, 1 << 14) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _cgroup_dir(controller: str, path: str, probe_path: Optional[str], root: str) -> Optional[str]:
    """The directory of ``path`` in ``controller``'s hierarchy, as this probe can see it.

    Inside a container the hierarchy is the container's own, mounted at the root: the
    path the kernel names does not exist there. The root is used only when the probe sits in
    that same cgroup (it runs in the container); else its numbers would be the host's."""
    base = root if controller == "" else os.path.join(root, controller)
    full = os.path.normpath(base + "/" + path.lstrip("/"))
    if os.path.isdir(full):
        return full
    if probe_path is not None and probe_path == path and os.path.isdir(base):
        return base
    return None


def cgroup_counters(
    cgroups: Dict[str, str], own: Dict[str, str], root: str = CGROUP_ROOT
) -> Dict[str, Any]:
    """Memory limit, use and OOM kills; CPU quota and throttling; pids (v1 or v2)."""
    out = {}  # type: Dict[str, Any]
    v1_mem = os.path.isdir(os.path.join(root, "memory"))
    if v1_mem and "memory" in cgroups:
        d = _cgroup_dir("memory", cgroups["memory"], own.get("memory"), root)
        if d:
            out["cgroup_version"] = 1
            limit = _read_int(d + "/memory.limit_in_bytes")
            out["memory_limit_bytes"] = None if limit is None or limit >= UNLIMITED else limit
            out["memory_usage_bytes"] = _read_int(d + "/memory.usage_in_bytes")
            out["memory_max_usage_bytes"] = _read_int(d + "/memory.max_usage_in_bytes")
            out["memory_failcnt"] = _read_int(d + "/memory.failcnt")
            oom = _read_kv(d + "/memory.oom_control")
            out["oom_kill"] = oom.get("oom_kill")
            out["under_oom"] = oom.get("under_oom")
            out["memory_path"] = d
    elif "" in cgroups:
        d = _cgroup_dir("", cgroups[""], own.get(""), root)
        if d and os.path.exists(d + "/memory.current"):
            out["cgroup_version"] = 2
            limit = _read_int(d + "/memory.max")
            out["memory_limit_bytes"] = None if limit in (None, -1) else limit
            out["memory_usage_bytes"] = _read_int(d + "/memory.current")
            out["memory_max_usage_bytes"] = _read_int(d + "/memory.peak")
            events = _read_kv(d + "/memory.events")
            out["oom_kill"] = events.get("oom_kill")
            out["oom_events"] = events.get("oom")
            out["memory_max_events"] = events.get("max")
            out["memory_path"] = d
    cpu_ctl = "cpu" if os.path.isdir(os.path.join(root, "cpu")) else ""
    if cpu_ctl in cgroups:
        d = _cgroup_dir(cpu_ctl, cgroups[cpu_ctl], own.get(cpu_ctl), root)
        if d and cpu_ctl == "cpu":
            quota, period = _read_int(d + "/cpu.cfs_quota_us"), _read_int(d + "/cpu.cfs_period_us")
            if quota is not None and quota > 0 and period:
                out["cpu_quota_cores"] = round(quota / float(period), 3)
            stat = _read_kv(d + "/cpu.stat")
            out["cpu_nr_throttled"] = stat.get("nr_throttled")
            if "throttled_time" in stat:
                out["cpu_throttled_s"] = round(stat["throttled_time"] / 1e9, 3)
        elif d:
            words = (procfs.read_text(d + "/cpu.max", 128) or "").split()
            if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
                out["cpu_quota_cores"] = round(int(words[0]) / float(words[1]), 3)
            stat = _read_kv(d + "/cpu.stat")
            out["cpu_nr_throttled"] = stat.get("nr_throttled")
            if "throttled_usec" in stat:
                out["cpu_throttled_s"] = round(stat["throttled_usec"] / 1e6, 3)
    pids_ctl = "pids" if os.path.isdir(os.path.join(root, "pids")) else ""
    if pids_ctl in cgroups:
        d = _cgroup_dir(pids_ctl, cgroups[pids_ctl], own.get(pids_ctl), root)
        if d:
            out["pids_current"] = _read_int(d + "/pids.current")
            pmax = _read_int(d + "/pids.max")
            out["pids_max"] = None if pmax in (None, -1) else pmax
    return {k: v for k, v in out.items() if v is not None}
