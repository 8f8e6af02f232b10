"""Which container a process lives in, and the container's own facts, read from /proc and
the runtime's state files: runtime, id, name, image, PIDs both ways (``NSpid``), its /dev/shm
(through ``/proc/PID/root``), ``--ipc`` mode, cgroup memory limit and OOM-kill counters, CPU
quota, the GPUs it sees, and the runtime's captured stdout log.

Stdlib only, Python 3.8 compatible (ships with the probe). Works from the host (the container's
processes, their host PIDs, the runtime's state under /var/lib/docker or the daemon's
``--data-root``) and from inside a container (``docker:``/``k8s:`` targets: the cgroup files
of the container itself, no runtime state; the target adds ``docker inspect``).

This module joins the pieces per probe (``Containers``) and reads what the namespaces and
``/proc/PID/root`` show; cgroups.py reads the cgroups, container_runtime.py the runtime's
state and logs, ptrace_denial.py says why ptrace was refused.

Samples::

    /proc/PID/status       NSpid:	20928	1

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import os
import re

from hangdoctor.collect import procfs, target_fs
from hangdoctor.collect.cgroups import CGROUP_ROOT, cgroup_counters, identify, parse_cgroup
from hangdoctor.collect.container_runtime import (
    DOCKER_ROOTS,
    containerd_state,
    docker_roots,
    docker_state,
    pod_log_path,
)

# Annotations only (PEP 563): typing is not imported at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

SHM_TIMEOUT_S = 2.0
MAX_SHM_ENTRIES = 64
_NVIDIA_DEV = re.compile(r"^nvidia(\d+)$")


def ns_pids(fields: Dict[str, str]) -> List[int]:
    """``NSpid`` of /proc/PID/status: the pid in each pid namespace, outermost first."""
    out = []
    for word in (fields.get("NSpid") or "").split():
        if word.isdigit():
            out.append(int(word))
    return out


# ---------------------------------------------------------------- the probe's own place


def self_facts(proc: str = "/proc") -> Dict[str, Any]:
    """Where the probe itself runs: in a container or not, and what limits its ptrace."""
    fields = procfs.status_fields(os.getpid(), proc)
    ident = identify(parse_cgroup(procfs.read_text("%s/self/cgroup" % proc, 1 << 16)))
    runtime = ident["runtime"] if ident else None
    if runtime is None:
        if os.path.exists("/.dockerenv"):
            runtime = "docker"
        elif os.path.exists("/run/.containerenv"):
            runtime = "podman"
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            runtime = "kubernetes"
    if runtime is not None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        runtime = "kubernetes"
    out = {"in_container": runtime}  # type: Dict[str, Any]
    if ident:
        out["container_id"] = ident["id"]
    for key, name in (("Seccomp", "seccomp"), ("NoNewPrivs", "no_new_privs")):
        if (fields.get(key) or "").strip().isdigit():
            out[name] = int(fields[key])
    return out


# ---------------------------------------------------------------- what /proc/PID/root shows


def shm_facts(pid: Optional[int], proc: str = "/proc") -> Dict[str, Any]:
    """The container's /dev/shm seen through /proc/PID/root: size, use, what is in it.
    ``pid`` None: the probe's own /dev/shm (it runs in the container's mount namespace;
    /proc/PID/root of a process of another uid needs ptrace rights it may lack)."""
    path = "/dev/shm" if pid is None else "%s/%d/root/dev/shm" % (proc, pid)
    # the container's /dev/shm may be any mount it was given (a wedged one too): a child
    # (target_fs) stats and lists it within its own timeout
    vfs, listing = target_fs.run([{"op": "statvfs", "path": path},
                                  {"op": "listdir", "path": path, "sizes": True}], SHM_TIMEOUT_S)
    if "blocks" not in vfs:
        return {"error": "%s: %s" % (path, "no answer within %.0f s (a hung mount?)" % SHM_TIMEOUT_S
                                     if vfs.get("timeout") else vfs.get("error") or "unreadable")}
    total = vfs["blocks"] * vfs["frsize"]
    out = {
        "total_bytes": total,
        "free_bytes": vfs["bavail"] * vfs["frsize"],
        "used_bytes": total - vfs["bfree"] * vfs["frsize"],
    }  # type: Dict[str, Any]
    names = listing.get("names") or []
    sizes = listing.get("sizes") or []
    out["entries"] = [{"name": n, "bytes": b} for n, b in zip(names[:MAX_SHM_ENTRIES], sizes)
                      if b is not None]
    out["entry_count"] = int(listing.get("count") or len(names))
    return out


def visible_gpus(pid: Optional[int], proc: str = "/proc") -> Optional[List[int]]:
    """The /dev/nvidiaN device nodes the container has, or None when its /dev is unreadable.
    ``pid`` None: the probe's own /dev (it runs in the container)."""
    try:
        names = os.listdir("/dev" if pid is None else "%s/%d/root/dev" % (proc, pid))
    except OSError:
        return None
    return sorted(int(m.group(1)) for m in (_NVIDIA_DEV.match(n) for n in names) if m)


