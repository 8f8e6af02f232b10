"""What a container runtime keeps about a container: Docker's state files (``config.v2.json``
and ``hostconfig.json`` under /var/lib/docker or the daemon's ``--data-root``; ``docker_facts``
maps one such document, and a ``docker inspect`` entry too), containerd's OCI bundle of a
Kubernetes container, the kubelet's pod log, and the formats of the captured stdout logs.

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import json
import os

from hangdoctor.collect import procfs

# Annotations only (PEP 563): typing is not imported at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

DOCKER_ROOTS = ["/var/lib/docker"]
CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
POD_LOGS = "/var/log/pods"


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
        # only root's dockerd: any user can start a process named dockerd whose --data-root
        # holds a config.v2.json with a LogPath of its choosing, read as root afterwards
        uid = (procfs.status_fields(pid, proc).get("Uid") or "x").split()[0]
        if uid != "0":
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
    best: Optional[Tuple[int, str]] = None
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
