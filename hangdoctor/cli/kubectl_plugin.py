"""``kubectl hangdoctor POD``: the krew plugin convention (an executable ``kubectl-hangdoctor`` on
PATH) mapped onto ``hangdoctor diagnose k8s:[NAMESPACE/]POD[/CONTAINER]``.

kubectl's own way of naming a pod is kept: ``-n/--namespace`` and ``-c/--container``; every
other argument goes to ``diagnose`` as typed (``--json``, ``-o report.html``, ``--context``,
``--kubeconfig``, ``--window`` ...).

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's modules.
"""

from __future__ import annotations

import sys

USAGE = """usage: kubectl hangdoctor POD [-n NAMESPACE] [-c CONTAINER] [diagnose options]

Diagnoses the inference server in a pod: hangdoctor diagnose k8s:[NAMESPACE/]POD[/CONTAINER].
  kubectl hangdoctor vllm-0 -n serving -o report.html
  kubectl hangdoctor vllm-0 -n serving -c server --json
Options after the pod are diagnose's (hangdoctor diagnose --help)."""

_VALUE_FLAGS = {"-n": "namespace", "--namespace": "namespace", "-c": "container", "--container": "container"}


class PluginUsage(Exception):
    """Arguments the plugin cannot map (one line for stderr)."""


def translate(argv: list[str]) -> list[str]:
    """``kubectl hangdoctor`` arguments -> ``hangdoctor`` arguments."""
    found: dict[str, str] = {}
    rest: list[str] = []
    pod: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in _VALUE_FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    raise PluginUsage(f"{arg} needs a value")
                value, i = argv[i + 1], i + 1
            if _VALUE_FLAGS[name] in found:
                raise PluginUsage(f"{name} given twice")
            found[_VALUE_FLAGS[name]] = value
        elif pod is None and not arg.startswith("-"):
            pod = arg
        else:
            rest.append(arg)
        i += 1
    if pod is None:
        raise PluginUsage("no pod given")
    if pod.startswith("k8s:"):
        if found:
            raise PluginUsage("give -n/-c or a k8s: target, not both")
        return ["diagnose", pod, *rest]
    if "/" in pod:
        raise PluginUsage(f"{pod!r}: name the pod alone and its namespace with -n")
    spec = "k8s:" + (f"{found['namespace']}/" if "namespace" in found else "") + pod
    if "container" in found:
        spec += f"/{found['container']}"
    return ["diagnose", spec, *rest]


def run() -> None:
    """The ``kubectl-hangdoctor`` console entry."""
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help", "help"):
        try:
            (sys.stdout if argv else sys.stderr).write(USAGE + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `kubectl hangdoctor --help | head`
            pass
        sys.exit(0 if argv else 2)
    try:
        args = translate(argv)
    except PluginUsage as exc:
        sys.stderr.write(f"kubectl hangdoctor: {exc} (kubectl hangdoctor --help)\n")
        sys.exit(2)
    from hangdoctor import cli

    sys.argv = ["hangdoctor", *args]
    cli.run()
