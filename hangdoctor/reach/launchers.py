"""Cluster launchers: ``--hosts slurm:JOBID`` and ``--hosts k8s:[NAMESPACE/]SELECTOR``.

The cluster's own tools expand the list and reach each member; hangdoctor schedules nothing:

- ``slurm:JOBID``: ``scontrol show job -o JOBID`` gives the node list, ``scontrol show
  hostnames LIST`` expands it, and each node is reached with ``srun --overlap --jobid JOBID
  -w NODE -N1 -n1`` (a step inside the job's own allocation: its cgroup, its GPUs).
  ``slurm+ssh:JOBID`` reaches the same nodes over SSH instead.
- ``k8s:SELECTOR``: ``kubectl get pods -l SELECTOR -o json`` lists the pods; each running
  one is a ``k8s:NS/POD`` target. A leading ``NAMESPACE/`` (a DNS label followed by ``/``)
  limits it to one namespace; without it, kubectl's current namespace.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Optional

from hangdoctor.errors import TargetError, UsageError
from hangdoctor.reach.base import Target
from hangdoctor.reach.exec_pipe import first_line, run_command
from hangdoctor.reach.k8s import K8sTarget, kubectl_base, kubectl_error
from hangdoctor.reach.via import ViaTarget

PREFIXES = ("slurm:", "slurm+ssh:", "k8s:")
_JOBID_RE = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?$")
_NS_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
EXPAND_TIMEOUT_S = 15.0


def is_launcher_spec(value: Optional[str]) -> bool:
    return bool(value) and str(value).startswith(PREFIXES)


def expand(
    spec: str, *, kube: Optional[dict[str, Any]] = None, ssh_kwargs: Optional[dict[str, Any]] = None
) -> list[Target]:
    """The targets a launcher spec stands for (runs scontrol / kubectl once or twice)."""
    return asyncio.run(expand_async(spec, kube=kube, ssh_kwargs=ssh_kwargs))


async def expand_async(
    spec: str, *, kube: Optional[dict[str, Any]] = None, ssh_kwargs: Optional[dict[str, Any]] = None
) -> list[Target]:
    kind, _, rest = spec.partition(":")
    if kind in ("slurm", "slurm+ssh"):
        nodes = await slurm_nodes(rest)
        if kind == "slurm+ssh":
            from hangdoctor.reach.ssh import SshTarget

            return [SshTarget(node, **(ssh_kwargs or {})) for node in nodes]
        return [slurm_target(rest, node) for node in nodes]
    return await k8s_targets(rest, **(kube or {}))


def slurm_target(jobid: str, node: str) -> ViaTarget:
    """One node of a job, reached by a job step that overlaps the running ones."""
    command = f"srun --overlap --jobid {jobid} -w {node} -N1 -n1 --quiet"
    return ViaTarget(command, name=node)


async def _run(argv: list[str], what: str) -> bytes:
    try:
        rc, out, err = await run_command(argv, EXPAND_TIMEOUT_S)
    except FileNotFoundError:
        raise TargetError(
            f"{what}: {argv[0]}: command not found",
            f"run hangdoctor where {argv[0]} works (a login node), or list the "
            "hosts in a file for --hosts",
        ) from None
    except (asyncio.TimeoutError, TimeoutError):
        raise TargetError(
            f"{what}: `{' '.join(argv)}` did not answer in {EXPAND_TIMEOUT_S:.0f} s",
            "the controller may be down: try it by hand",
        ) from None
    if rc != 0:
        text = err.decode("utf-8", "replace") if argv[0].endswith("kubectl") else first_line(err)
        raise _launcher_error(argv, what, text or f"exit {rc}")
    return out


def _launcher_error(argv: list[str], what: str, text: str) -> TargetError:
    if argv[0].endswith("kubectl"):
        return kubectl_error(what, text, None)
    if "invalid job id" in text.lower():
        return TargetError(f"{what}: no such job ({text})", "see `squeue -u $USER` for job ids")
    return TargetError(f"{what}: `{' '.join(argv)}` failed: {text}", "try the command by hand")


async def slurm_nodes(jobid: str) -> list[str]:
    """The nodes of a running job, in order."""
    what = f"slurm:{jobid}"
    if not _JOBID_RE.match(jobid):
        raise UsageError(
            f"--hosts {what}: {jobid!r} is not a Slurm job id",
            "write --hosts slurm:JOBID (squeue shows it)",
        )
    out = await _run(["scontrol", "show", "job", "-o", jobid], what)
    text = out.decode("utf-8", "replace")
    state = re.search(r"\bJobState=(\S+)", text)
    nodelist = re.search(r"\bNodeList=(\S+)", text)
    if state and state.group(1) != "RUNNING":
        raise TargetError(
            f"{what}: the job is {state.group(1)}, not running",
            "only a running job's nodes can be diagnosed",
        )
    if not nodelist or nodelist.group(1) in ("(null)", ""):
        raise TargetError(f"{what}: scontrol names no nodes for the job", "is it running?")
    out = await _run(["scontrol", "show", "hostnames", nodelist.group(1)], what)
    nodes = [ln.strip() for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not nodes:
        raise TargetError(f"{what}: scontrol expanded {nodelist.group(1)} to no hosts")
    return nodes


def split_selector(text: str) -> tuple[Optional[str], str]:
    """``[NAMESPACE/]SELECTOR`` -> (namespace or None, selector)."""
    head, sep, tail = text.partition("/")
    if (
        sep
        and _NS_RE.match(head)
        and tail
        and ("=" in tail or "!" in tail or " in " in tail or "," in tail or tail.isidentifier())
    ):
        return head, tail
    return None, text


async def k8s_targets(
    text: str,
    kubectl: str = "kubectl",
    context: Optional[str] = None,
    kubeconfig: Optional[str] = None,
) -> list[Target]:
    """One ``k8s:NS/POD`` target for each running pod the selector matches."""
    namespace, selector = split_selector(text)
    what = f"k8s:{text}"
    if not selector:
        raise UsageError(f"--hosts {what}: no label selector", "e.g. --hosts k8s:app=vllm")
    scope = ["-n", namespace] if namespace else []
    argv = kubectl_base(kubectl, context, kubeconfig) + ["get", "pods"] + scope
    argv += ["-l", selector, "-o", "json"]
    out = await _run(argv, what)
    try:
        doc = json.loads(out)
    except ValueError:
        raise TargetError(f"{what}: kubectl printed no JSON") from None
    targets: list[Target] = []
    skipped = []
    for item in doc.get("items") or []:
        meta = item.get("metadata") or {}
        phase = (item.get("status") or {}).get("phase")
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        if phase != "Running":
            skipped.append(f"{name} ({phase})")
            continue
        targets.append(
            K8sTarget(f"k8s:{name}", kubectl=kubectl, context=context, kubeconfig=kubeconfig)
        )
    if not targets:
        raise TargetError(
            f"{what}: no running pod matches"
            + (f" (not running: {', '.join(skipped)})" if skipped else ""),
            "check the selector with kubectl get pods -l SELECTOR",
        )
    return targets
