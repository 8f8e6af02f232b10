"""Every command hangdoctor prints to run next runs as printed.

Real runs (a hung Python process here; the same over a real sshd with -i and --known-hosts;
through --via 'nsenter -t PID -a'; in a Docker container; a healthy server; analyze of a
paste; the demo) print a ``next:`` line. Each is executed by bash exactly as printed, in a
fresh folder: it must not fail on its arguments (click's usage errors and every other exit 2,
a shell that cannot run it: 126/127) nor on reaching the target (exit 4: the host key, the
key, the container). A command still running after its parse and preflight is past them;
it is then stopped (its process group, started here). Where a paste or the stopped demo
cannot know a value, the printed placeholder (HOST, PID) is the one thing replaced.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, run_hangdoctor
from docker_tools import docker_engine_fixture, in_container_fixture  # noqa: F401

from tests import sshd_fixture

sshd = sshd_fixture.sshd
PAST_PARSING_S = 12.0  # a run still going after this has parsed its arguments and passed preflight
REFUSED = {2: "usage", 4: "could not reach the target", 126: "not executable", 127: "not found"}


def printed_next(stdout: str) -> str:
    """The command of the summary's ``next:`` line (piped: one line, nothing cut)."""
    lines = stdout.splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith("  next: "))
    body = lines[i][len("  next: ") :]
    if body.startswith("#"):  # a comment on its own line: the command follows
        body = lines[i + 1].strip()
    return body


def run_as_printed(
    command: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """Run ``command`` with bash; (exit code or None while still running, its stderr)."""
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=PAST_PARSING_S)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this test started
        _, err = proc.communicate(timeout=30)
        return None, err


def check_runs(command: str, tmp_path: Path, env: dict[str, str] | None = None) -> None:
    assert "hangdoctor diagnose " in command, command
    assert "…" not in command and "/path/to/" not in command, command
    cwd = tmp_path / "next"
    cwd.mkdir(exist_ok=True)
    code, err = run_as_printed(command, cwd, env)
    assert code not in REFUSED, f"{command!r}: exit {code} ({REFUSED.get(code)}): {err[-1500:]}"
    assert "Usage:" not in err and "No such option" not in err, (command, err)


def diagnose(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    return run_hangdoctor("diagnose", *args, env=env, cwd=cwd)


@pytest.fixture
def hung():
    h = sshd_fixture.start_hung_process(lifetime_s=120)
    yield h
    sshd_fixture.stop_process(h)


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "120"])
    yield p
    p.kill()
    p.wait()


def test_local(hung, tmp_path: Path) -> None:
    proc = diagnose("localhost", "--pid", str(hung.pid), "--window", "0.3", cwd=tmp_path)
    command = printed_next(proc.stdout)
    assert f"--pid {hung.pid}" in command
    check_runs(command, tmp_path)


def test_local_with_a_log_found_empty_asks_for_no_placeholder(sleeper, tmp_path: Path) -> None:
    """A process whose stdout is a file: the log is found (empty); the next command does not
    ask for /path/to/server.log."""
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdout=out)
    try:
        proc = diagnose("localhost", "--pid", str(p.pid), "--window", "0.3", cwd=tmp_path)
        check_runs(printed_next(proc.stdout), tmp_path)
    finally:
        p.kill()
        p.wait()


