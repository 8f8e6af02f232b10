"""Start a scenario as a subprocess, wait for its ready file, stop it (used by tests and demo).

Stdlib only. A scenario runs in its own session / process group, so ``stop()`` ends every
process of it with one ``killpg``.

Layer: scenarios; may import: the standard library, torch and hangdoctor.scenarios (each runs as
its own program).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

# name -> one line about it; every name is a module hangdoctor.scenarios.<name>.
SCENARIOS: dict[str, str] = {
    "postload": "workers loaded their weights, then all wait on a pipe (post-load deadlock)",
    "healthy": "an HTTP server answers /health while idle workers wait for requests",
    "compile": "compile workers burn CPU and log progress (not a hang)",
    "gloo_desync": "two torch.distributed gloo ranks: all_reduce vs barrier (needs torch)",
}

# Options whose flag differs from --<name-with-dashes>: the launcher's command line should look
# like an inference server's.
_FLAG_ALIASES: dict[str, dict[str, str]] = {"postload": {"workers": "--tensor-parallel-size"}}


class ScenarioError(RuntimeError):
    """The scenario exited or never reached its state; the message carries its stderr."""


@dataclass
class ScenarioInfo:
    """What the ready file says about a running scenario."""

    name: str
    launcher_pid: int
    worker_pids: list[int]
    log: str | None
    port: int | None
    raw: dict[str, Any] = field(default_factory=dict)


def scenario_argv(
    name: str,
    ready_file: str,
    *,
    log: str | None = None,
    max_lifetime_s: float = 900.0,
    python: str | None = None,
    **options: Any,
) -> list[str]:
    """Command line that starts scenario ``name``; ``options`` become ``--key value`` flags.

    ``True`` becomes a bare flag, ``None`` and ``False`` are left out.
    """
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    argv = [python or sys.executable, "-m", f"hangdoctor.scenarios.{name}"]
    aliases = _FLAG_ALIASES.get(name, {})
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = aliases.get(key, "--" + key.replace("_", "-"))
        argv += [flag] if value is True else [flag, str(value)]
    if log:
        argv += ["--log", log]
    argv += ["--ready-file", ready_file, "--max-lifetime", str(max_lifetime_s)]
    return argv


class RunningScenario:
    """A started scenario: its launcher ``proc`` and, once ready, its ``info``."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], ready_file: str, stderr_path: str):
        self.name = name
        self.proc = proc
        self.ready_file = ready_file
        self.stderr_path = stderr_path
        self.info: ScenarioInfo | None = None

    def stderr_tail(self, max_bytes: int = 4000) -> str:
        """Last ``max_bytes`` of the launcher's (and its workers') stderr."""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float = 60.0) -> ScenarioInfo:
        """Wait for the ready file; raise ScenarioError if the launcher exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.path.exists(self.ready_file):
                with open(self.ready_file, encoding="utf-8") as f:
                    raw = json.load(f)
                self.info = ScenarioInfo(
                    name=self.name,
                    launcher_pid=int(raw["launcher_pid"]),
                    worker_pids=[int(p) for p in raw["worker_pids"]],
                    log=raw.get("log"),
                    port=raw.get("port"),
                    raw=raw,
                )
                return self.info
            if self.proc.poll() is not None:
                raise ScenarioError(
                    f"scenario {self.name} exited with {self.proc.returncode} before it was "
                    f"ready; stderr:\n{self.stderr_tail()}"
                )
            time.sleep(0.05)
        raise ScenarioError(
            f"scenario {self.name} not ready after {timeout_s:.0f} s; stderr:\n{self.stderr_tail()}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGKILL the whole process group, reap the launcher, wait until the workers are gone."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout_s)
        pids = self.info.worker_pids if self.info else []
        deadline = time.monotonic() + timeout_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if pids:
                time.sleep(0.05)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def start_scenario(
    name: str,
    workdir: str,
    *,
    log: bool = True,
    max_lifetime_s: float = 900.0,
    env: dict[str, str] | None = None,
    **options: Any,
) -> RunningScenario:
    """Start scenario ``name`` with its ready file, log and stderr under ``workdir``.

    Call ``wait_ready()`` on the result, and ``stop()`` when done.
    """
    os.makedirs(workdir, exist_ok=True)
    ready_file = os.path.join(workdir, f"{name}.ready.json")
    log_path = os.path.join(workdir, f"{name}.log") if log else None
    stderr_path = os.path.join(workdir, f"{name}.stderr")
    argv = scenario_argv(name, ready_file, log=log_path, max_lifetime_s=max_lifetime_s, **options)
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            env=env,
            start_new_session=True,
        )
    return RunningScenario(name, proc, ready_file, stderr_path)
