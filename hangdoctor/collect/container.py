"""Which container a process lives in, and the container's own facts, read from /proc and
the runtime's state files: runtime, id, name, image, PIDs both ways (``NSpid``), its /dev/shm
(through ``/proc/PID/root``), ``--ipc`` mode, cgroup memory limit and OOM-kill counters, CPU
quota, the GPUs it sees, and the runtime's captured stdout log. Also why ptrace was refused,
with the runtime's exact fix.

Stdlib only, Python 3.8 compatible (ships with the probe). Works from the host (the container's
processes, their host PIDs, the runtime's state under /var/lib/docker or the daemon's
``--data-root``) and from inside a container (``docker:``/``k8s:`` targets: the cgroup files
of the container itself, no runtime state; the target adds ``docker inspect``).

Samples::

    /proc/PID/cgroup (v1)  4:memory:/docker/f388813adde25db2eed1b73e7e52abf983ea4c4712b2ce5d01efe2144054b322
    /proc/PID/cgroup (v2)  0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e...slice/cri-containerd-9a1c....scope
    /proc/PID/status       NSpid:	20928	1
"""

from __future__ import annotations

import json
import os
import re

from hangdoctor.collect import procfs

# Annotations only (PEP 563): typing is not imported at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

CGROUP_ROOT = "/sys/fs/cgroup"
DOCKER_ROOTS = ["/var/lib/docker"]
CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
POD_LOGS = "/var/log/pods"
MAX_SHM_ENTRIES = 64
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
_NVIDIA_DEV = re.compile(r"^nvidia(\d+)$")


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


# ---------------------------------------------------------------- what /proc/PID/root shows


def shm_facts(pid: Optional[int], proc: str = "/proc") -> Dict[str, Any]:
    """The container's /dev/shm seen through /proc/PID/root: size, use, what is in it.
    ``pid`` None: the probe's own /dev/shm (it runs in the container's mount namespace;
    /proc/PID/root of a process of another uid needs ptrace rights it may lack)."""
    path = "/dev/shm" if pid is None else "%s/%d/root/dev/shm" % (proc, pid)
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"error": "%s: %s" % (path, exc.strerror or exc)}
    total = st.f_blocks * st.f_frsize
    out = {
        "total_bytes": total,
        "free_bytes": st.f_bavail * st.f_frsize,
        "used_bytes": total - st.f_bfree * st.f_frsize,
    }  # type: Dict[str, Any]
    entries = []
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    for name in names[:MAX_SHM_ENTRIES]:
        try:
            size = os.lstat(os.path.join(path, name)).st_size
        except OSError:
            continue
        entries.append({"name": name, "bytes": size})
    out["entries"] = entries
    out["entry_count"] = len(names)
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


# ---------------------------------------------------------------- the runtime's state


def _json_file(path: str) -> Optional[Dict[str, Any]]:
    text = procfs.read_text(path, 1 << 22)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def docker_roots(proc: str = "/proc") -> List[str]:
    """Where dockerd keeps its state: /var/lib/docker, daemon.json's data-root, and the
    ``--data-root`` of every running dockerd (GPU nodes often move it to a big disk)."""
    roots = list(DOCKER_ROOTS)
    conf = _json_file("/etc/docker/daemon.json") or {}
    if isinstance(conf.get("data-root"), str):
        roots.append(conf["data-root"])
    for pid in procfs.list_pids(proc):
        if procfs.read_text("%s/%d/comm" % (proc, pid), 64) != "dockerd\n":
            continue
        argv = procfs.cmdline(pid, proc)
        for i, a in enumerate(argv):
            if a in ("--data-root", "-g", "--graph") and i + 1 < len(argv):
                roots.append(argv[i + 1])
            elif a.startswith("--data-root="):
                roots.append(a.split("=", 1)[1])
    seen = []  # type: List[str]
    for r in roots:
        if r not in seen:
            seen.append(r)
    return seen


def docker_state(cid: str, roots: List[str]) -> Optional[Dict[str, Any]]:
    """Name, image, log, shm size, IPC mode, capabilities... from config.v2.json and
    hostconfig.json (readable by root only)."""
    for root in roots:
        d = os.path.join(root, "containers", cid)
        conf = _json_file(d + "/config.v2.json")
        if conf is None:
            continue
        host = _json_file(d + "/hostconfig.json") or {}
        out = docker_facts(conf, host)
        out["state_file"] = d + "/config.v2.json"
        return out
    return None