def _ns(pid: Any, kind: str, proc: str) -> Optional[str]:
    try:
        return os.readlink("%s/%s/ns/%s" % (proc, pid, kind))
    except OSError:
        return None


def _thread_ns_tid(pid: int, tid: int, proc: str) -> Optional[int]:
    text = procfs.read_text("%s/%d/task/%d/status" % (proc, pid, tid), 1 << 14) or ""
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            words = line.split()[1:]
            return int(words[-1]) if words and words[-1].isdigit() else None
    return None


def map_namespaced_threads(stacks: Dict[str, Any], records: List[Dict[str, Any]],
                           proc: str = "/proc") -> int:
    """Give the stacks of a process in another pid namespace their host thread ids back.

    py-spy run from the host reports the thread ids the process's Python recorded, which
    are its namespace's (the main thread of a container's pid 1 is ``1``); looking those up
    on the host finds no such thread, and py-spy then calls every thread active. Each
    thread is matched by its ``NSpid`` and its activity taken from its state (running or
    not), as py-spy does where the ids match. Returns how many threads were mapped."""
    mapped = 0
    for rec in records:
        pid = rec.get("pid")
        entry = stacks.get(str(pid))
        if not rec.get("ns_pids") or not isinstance(entry, dict) or entry.get("status") != "ok":
            continue
        states = {}  # type: Dict[int, Tuple[str, str]]
        ns_to_host = {}  # type: Dict[int, int]
        for t in rec.get("threads") or []:
            tid = t.get("tid")
            if not isinstance(tid, int):
                continue
            states[tid] = (str(t.get("status") or ""), str(t.get("status_end") or t.get("status") or ""))
            ns_tid = _thread_ns_tid(pid, tid, proc)
            if ns_tid is not None:
                ns_to_host[ns_tid] = tid
        for i, sample in enumerate(entry.get("samples") or []):
            for t in sample.get("threads") or []:
                host_tid = ns_to_host.get(t.get("os_thread_id"))
                if host_tid is None:
                    continue
                t["ns_thread_id"] = t["os_thread_id"]
                t["os_thread_id"] = host_tid
                state = states.get(host_tid, ("", ""))[0 if i == 0 else 1]
                t["active"] = state == "R"
                mapped += 1
        if mapped:
            entry["thread_ids"] = "mapped from the container's pid namespace to the host's"
    return mapped


# ---------------------------------------------------------------- per probe


def servers_shm(found: List[Dict[str, Any]], roots: List[int]) -> Optional[Dict[str, Any]]:
    """The /dev/shm of the servers' container, when every root lives in the same one and
    the probe is outside it (inside, the probe's own /dev/shm is already the container's)."""
    homes = [c for c in found if set(c.get("pids") or []) & set(roots)]
    if len(homes) != 1 or homes[0].get("probe_inside"):
        return None
    c = homes[0]
    if any(r not in c["pids"] for r in roots):
        return None
    shm = c.get("shm") or {}
    if not shm.get("total_bytes"):
        return None
    out = {k: shm[k] for k in ("total_bytes", "free_bytes", "used_bytes") if k in shm}
    out["path"] = "/proc/%d/root/dev/shm" % c["root_pid"]
    out["container"] = c.get("name") or c.get("short_id")
    return out