@pytest.mark.ssh
def test_ssh_with_identity_and_known_hosts(sshd, hung, tmp_path: Path) -> None:
    proc = diagnose(sshd.spec, "--pid", str(hung.pid), "--window", "0.3", "-i", sshd.key_path,
                    "--known-hosts", sshd.known_hosts, "--ssh-config", "/dev/null", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    command = printed_next(proc.stdout)
    for part in (
        f"-i {sshd.key_path}",
        f"--known-hosts {sshd.known_hosts}",
        "--ssh-config /dev/null",
    ):
        assert part in command, (part, command)
    check_runs(command, tmp_path)


@pytest.mark.ssh
def test_ssh_failure_next_names_the_host_and_pid_given(tmp_path: Path) -> None:
    """Nothing collected: --json still carries the next command, with the values given."""
    import json

    from tests.sshd_tools import free_port

    spec = f"root@127.0.0.1:{free_port()}"
    proc = diagnose(spec, "--pid", "4242", "--json", "-i", "/nonexistent-key", cwd=tmp_path)
    nxt = json.loads(proc.stdout)["next_command"]
    assert f"diagnose {spec} --pid 4242" in nxt and "-i /nonexistent-key" in nxt
    assert "HOST" not in nxt.split("#")[0] and "PID" not in nxt.split("#")[0]


def test_via_nsenter(hung, tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("nsenter"):
        pytest.skip("nsenter needs root here")
    via = f"nsenter -t {hung.pid} -a"
    proc = diagnose("--via", via, "--pid", str(hung.pid), "--window", "0.3", cwd=tmp_path)
    command = printed_next(proc.stdout)
    assert f"--via '{via}'" in command, command
    check_runs(command, tmp_path)


def test_healthy(run_scenario, tmp_path: Path) -> None:
    info = run_scenario("healthy", workers=2)
    proc = diagnose("localhost", "--pid", str(info.launcher_pid), "--window", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    command = printed_next(proc.stdout)
    assert not command.startswith("nothing"), command  # a command first, the advice in its comment
    check_runs(command, tmp_path)


def test_analyze_of_a_paste(sleeper, tmp_path: Path) -> None:
    """A paste cannot know the host; the pid it names is the server's, not a helper's."""
    paste = tmp_path / "ps.txt"
    paste.write_text(
        "UID PID PPID C STIME TTY TIME CMD\n"
        "root 100 1 0 10:00 ? 00:00:00 /usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(5)\n"
        "root 200 1 0 10:00 ? 00:10:00 python3 -m vllm.entrypoints.openai.api_server --model m\n"
        "root 201 200 0 10:00 ? 00:10:00 python3 -c from multiprocessing.spawn import spawn_main\n"
    )
    proc = run_hangdoctor("analyze", str(paste), cwd=tmp_path)
    command = printed_next(proc.stdout)
    assert "--pid 200 " in command, command
    check_runs(
        command.replace("HOST", "localhost").replace("--pid 200", f"--pid {sleeper.pid}"), tmp_path
    )


def test_demo(sleeper, tmp_path: Path) -> None:
    """The demo stops its server: its next command is for the user's own one (PID)."""
    proc = run_hangdoctor("demo", "--window", "0.5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    command = printed_next(proc.stdout)
    assert "--pid PID" in command, command
    check_runs(command.replace("--pid PID", f"--pid {sleeper.pid}"), tmp_path)


def test_venv_path_is_kept(hung, tmp_path: Path) -> None:
    """Run as .venv/bin/hangdoctor (no activated venv), every command says that, healthy too."""
    exe = Path(sys.executable).parent / "hangdoctor"
    if not exe.exists():
        pytest.skip("no console script beside this interpreter")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not Path(p, "hangdoctor").exists())  # fmt: skip
    proc = subprocess.run([str(exe), "diagnose", "localhost", "--pid", str(hung.pid), "--window", "0.3"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)  # fmt: skip
    command = printed_next(proc.stdout)
    assert command.split()[0] in (str(exe), os.path.relpath(exe, tmp_path)), command
    check_runs(command, tmp_path, env)


def test_docker(in_container, docker_engine, tmp_path: Path) -> None:
    ctr = in_container("postload", workers=1)
    proc = diagnose(f"docker:{ctr.name}", "--window", "0.5", env=docker_engine.env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    command = printed_next(proc.stdout)
    assert f"diagnose docker:{ctr.name} " in command, command
    check_runs(command, tmp_path, docker_engine.env)


def test_the_readme_examples_parse(tmp_path: Path) -> None:
    """The README's command examples are spelled as the command line takes them."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for line in re.findall(r"^(hangdoctor (?:diagnose|analyze|report) [^\n#]*)", text, re.M):
        argv = line.split()[1:]
        proc = run_hangdoctor(*argv, "--help", cwd=tmp_path)
        assert proc.returncode == 0, (line, proc.stderr)
