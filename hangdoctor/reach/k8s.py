"""``k8s:[NAMESPACE/]POD[/CONTAINER]``: the probe runs in a pod's container through
``kubectl exec -i`` (``--context`` and ``--kubeconfig`` are passed to every kubectl call).

Alongside the probe, ``kubectl get pod -o json`` gives the runtime's view: node, container
id, image, restarts and why the last one ended (``OOMKilled``), resource limits, the
securityContext's capabilities, whether /dev/shm is a memory emptyDir and its sizeLimit, the
GPUs requested. After the window ``kubectl logs`` gives what the server printed.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from hangdoctor.errors import TargetError, UsageError
from hangdoctor.reach.docker import log_from_lines
from hangdoctor.reach.exec_pipe import ExecPipeTarget, run_command

# RFC 1123 label (namespace, container) and subdomain (pod) names.
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
LOG_TAIL_LINES = 400


def kubectl_base(
    kubectl: str = "kubectl", context: Optional[str] = None, kubeconfig: Optional[str] = None
) -> list[str]:
    argv = [kubectl]
    if kubeconfig:
        argv += ["--kubeconfig", kubeconfig]
    if context:
        argv += ["--context", context]
    return argv


def parse_k8s_spec(spec: str) -> tuple[Optional[str], str, Optional[str]]:
    """``k8s:[NAMESPACE/]POD[/CONTAINER]`` -> (namespace or None, pod, container or None)."""
    body = spec.split(":", 1)[1] if spec.startswith("k8s:") else spec
    parts = body.split("/")
    if len(parts) == 1:
        ns, pod, ctr = None, parts[0], None
    elif len(parts) == 2:
        ns, pod, ctr = parts[0], parts[1], None
    elif len(parts) == 3:
        ns, pod, ctr = parts
    else:
        raise UsageError(f"{spec!r}: too many '/'", "write k8s:[NAMESPACE/]POD[/CONTAINER]")
    bad = [
        (what, v)
        for what, v, rx in (
            ("namespace", ns, _LABEL_RE),
            ("pod", pod, _SUBDOMAIN_RE),
            ("container", ctr, _LABEL_RE),
        )
        if v is not None and not rx.match(v)
    ]
    if not pod or bad:
        what, value = bad[0] if bad else ("pod", "")
        raise UsageError(
            f"{spec!r}: {value!r} is not a valid {what} name",
            "write k8s:[NAMESPACE/]POD[/CONTAINER], as `kubectl get pods` shows them",
        )
    return ns, pod, ctr


class K8sTarget(ExecPipeTarget):
    runtime = "kubernetes"

    def __init__(
        self,
        spec: str,
        *,
        kubectl: str = "kubectl",
        context: Optional[str] = None,
        kubeconfig: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        self.namespace, self.pod, self.container = parse_k8s_spec(spec)
        self.kubectl = kubectl
        self.base = kubectl_base(kubectl, context, kubeconfig)
        self.scope = ["-n", self.namespace] if self.namespace else []
        prefix = self.base + ["exec", "-i"] + self.scope + [self.pod]
        if self.container:
            prefix += ["-c", self.container]
        name = spec if spec.startswith("k8s:") else f"k8s:{spec}"
        super().__init__(name, prefix + ["--"], **kwargs)

    def missing_binary(self) -> TargetError:
        return TargetError(
            f"{self.name}: {self.kubectl}: command not found",
            "install kubectl and point --kubeconfig/--context at the cluster, or diagnose "
            "from the node by PID",
        )

    def classify_failure(self, stderr_text: str, returncode: Optional[int]) -> TargetError:
        return kubectl_error(self.name, stderr_text, returncode)

    async def runtime_facts(self) -> Optional[dict[str, Any]]:
        try:
            rc, out, err = await run_command(
                self.base + ["get", "pod"] + self.scope + [self.pod, "-o", "json"], 10.0, self.env
            )
        except FileNotFoundError:
            raise self.missing_binary() from None
        if rc != 0:
            raise kubectl_error(self.name, err.decode("utf-8", "replace"), rc)
        try:
            doc = json.loads(out)
        except ValueError:
            return None
        return pod_facts(doc, self.container) if isinstance(doc, dict) else None

    async def runtime_log(self, since_epoch_s: float) -> Optional[dict[str, Any]]:
        argv = self.base + ["logs", "--timestamps", f"--tail={LOG_TAIL_LINES}"] + self.scope
        argv += [self.pod] + (["-c", self.container] if self.container else [])
        rc, out, _ = await run_command(argv, 5.0, self.env)
        if rc != 0:
            return None
        return log_from_lines(
            out.decode("utf-8", "replace").splitlines(),
            since_epoch_s,
            "kubectl logs " + " ".join(argv[len(self.base) + 3 :]),
        )


# kubectl's client-go log lines (``E1201 09:09:48.049714    4167 memcache.go:265] ...``)
# come before the one line that says what went wrong.
_KLOG_RE = re.compile(r"^[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")


def kubectl_message(text: str) -> str:
    """The line of kubectl's stderr that says what went wrong (its klog noise dropped)."""
    lines = [ln.strip() for ln in re.split(r"\n| \| ", text) if ln.strip()]
    plain = [ln for ln in lines if not _KLOG_RE.match(ln)]
    return (plain or lines or [""])[-1 if plain else 0]


