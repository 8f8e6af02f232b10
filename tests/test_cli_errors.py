"""Errors of one line: a target that cannot be reached or refuses us (SSH refused, an unknown
host key, a key the server does not accept, no Docker daemon, a cluster that does not answer),
and arguments that are wrong (-o a folder, --log a folder), each against the real thing: a
closed port, a real sshd on loopback, the real docker and kubectl clients.

Each gives one line on stderr, nothing on stdout (with --json: the JSON and nothing else), the
exit code the README documents (4: a target could not be collected; 2: bad usage), and no file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_hangdoctor

from tests import sshd_fixture
from tests.sshd_tools import free_port, keygen

sshd = sshd_fixture.sshd


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, *phrases: str) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("hangdoctor: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def nothing_written(proc: subprocess.CompletedProcess[str], folder: Path) -> None:
    assert proc.stdout == "", proc.stdout
    assert list(folder.iterdir()) == [], list(folder.iterdir())


# ------------------------------------------------------------------ targets that fail: exit 4


def test_ssh_connection_refused(tmp_path: Path) -> None:
    port = free_port()
    proc = run_hangdoctor("diagnose", f"root@127.0.0.1:{port}", "--pid", "1", "--window", "0.2",
                          "-o", str(tmp_path / "r.html"), cwd=tmp_path)  # fmt: skip
    one_line_error(proc, 4, f"connection refused by 127.0.0.1:{port}")
    nothing_written(proc, tmp_path)


def test_ssh_connection_refused_with_json_prints_only_json(tmp_path: Path) -> None:
    port = free_port()
    proc = run_hangdoctor(
        "diagnose", f"root@127.0.0.1:{port}", "--pid", "1", "--json", cwd=tmp_path
    )
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 4 and len(lines) == 1, proc.stderr
    doc = json.loads(proc.stdout)  # pure JSON: the whole of stdout parses
    assert "connection refused" in json.dumps(doc["hosts"])


@pytest.mark.ssh
def test_ssh_unknown_host_key(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_hangdoctor("diagnose", sshd.spec, "--pid", "1", "-i", sshd.key_path,
                          "--known-hosts", str(known), "--ssh-config", "/dev/null", cwd=out)  # fmt: skip
    one_line_error(proc, 4, f"host key of [127.0.0.1]:{sshd.port} is not in", "ssh-keyscan")
    nothing_written(proc, out)


@pytest.mark.ssh
def test_ssh_key_not_accepted(sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "id_stranger"
    keygen(stranger, "not-authorized")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_hangdoctor("diagnose", sshd.spec, "--pid", "1", "-i", str(stranger),
                          "--known-hosts", sshd.known_hosts, "--ssh-config", "/dev/null", cwd=out)  # fmt: skip
    one_line_error(proc, 4, "authentication failed", str(stranger))
    nothing_written(proc, out)


def test_no_docker_daemon(tmp_path: Path) -> None:
    if not shutil.which("docker"):
        pytest.skip("no docker client on PATH")  # the missing binary has its own test elsewhere
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-daemon.sock")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_hangdoctor("diagnose", "docker:vllm", "--window", "0.2", env=env, cwd=out)
    one_line_error(proc, 4, "docker:vllm: the Docker daemon is not reachable")
    nothing_written(proc, out)


@pytest.mark.parametrize("how", [["k8s:llm/vllm-0"], ["--hosts", "k8s:llm/app=vllm"]])
def test_cluster_unreachable(tmp_path: Path, how: list[str]) -> None:
    if not shutil.which("kubectl"):
        pytest.skip("no kubectl on PATH")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{free_port()}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    proc = run_hangdoctor(
        "diagnose", *how, "--kubeconfig", str(kubeconfig), "--window", "0.2", cwd=out
    )
    one_line_error(proc, 4, "the cluster is not reachable")
    nothing_written(proc, out)


# ------------------------------------------------------------------ bad arguments: exit 2


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("command", ["diagnose", "analyze", "report", "demo"])
def test_output_a_folder_is_one_line(tmp_path: Path, sleeper, command: str) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    args = {"diagnose": ["localhost", "--pid", str(sleeper.pid), "--window", "600"],
            "analyze": ["-"], "report": ["x.json"], "demo": []}[command]  # fmt: skip
    proc = run_hangdoctor(command, *args, "-o", f"{folder}/", cwd=folder)
    one_line_error(proc, 2, f"-o {folder}/ is a folder", "give a file name")
    nothing_written(proc, folder)


def test_save_snapshot_a_folder_is_one_line(tmp_path: Path, sleeper) -> None:
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(sleeper.pid), "--window", "600",
                          "--save-snapshot", f"{tmp_path}/", cwd=tmp_path)  # fmt: skip
    one_line_error(proc, 2, "--save-snapshot", "is a folder", "snapshot.json")
    nothing_written(proc, tmp_path)


def test_log_a_folder_is_refused_before_the_window(tmp_path: Path, sleeper) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(sleeper.pid), "--window", "600",
                          "--log", str(tmp_path), cwd=out)  # fmt: skip
    one_line_error(proc, 2, f"--log {tmp_path} is a folder on localhost")
    nothing_written(proc, out)


def test_click_usage_errors_are_one_line(tmp_path: Path) -> None:
    for args, phrase in [
        (["diagnose", "localhost", "--bogus"], "No such option '--bogus'"),
        (["diagnose", "localhost", "--window", "0.1"], "--window"),
        (["nosuchcommand"], "No such command"),
    ]:
        proc = run_hangdoctor(*args, cwd=tmp_path)
        line = one_line_error(proc, 2, phrase)
        assert "--help" in line
        assert proc.stdout == ""


# ------------------------------------------------------------------ --port with nothing on it


DECOY = "import time; print('ready', flush=True); time.sleep(120)"


@pytest.fixture
def decoy(tmp_path: Path):
    """A Python script whose command line says vllm: discovery takes it for a server."""
    script = tmp_path / "vllm_decoy.py"
    script.write_text(DECOY)
    proc = subprocess.Popen([sys.executable, str(script), "--model", "vllm"], text=True,
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def test_port_nobody_listens_on_is_exit_2_before_the_window(tmp_path: Path, decoy) -> None:
    port = free_port()
    proc = run_hangdoctor("diagnose", "localhost", "--port", str(port), "--window", "600",
                          "-o", str(tmp_path / "r.html"), cwd=tmp_path)  # fmt: skip
    one_line_error(proc, 2, f"nothing listens on port {port} on localhost")
    assert not (tmp_path / "r.html").exists()


def test_the_probe_diagnoses_no_other_server_for_a_port_nobody_listens_on(decoy) -> None:
    from hangdoctor.collect.config import ProbeConfig
    from hangdoctor.collect.probe import collect

    port = free_port()
    snap = collect(ProbeConfig(ports=[port], window_s=0.2, deadline_s=10))
    assert snap["targets"]["root_pids"] == [] and snap["targets"]["discovery"] == []
    assert decoy.pid not in [p.get("pid") for p in snap.get("processes") or []]
    assert snap["targets"]["ports_unmatched"]["not_listening"] == [port]
    # the control: without --port the decoy is what discovery finds
    found = collect(ProbeConfig(window_s=0.2, deadline_s=10))["targets"]["root_pids"]
    assert decoy.pid in found


@pytest.mark.ssh
def test_port_nobody_listens_on_over_ssh_is_exit_2(sshd, tmp_path: Path, decoy) -> None:
    port = free_port()
    proc = run_hangdoctor("diagnose", sshd.alias, "--port", str(port), "--window", "0.2",
                          "--ssh-config", sshd.ssh_config, "-o", str(tmp_path / "r.html"))  # fmt: skip
    one_line_error(proc, 2, f"nothing listens on port {port} on {sshd.alias}")
    assert not (tmp_path / "r.html").exists()
