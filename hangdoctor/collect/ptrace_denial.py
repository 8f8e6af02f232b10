"""Why ptrace (py-spy's attach) was refused, from the probe's own facts (Yama scope, uid,
CAP_SYS_PTRACE, seccomp), said in one line, with the exact fix for the runtime it runs in
(Docker, Podman, Kubernetes, or none).

Layer: collect; may import: the standard library only (it ships in the probe).
"""

from __future__ import annotations

# Annotations only (PEP 563): typing is not imported at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

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