def kubectl_error(name: str, text: str, returncode: Optional[int]) -> TargetError:
    """One line for each way ``kubectl exec``/``get`` fails before our shell runs."""
    text = kubectl_message(text)
    low = text.lower()
    if "notfound" in low or "not found" in low and "pod" in low:
        return TargetError(
            f"{name}: {text}", "see `kubectl get pods -A` for the pod's name and namespace"
        )
    if "container" in low and "not found" in low or "is not valid for pod" in low:
        return TargetError(
            f"{name}: {text}", "name one of the pod's containers: k8s:NS/POD/CONTAINER"
        )
    if "forbidden" in low or "unauthorized" in low:
        return TargetError(
            f"{name}: no permission: {text}",
            "the account needs get on pods and create on pods/exec in the namespace",
        )
    if "connection to the server" in low or "unable to connect" in low or "no configuration" in low:
        return TargetError(
            f"{name}: the cluster is not reachable: {text}",
            "check --kubeconfig / --context (kubectl cluster-info)",
        )
    if "does not have a host assigned" in low or "containercreating" in low or "pending" in low:
        return TargetError(
            f"{name}: the pod is not running: {text}",
            "`kubectl describe pod` says why it is not scheduled or started",
        )
    if "executable file not found" in low or "no such file or directory" in low:
        return TargetError(
            f"{name}: the container has no sh ({text})",
            "kubectl debug -it POD --profile=general --target=CONTAINER, or "
            "diagnose from the node by PID",
        )
    return TargetError(
        f"{name}: kubectl exec failed: {text or f'exit {returncode}'}",
        "run `kubectl exec -i POD -- sh -c true` by hand to see why",
    )


def _quantity_bytes(text: Any) -> Optional[int]:
    """A Kubernetes quantity (``64Mi``, ``1Gi``, ``500M``, ``1e9``) in bytes."""
    if text is None:
        return None
    m = re.match(r"^([0-9.]+(?:e[0-9]+)?)([KMGTPE]i?|k|m)?$", str(text).strip())
    if not m:
        return None
    units = {
        "Ki": 1 << 10,
        "Mi": 1 << 20,
        "Gi": 1 << 30,
        "Ti": 1 << 40,
        "Pi": 1 << 50,
        "Ei": 1 << 60,
        "k": 10**3,
        "K": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "P": 10**15,
        "E": 10**18,
        "m": 0.001,
    }
    return int(float(m.group(1)) * units.get(m.group(2) or "", 1))


def _cpu_cores(text: Any) -> Optional[float]:
    if text is None:
        return None
    s = str(text).strip()
    try:
        return float(s[:-1]) / 1000 if s.endswith("m") else float(s)
    except ValueError:
        return None


def pod_facts(pod: dict[str, Any], container: Optional[str] = None) -> dict[str, Any]:
    """The container facts of one ``kubectl get pod -o json``, for the named container (or
    the first one, which is what ``kubectl exec`` picks without ``-c``)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    specs = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    default = meta.get("annotations", {}).get("kubectl.kubernetes.io/default-container")
    want = container or default or (specs[0].get("name") if specs else None)
    cspec = next((c for c in specs if c.get("name") == want), {})
    cstat = next(
        (
            c
            for c in status.get("containerStatuses") or []
            if isinstance(c, dict) and c.get("name") == want
        ),
        {},
    )
    limits = (cspec.get("resources") or {}).get("limits") or {}
    sec = cspec.get("securityContext") or {}
    caps = (sec.get("capabilities") or {}).get("add") or []
    # /dev/shm: an emptyDir of medium Memory mounted there, else the runtime's 64 MiB default
    shm_volume, shm_limit = None, None
    for mount in cspec.get("volumeMounts") or []:
        if mount.get("mountPath") == "/dev/shm":
            shm_volume = mount.get("name")
    for vol in spec.get("volumes") or []:
        if shm_volume and vol.get("name") == shm_volume:
            empty = vol.get("emptyDir") or {}
            shm_limit = _quantity_bytes(empty.get("sizeLimit"))
    last = (cstat.get("lastState") or {}).get("terminated") or {}
    cid = str(cstat.get("containerID") or "")
    engine, _, bare_id = cid.partition("://")
    gpus = {k: v for k, v in limits.items() if "gpu" in k}
    facts = {
        "runtime": "kubernetes",
        "engine": engine or None,
        "id": bare_id or None,
        "short_id": bare_id[:12] or None,
        "name": want,
        "pod": meta.get("name"),
        "namespace": meta.get("namespace"),
        "node": spec.get("nodeName"),
        "image": cspec.get("image") or cstat.get("image"),
        "restart_count": cstat.get("restartCount"),
        "last_exit_reason": last.get("reason"),
        "last_exit_code": last.get("exitCode"),
        "last_exit_at": last.get("finishedAt"),
        "oom_killed": last.get("reason") == "OOMKilled" or None,
        "memory_limit_bytes": _quantity_bytes(limits.get("memory")),
        "cpu_limit_cores": _cpu_cores(limits.get("cpu")),
        "gpu_limits": gpus or None,
        "cap_add": caps,
        "privileged": bool(sec.get("privileged")),
        "run_as_user": sec.get("runAsUser", (spec.get("securityContext") or {}).get("runAsUser")),
        "host_ipc": bool(spec.get("hostIPC")),
        "ipc_mode": "host" if spec.get("hostIPC") else "pod",
        "shm_volume": shm_volume,
        "shm_size_bytes": shm_limit,
        "qos_class": status.get("qosClass"),
        "phase": status.get("phase"),
        "state_source": "kubectl get pod",
    }
    return {k: v for k, v in facts.items() if v is not None}
