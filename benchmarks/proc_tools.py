"""Processes for the benchmark: timed subprocess runs and hung scenario servers.

Everything started here is ours, is stopped by its own pid / process group, and ends on its
own anyway (the scenarios' ``--max-lifetime``, a timer on every measured command).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TIME = "/usr/bin/time"  # GNU time: the peak RSS of the command alone (run_measured)

REPO = Path(__file__).resolve().parent.parent
# What the product needs at run time, copied once per benchmark (see snapshot_source).
SOURCE_DIRS = ("hangdoctor", "checks", "templates")
# Where hung scenarios and hangdoctor import the package from; set by snapshot_source.
SOURCE = REPO


def snapshot_source(dst: Path) -> Path:
    """Copy the package, checks and templates to ``dst`` and run everything from there.

    The repository is edited while the benchmark runs; a copy keeps every run measuring the
    same code (and a half-saved file from breaking a run).
    """
    global SOURCE
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCE_DIRS:
        shutil.copytree(REPO / name, dst / name, ignore=skip)
    # Also as hangdoctor.checks / hangdoctor.templates (their names in the wheel): an
    # editable install's import hook would otherwise serve those from the live repository.
    for name in ("checks", "templates"):
        if not (dst / "hangdoctor" / name).exists():
            shutil.copytree(REPO / name, dst / "hangdoctor" / name, ignore=skip)
    SOURCE = dst
    return dst


@dataclass
class Measured:
    """One finished command: wall time and the kernel's accounting of it and its children."""

    argv: list[str]
    rc: int
    wall_s: float
    cpu_s: float  # user + sys of the process and of its reaped children (py-spy, ...)
    maxrss_kib: int  # peak RSS of the process (or of its largest reaped child)
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


def run_measured(
    argv: list[str], timeout_s: float, env: dict[str, str] | None = None, cwd: str | None = None
) -> Measured:
    """Run ``argv``; wall time from spawn to reaping; CPU from ``wait4``; peak RSS from
    ``/usr/bin/time``.

    ``wait4`` returns the rusage of exactly this child (its own plus the descendants it has
    waited for), so nothing else the benchmark runs leaks into the CPU figure. Its ru_maxrss
    does not do for memory: Linux keeps the high-water mark of the image a process had before
    its exec, which for a child of this (large) benchmark process is the benchmark's own RSS.
    So the command runs under /usr/bin/time, a small process whose child starts small, and
    its ``%M`` is the figure. Output goes to temporary files rather than pipes so that no
    reader thread competes for the CPU.
    """
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r", suffix=".rss") as rss:
        wrapped = os.access(TIME, os.X_OK)
        full = [TIME, "-f", "%M", "-o", rss.name, *argv] if wrapped else argv
        t0 = time.monotonic()
        proc = subprocess.Popen(
            full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
            start_new_session=True,  # a timeout kills /usr/bin/time and the command together
        )
        killed = threading.Event()

        def _kill() -> None:
            if proc.returncode is None:
                killed.set()
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, _kill)
        timer.daemon = True
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.monotonic() - t0
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits again
        out.seek(0)
        err.seek(0)
        maxrss_kib = int(usage.ru_maxrss)
        if wrapped:
            words = rss.read().split()
            maxrss_kib = int(words[-1]) if words and words[-1].isdigit() else 0
        return Measured(
            argv=argv,
            rc=proc.returncode,
            wall_s=wall_s,
            cpu_s=usage.ru_utime + usage.ru_stime,
            maxrss_kib=maxrss_kib,
            stdout=out.read(),
            stderr=err.read(),
            timed_out=killed.is_set(),
        )


@dataclass
class Scenario:
    """A running ``hangdoctor.scenarios.postload`` launcher and its hung workers."""

    proc: subprocess.Popen
    launcher_pid: int
    worker_pids: list[int]
    log_path: str
    ready: dict = field(default_factory=dict)

    @property
    def all_pids(self) -> list[int]:
        return [self.launcher_pid] + self.worker_pids

    def stop(self) -> None:
        """Kill the scenario's process group (it made its own session) and reap the launcher."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.launcher_pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def start_postload(
    python: str,
    workdir: Path,
    name: str,
    workers: int,
    weights_mib: int,
    lifetime_s: float,
) -> subprocess.Popen:
    """Start a post-load deadlock with ``workers`` ranks; its stdout/stderr go to its log too.

    The log is also the launcher's stdout, so hangdoctor finds it without ``--log`` (as it
    would for a server started with ``> server.log 2>&1``).
    """
    log_path = workdir / f"{name}.log"
    ready = workdir / f"{name}.ready.json"
    env = dict(os.environ, PYTHONPATH=str(SOURCE))
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                python,
                "-m",
                "hangdoctor.scenarios.postload",
                "--tensor-parallel-size",
                str(workers),
                "--weights-mib",
                str(weights_mib),
                "--ready-file",
                str(ready),
                "--log",
                str(log_path),
                "--max-lifetime",
                str(lifetime_s),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(workdir),  # `python -m` puts the cwd first on sys.path: not the repo
            start_new_session=True,
        )


def wait_ready(proc: subprocess.Popen, workdir: Path, name: str, timeout_s: float) -> Scenario:
    """Wait for the scenario's ready file; raise (after stopping it) if it never comes."""
    ready = workdir / f"{name}.ready.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready.exists():
            info = json.loads(ready.read_text())
            return Scenario(
                proc=proc,
                launcher_pid=int(info["launcher_pid"]),
                worker_pids=[int(p) for p in info["worker_pids"]],
                log_path=str(workdir / f"{name}.log"),
                ready=info,
            )
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    Scenario(proc, proc.pid, [], "").stop()
    log = (workdir / f"{name}.log").read_text(errors="replace")[-1500:]
    raise RuntimeError(f"scenario {name} did not become ready in {timeout_s:.0f} s: {log}")


def start_scenarios(
    python: str,
    workdir: Path,
    specs: list[tuple[str, int]],
    weights_mib: int,
    lifetime_s: float,
    timeout_s: float = 120.0,
) -> list[Scenario]:
    """Start several scenarios at once ((name, workers) each) and wait until all are hung."""
    procs = [
        (name, start_postload(python, workdir, name, workers, weights_mib, lifetime_s))
        for name, workers in specs
    ]
    scenarios: list[Scenario] = []
    try:
        for name, proc in procs:
            scenarios.append(wait_ready(proc, workdir, name, timeout_s))
    except Exception:
        for s in scenarios:
            s.stop()
        for _, proc in procs[len(scenarios) :]:
            Scenario(proc, proc.pid, [], "").stop()
        raise
    return scenarios