def docker_facts(doc: Dict[str, Any], host: Dict[str, Any]) -> Dict[str, Any]:
    """The facts of one Docker container document: ``config.v2.json`` with its
    ``hostconfig.json`` (read from the host), or one ``docker inspect`` entry (whose
    ``HostConfig`` is the second argument). None values are left out."""
    config = doc.get("Config") or {}
    state = doc.get("State") or {}
    gpus = []
    for req in host.get("DeviceRequests") or []:
        if isinstance(req, dict) and ["gpu"] in (req.get("Capabilities") or []):
            gpus.append({"count": req.get("Count"), "ids": req.get("DeviceIDs")})
    out = {
        "name": str(doc.get("Name") or "").lstrip("/") or None,
        "image": config.get("Image"),
        "user": config.get("User") or None,
        "init_host_pid": state.get("Pid") or None,
        "started_at": state.get("StartedAt"),
        "oom_killed": state.get("OOMKilled"),
        "restart_count": doc.get("RestartCount"),
        "log_path": doc.get("LogPath") or None,
        "log_driver": (host.get("LogConfig") or {}).get("Type"),
        "shm_size_bytes": host.get("ShmSize"),
        "ipc_mode": host.get("IpcMode"),
        "pid_mode": host.get("PidMode") or "private",
        "cap_add": host.get("CapAdd") or [],
        "privileged": bool(host.get("Privileged")),
        "security_opt": host.get("SecurityOpt") or [],
        "memory_limit_bytes": host.get("Memory") or None,
        "nano_cpus": host.get("NanoCpus") or None,
        "oci_runtime": host.get("Runtime"),
        "gpu_requests": gpus,
    }  # type: Dict[str, Any]
    return {k: v for k, v in out.items() if v is not None}


def containerd_state(cid: str, tasks: str = CONTAINERD_TASKS) -> Optional[Dict[str, Any]]:
    """A Kubernetes container's pod, namespace, name and image from its OCI bundle."""
    conf = _json_file(os.path.join(tasks, cid, "config.json"))
    if conf is None:
        return None
    ann = conf.get("annotations") or {}
    out = {
        "name": ann.get("io.kubernetes.cri.container-name"),
        "pod": ann.get("io.kubernetes.cri.sandbox-name"),
        "namespace": ann.get("io.kubernetes.cri.sandbox-namespace"),
        "image": ann.get("io.kubernetes.cri.image-name"),
        "state_file": os.path.join(tasks, cid, "config.json"),
    }
    return {k: v for k, v in out.items() if v}


def pod_log_path(namespace: str, pod: str, container: str, root: str = POD_LOGS) -> Optional[str]:
    """The kubelet's log of one container: /var/log/pods/NS_POD_UID/CONTAINER/N.log, the
    latest restart's."""
    try:
        dirs = [d for d in os.listdir(root) if d.startswith("%s_%s_" % (namespace, pod))]
    except OSError:
        return None
    best = None  # type: Optional[Tuple[int, str]]
    for d in dirs:
        cdir = os.path.join(root, d, container)
        try:
            names = os.listdir(cdir)
        except OSError:
            continue
        for n in names:
            stem = n[:-4] if n.endswith(".log") else ""
            if stem.isdigit() and (best is None or int(stem) > best[0]):
                best = (int(stem), os.path.join(cdir, n))
    return best[1] if best else None


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


# ---------------------------------------------------------------- runtime logs


def decode_log_lines(lines: List[str], fmt: str) -> List[str]:
    """Lines of a runtime's captured log as the server printed them.

    ``docker-json``: one JSON object a line, ``{"log": "text\\n", "stream": ..., "time": ...}``;
    a line longer than 16 KiB is split into pieces without the trailing newline.
    ``cri``: ``TIME STREAM P|F text`` (kubelet, containerd, cri-o); ``P`` is a partial line.
    """
    out = []  # type: List[str]
    pending = ""
    for raw in lines:
        if fmt == "docker-json":
            try:
                obj = json.loads(raw)
                text = obj.get("log") if isinstance(obj, dict) else None
            except ValueError:
                text = None
            if not isinstance(text, str):
                continue  # a cut first line of the tail
            if not text.endswith("\n"):
                pending += text
                continue
            out.append((pending + text).rstrip("\n"))
            pending = ""
        elif fmt == "cri":
            parts = raw.split(" ", 3)
            if len(parts) < 3:
                continue
            tag, text = parts[2], parts[3] if len(parts) > 3 else ""
            if tag == "P":
                pending += text
                continue
            out.append(pending + text)
            pending = ""
        else:
            out.append(raw)
    if pending:
        out.append(pending)
    return out


