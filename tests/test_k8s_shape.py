"""The Kubernetes shape: the example manifests (docs/k8s/) parsed, and the commands they name
run as written (only the port, the state file and the bundle folder pointed at this test's
real server and temporary folder); and ``kubectl-hangdoctor``, the krew-convention plugin,
mapped onto ``diagnose k8s:…`` and dispatched by the real kubectl where it is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import schema_check
from test_alert_rules import load_yaml
from test_probe import Plain, wait_for_log

from hangdoctor.cli.kubectl_plugin import PluginUsage, translate

pytestmark = pytest.mark.slow

K8S = Path(__file__).resolve().parent.parent / "docs" / "k8s"


def manifests() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        (doc,) = load_yaml(path.read_text())
        out[path.name] = doc
    return out


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
    return spec["containers"]


def pointed(argv: list[str], port: int, tmp: Path) -> list[str]:
    """The manifest's command, run by this interpreter, on this test's server and folders."""
    assert argv[0] == "hangdoctor", argv
    out = [sys.executable, "-m", "hangdoctor"]
    for i, arg in enumerate(argv[1:], 1):
        prev = argv[i - 1]
        if arg == "8000":
            arg = str(port)
        elif arg == "http://127.0.0.1:8000/health":
            arg = f"http://127.0.0.1:{port}/health"
        elif prev == "--state":
            arg = str(tmp / "probe-state.json")
        elif prev == "--out-dir":
            arg = str(tmp / "bundles")
        elif prev == "--metrics-listen":
            arg = "127.0.0.1:0"  # the manifest's 0.0.0.0:9464, on a free loopback port here
        out.append(arg)
    return out


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Plain]:
    server = Plain(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_manifests_parse_and_have_the_shape_they_promise() -> None:
    docs = manifests()
    assert set(docs) == {"vllm-liveness-probe.yaml", "vllm-watch-sidecar.yaml"}
    live = {c["name"]: c for c in containers(docs["vllm-liveness-probe.yaml"])}["server"]
    cmd = live["livenessProbe"]["exec"]["command"]
    assert cmd[:3] == ["hangdoctor", "probe", "8000"] and "--critical-only" in cmd
    assert "startupProbe" in live  # loading is never judged by the liveness probe
    assert live["livenessProbe"]["timeoutSeconds"] >= 2
    pod = docs["vllm-watch-sidecar.yaml"]
    assert pod["spec"]["shareProcessNamespace"] is True
    side = {c["name"]: c for c in containers(pod)}["hangdoctor"]
    assert side["command"][:3] == ["hangdoctor", "watch", "localhost"] and "--progress" in side["command"]
    assert "SYS_PTRACE" in side["securityContext"]["capabilities"]["add"]
    listen = side["command"][side["command"].index("--metrics-listen") + 1]
    assert listen.endswith(":" + pod["metadata"]["annotations"]["prometheus.io/port"])


def test_liveness_command_runs_as_written_on_a_real_server(plain: Plain, tmp_path: Path) -> None:
    docs = manifests()
    live = {c["name"]: c for c in containers(docs["vllm-liveness-probe.yaml"])}["server"]
    argv = pointed(live["livenessProbe"]["exec"]["command"], plain.port, tmp_path)
    for _ in range(2):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0 and proc.stdout.startswith("OK idle"), (proc.stdout, proc.stderr)
    plain.stop()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout.startswith("CRITICAL dead"), proc.stdout


def test_sidecar_command_runs_as_written_on_a_real_server(plain: Plain, tmp_path: Path) -> None:
    side = {c["name"]: c for c in containers(manifests()["vllm-watch-sidecar.yaml"])}["hangdoctor"]
    err_path = tmp_path / "watch.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(pointed(side["command"], plain.port, tmp_path), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_log(err_path, "healthy (idle", timeout_s=60)
        line = next(x for x in err_path.read_text().splitlines() if "serving /metrics on" in x)
        text = urllib.request.urlopen(f"http://127.0.0.1:{line.rsplit(':', 1)[1]}/metrics", timeout=10).read().decode()
        assert 'hangdoctor_state{target="127.0.0.1:%d",state="idle"} 1' % plain.port in text, text
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    assert rc == 0, err_path.read_text()


@pytest.mark.parametrize(("argv", "expected"), [
    (["vllm-0"], ["diagnose", "k8s:vllm-0"]),
    (["vllm-0", "-n", "serving"], ["diagnose", "k8s:serving/vllm-0"]),
    (["-n", "serving", "vllm-0", "-c", "server", "--json"], ["diagnose", "k8s:serving/vllm-0/server", "--json"]),
    (["vllm-0", "--namespace=serving", "-o", "r.html", "--context", "prod"],
     ["diagnose", "k8s:serving/vllm-0", "-o", "r.html", "--context", "prod"]),
    (["k8s:serving/vllm-0", "--window", "5"], ["diagnose", "k8s:serving/vllm-0", "--window", "5"]),
])
def test_plugin_maps_kubectl_words_onto_diagnose(argv: list[str], expected: list[str]) -> None:
    assert translate(argv) == expected


@pytest.mark.parametrize("argv", [[], ["-n"], ["-n", "a", "-n", "b", "pod"], ["ns/pod"], ["k8s:x", "-n", "y"]])
def test_plugin_refuses_what_it_cannot_map(argv: list[str]) -> None:
    with pytest.raises(PluginUsage):
        translate(argv)


def test_real_kubectl_dispatches_to_the_plugin() -> None:
    kubectl = shutil.which("kubectl")
    script = Path(sys.executable).with_name("kubectl-hangdoctor")
    if kubectl is None or not script.exists():
        pytest.skip("needs kubectl and the installed kubectl-hangdoctor entry point (pip install -e .)")
    env = dict(os.environ, PATH=f"{script.parent}:{os.environ.get('PATH', '')}",
               KUBECONFIG=str(Path("/nonexistent/kubeconfig")))
    listed = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, timeout=60, env=env)
    assert str(script) in listed.stdout, listed.stdout + listed.stderr
    t0 = time.monotonic()
    proc = subprocess.run([kubectl, "hangdoctor", "no-such-pod", "-n", "serving", "--json", "-q"],
                          capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    doc = json.loads(proc.stdout)
    schema_check.record("diagnose", doc)
    assert doc["hosts"][0]["name"] == "k8s:serving/no-such-pod"
    assert proc.returncode == 4 and doc["exit_code"] == 4, proc.stderr  # could not collect: no cluster
    assert time.monotonic() - t0 < 120
    bad = subprocess.run([str(script), "-n"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
