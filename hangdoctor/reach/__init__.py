"""Where the evidence lives: the local host, SSH hosts, containers, pods, exec pipes.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

from typing import Any, Optional

from hangdoctor.reach.base import Target


def parse_target(spec: str, *, kube: Optional[dict[str, Any]] = None, **ssh_kwargs: Any) -> Target:
    """``docker:NAME``, ``k8s:[NS/]POD[/CONTAINER]``, ``via:COMMAND``, else a host
    (``localhost``, ``[user@]host[:port]``, an ssh alias: :func:`multi.parse_host_spec`).

    ``kube``: ``kubectl``, ``context``, ``kubeconfig`` for k8s targets; ``context`` also
    picks the docker context for docker targets.
    """
    kube = kube or {}
    if spec.startswith("docker:"):
        from hangdoctor.reach.docker import DockerTarget

        return DockerTarget(spec, context=kube.get("docker_context"))
    if spec.startswith("k8s:"):
        from hangdoctor.reach.k8s import K8sTarget

        return K8sTarget(
            spec,
            kubectl=kube.get("kubectl") or "kubectl",
            context=kube.get("context"),
            kubeconfig=kube.get("kubeconfig"),
        )
    if spec.startswith("via:"):
        from hangdoctor.reach.via import ViaTarget

        return ViaTarget(spec[len("via:") :], name=spec)
    from hangdoctor.reach.multi import parse_host_spec

    return parse_host_spec(spec, **ssh_kwargs)


def expand_targets(
    hosts: list[str],
    vias: list[str],
    hosts_spec: Optional[str],
    kube: Optional[dict[str, Any]] = None,
    ssh_kwargs: Optional[dict[str, Any]] = None,
) -> tuple[list[Target], bool]:
    """The targets of a diagnose command line: HOST arguments, each ``--via``, and a
    launcher ``--hosts slurm:JOBID`` / ``k8s:SELECTOR``. Returns (targets, whether
    ``hosts_spec`` was a launcher spec and so not a hosts file)."""
    from hangdoctor.reach import launchers

    ssh_kwargs = ssh_kwargs or {}
    targets = [parse_target(h, kube=kube, **ssh_kwargs) for h in hosts]
    targets += [parse_target("via:" + v, kube=kube) for v in vias]
    used = launchers.is_launcher_spec(hosts_spec)
    if used:
        assert hosts_spec is not None
        kube_args = {
            k: v for k, v in (kube or {}).items() if k in ("kubectl", "context", "kubeconfig")
        }
        targets += launchers.expand(hosts_spec, kube=kube_args, ssh_kwargs=ssh_kwargs)
    return targets, used


def collection_warnings(snapshots: list[dict[str, Any]]) -> list[str]:
    """One line per host whose stacks were refused, with why and the runtime's fix: what a
    person must act on before the next run (the report has the rest)."""
    out = []
    for snap in snapshots:
        host = (snap.get("host") or {}).get("name", "?")
        for m in snap.get("manifest") or []:
            if isinstance(m, dict) and m.get("source") == "stacks" and m.get("status") == "denied":
                why = str(m.get("detail") or "").partition("; ")[2] or "ptrace refused"
                out.append(f"hangdoctor: {host}: no Python stacks: {why} (fix: {m.get('remedy')})")
    return out