# ---------------------------------------------------------------- ptrace refusals

# reason code -> what it means
PTRACE_REASONS = {
    "yama-3": "Yama ptrace_scope is 3: ptrace is disabled for everyone until reboot",
    "other-uid": "the server runs as uid {uid} and hangdoctor as uid {euid}",
    "no-cap-other-uid": "no CAP_SYS_PTRACE here (the runtime's default) and the server runs as "
    "uid {uid}, not {euid}: without the capability only processes of one's own uid can be traced",
    "yama-scope": "Yama ptrace_scope is {scope}: tracing a process that is not one's child needs "
    "CAP_SYS_PTRACE, which this {where} lacks",
    "seccomp": "a seccomp filter on this {where} refuses ptrace",
    "unknown": "ptrace was refused",
}


def ptrace_reason(target_uid: Optional[int], host: Dict[str, Any]) -> str:
    """Why ptrace of a process of ``target_uid`` was refused, from the probe's own facts."""
    euid = host.get("euid")
    cap = host.get("has_cap_sys_ptrace")
    scope = host.get("ptrace_scope")
    if scope == 3:
        return "yama-3"
    if euid not in (None, 0) and target_uid is not None and target_uid != euid and not cap:
        return "other-uid"
    if cap is False and target_uid is not None and target_uid != euid:
        return "no-cap-other-uid"
    if cap is False and scope in (1, 2):
        return "yama-scope"
    if host.get("seccomp") == 2:
        return "seccomp"
    return "unknown"


def ptrace_fix(reason: str, runtime: Optional[str], names: Dict[str, Any]) -> str:
    """The runtime's exact fix for a refused ptrace. ``names``: container, pod, namespace,
    host_pid (what the fix should name)."""
    ctr = names.get("container") or "CONTAINER"
    pod = names.get("pod") or "POD"
    ns = names.get("namespace")
    host_pid = names.get("host_pid") or "HOST_PID"
    if reason == "yama-3":
        return "nothing short of a reboot lifts ptrace_scope 3; the report goes on without stacks"
    if reason == "other-uid" and runtime is None:
        return "run hangdoctor as root (sudo) or as the server's user, or pass --sudo"
    if reason == "seccomp":
        if runtime == "kubernetes":
            return (
                "set the pod's securityContext.seccompProfile.type: Unconfined, or "
                "kubectl debug -it %s%s --profile=general --target=%s"
                % (pod, " -n " + ns if ns else "", ctr)
            )
        if runtime in ("docker", "podman"):
            return (
                "%s run --security-opt seccomp=unconfined ..., or diagnose from the host: "
                "sudo hangdoctor diagnose localhost --pid %s" % (runtime, host_pid)
            )
        return "run hangdoctor outside the seccomp sandbox"
    if runtime == "kubernetes":
        return (
            "add to the container: securityContext.capabilities.add: [SYS_PTRACE]; or "
            "kubectl debug -it %s%s --profile=general --target=%s; or diagnose from the "
            "node: hangdoctor diagnose localhost --pid %s"
            % (pod, " -n " + ns if ns else "", ctr, host_pid)
        )
    if runtime in ("docker", "podman"):
        return (
            "%s run --cap-add SYS_PTRACE ... (start the container again with it); or diagnose "
            "from the host: sudo hangdoctor diagnose localhost --pid %s" % (runtime, host_pid)
        )
    if runtime:
        return "give the container CAP_SYS_PTRACE, or diagnose from the host by PID (%s)" % host_pid
    if reason == "yama-scope":
        return "sudo sysctl kernel.yama.ptrace_scope=0, or run hangdoctor as root, or pass --sudo"
    return "run hangdoctor as root (sudo), or pass --sudo"


def explain_denial(
    target_uid: Optional[int], host: Dict[str, Any], names: Dict[str, Any]
) -> Tuple[str, str, str]:
    """(reason code, one line saying exactly why, the runtime's fix) for a refused ptrace."""
    reason = ptrace_reason(target_uid, host)
    runtime = host.get("in_container")
    where = "container" if runtime else "host"
    text = PTRACE_REASONS[reason].format(
        uid=target_uid, euid=host.get("euid"), scope=host.get("ptrace_scope"), where=where
    )
    return reason, text, ptrace_fix(reason, runtime, names)


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