class Containers:
    """The containers of the diagnosed processes, read at both ends of the window.

    ``records``: the process records (each gets ``container_id`` and ``ns_pids``).
    """

    def __init__(
        self,
        records: List[Dict[str, Any]],
        proc: str = "/proc",
        cgroup_root: str = CGROUP_ROOT,
        host: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.proc, self.cgroup_root = proc, cgroup_root
        self.own = parse_cgroup(procfs.read_text("%s/self/cgroup" % proc, 1 << 16))
        self.own_ipc = _ns("self", "ipc", proc)
        self.own_pidns = _ns("self", "pid", proc)
        self.by_id = {}  # type: Dict[str, Dict[str, Any]]
        self._cgroups = {}  # type: Dict[str, Dict[str, str]]
        self._first = {}  # type: Dict[str, Dict[str, Any]]
        self._roots = None  # type: Optional[List[str]]
        for rec in records:
            pid = rec.get("pid")
            if not isinstance(pid, int):
                continue
            cg = parse_cgroup(procfs.read_text("%s/%d/cgroup" % (proc, pid), 1 << 16))
            ident = identify(cg)
            if ident is None:
                continue
            cid = ident["id"]
            rec["container_id"] = cid[:12]
            entry = self.by_id.get(cid)
            if entry is None:
                entry = dict(ident, short_id=cid[:12], pids=[], root_pid=pid)
                entry["probe_inside"] = identify(self.own) == ident
                self.by_id[cid] = entry
                self._cgroups[cid] = cg
                self._first[cid] = cgroup_counters(cg, self.own, cgroup_root)
                self._state(entry)
            entry["pids"].append(pid)
        runtime = (host or {}).get("in_container")
        private_ns = bool(self.own) and set(self.own.values()) <= {"/"}
        if not self.by_id and runtime and private_ns and records:
            # In a container with its own cgroup namespace (cgroup v2) every path reads "/",
            # naming no container: the probe runs in the servers' container, so its own
            # cgroup, /dev/shm and /dev are theirs. The target adds the name and id.
            pids = [r["pid"] for r in records if isinstance(r.get("pid"), int)]
            if pids:
                entry = {"runtime": runtime, "engine": "", "id": "", "short_id": "",
                         "pids": pids, "root_pid": pids[0], "probe_inside": True}
                self.by_id[""] = entry
                self._cgroups[""] = self.own
                self._first[""] = cgroup_counters(self.own, self.own, cgroup_root)

    def _state(self, entry: Dict[str, Any]) -> None:
        cid = entry["id"]
        state = None
        if entry.get("engine") == "docker" or entry["runtime"] == "docker":
            state = docker_state(cid, DOCKER_ROOTS)
            if state is None:  # a moved data-root: ask the running dockerd (a /proc scan)
                if self._roots is None:
                    self._roots = docker_roots(self.proc)
                state = docker_state(cid, self._roots)
        elif entry["runtime"] == "kubernetes":
            state = containerd_state(cid)
            if state and state.get("namespace") and state.get("pod") and state.get("name"):
                log = pod_log_path(state["namespace"], state["pod"], state["name"])
                if log:
                    state["log_path"], state["log_driver"] = log, "cri"
        if state:
            entry.update(state)

    def runtime_log(self, root_pids: List[int]) -> Tuple[Optional[str], Optional[str]]:
        """(path, format) of the runtime's captured stdout of the first root in a container."""
        for entry in self.by_id.values():
            if entry.get("root_pid") not in root_pids and not set(entry["pids"]) & set(root_pids):
                continue
            path = entry.get("log_path")
            driver = entry.get("log_driver")
            if path and os.path.isfile(path):
                if driver in (None, "json-file"):
                    return path, "docker-json"
                if driver == "cri":
                    return path, "cri"
        return None, None

    def finish(self) -> List[Dict[str, Any]]:
        out = []
        for cid, entry in self.by_id.items():
            pid = entry["root_pid"]
            now = cgroup_counters(self._cgroups[cid], self.own, self.cgroup_root)
            first = self._first.get(cid) or {}
            if first.get("oom_kill") is not None and now.get("oom_kill") is not None:
                now["oom_kill_delta"] = now["oom_kill"] - first["oom_kill"]
            if (
                first.get("cpu_nr_throttled") is not None
                and now.get("cpu_nr_throttled") is not None
            ):
                now["cpu_throttled_delta"] = now["cpu_nr_throttled"] - first["cpu_nr_throttled"]
            entry["cgroup"] = now
            seen_from = None if entry.get("probe_inside") else pid
            entry["shm"] = shm_facts(seen_from, self.proc)
            gpus = visible_gpus(seen_from, self.proc)
            if gpus is not None:
                entry["gpu_devices"] = gpus
            ipc = _ns(pid, "ipc", self.proc)
            if ipc is not None and self.own_ipc is not None:
                entry["ipc_shared_with_probe"] = ipc == self.own_ipc
            pidns = _ns(pid, "pid", self.proc)
            if pidns is not None and self.own_pidns is not None:
                entry["pidns_shared_with_probe"] = pidns == self.own_pidns
            out.append(entry)
        return out
