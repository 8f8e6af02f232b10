"""Shared helpers for the fault, read-only, secrets and hostile tests.

Everything started here is a process of the test's own; it is stopped by its pid and exits on
its own after a bounded lifetime.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAULTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = FAULTS_DIR.parent.parent
READY_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 60.0


@dataclass
class Helper:
    """A helper process of the test and what its ready line said."""

    proc: subprocess.Popen[bytes]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def children(self) -> list[int]:
        return [int(p) for p in self.info.get("children", [])]


def start_helper(
    script: str, *args: str, env: dict[str, str] | None = None, argv0: list[str] | None = None
) -> Helper:
    """Start ``python tests/faults/SCRIPT ARGS`` and wait for its JSON ready line on stdout.

    ``argv0`` replaces ``[sys.executable, script]`` at the front of the command line.
    """
    cmd = (argv0 or [sys.executable, str(FAULTS_DIR / script)]) + list(args)
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # the test's own group: never mixed with the runner's
    )
    helper = Helper(proc)
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline:
        import select

        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            break
        if proc.poll() is not None:
            break
    if not line.strip():
        stop_helper(helper)
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        raise RuntimeError(f"helper {script} did not get ready: {err[-2000:]}")
    helper.info = json.loads(line)
    return helper


def stop_helper(helper: Helper) -> None:
    """Continue (if we stopped it) and kill a helper and its children, each by its own pid."""
    for pid in helper.children + [helper.pid]:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        helper.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for stream in (helper.proc.stdout, helper.proc.stderr):
        if stream:
            stream.close()


def fake_python(where: Path, pyspy_script: str) -> str:
    """A Python (a venv seeing this interpreter's packages) whose own ``py-spy`` is a stand-in.

    The probe looks for py-spy next to ``sys.executable`` first; a venv is the one place a test
    can put a py-spy there without touching the real installation. ``pyspy_script`` is the body
    of the shell script installed as ``py-spy``. Returns the venv's python.
    """
    env_dir = where / "venv"
    python = env_dir / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    pyspy = env_dir / "bin" / "py-spy"
    pyspy.write_text(pyspy_script)
    pyspy.chmod(0o755)
    return str(python)


def run_cli(
    *args: str,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    timeout_s: float = CLI_TIMEOUT_S,
    cwd: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``PYTHON -m hangdoctor ARGS``; return (the completed process, its wall time in s)."""
    full_env = dict(os.environ if env is None else env)
    paths = [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO_ROOT) not in paths:
        full_env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])
    t0 = time.monotonic()
    proc = subprocess.run(
        [python, "-m", "hangdoctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=full_env,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    return proc, time.monotonic() - t0


def manifest(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The snapshot's manifest as ``source -> entry``."""
    return {m["source"]: m for m in snapshot.get("manifest", [])}


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    """Assert the CLI printed no Python traceback and no internal error."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "internal error" not in proc.stderr, proc.stderr[-3000:]


# ------------------------------------------------------------------ process state from /proc


def _status(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def _state_letter(stat_path: str) -> str:
    with open(stat_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text[text.rfind(")") + 2 :].split()[0]


def process_state(pid: int) -> dict[str, Any]:
    """What an outsider could change about ``pid``: state, threads, children, fds, signals, tracer.

    Per thread: state letter, SigPnd, SigBlk, TracerPid. Per process: ShdPnd, SigIgn, SigCgt,
    children (from every thread's ``children`` file), and every fd with its target.
    """
    base = f"/proc/{pid}"
    status = _status(f"{base}/status")
    threads = {}
    children: set[int] = set()
    for tid_name in sorted(os.listdir(f"{base}/task"), key=int):
        tbase = f"{base}/task/{tid_name}"
        try:
            tstatus = _status(f"{tbase}/status")
            threads[int(tid_name)] = {
                "state": _state_letter(f"{tbase}/stat"),
                "SigPnd": tstatus.get("SigPnd"),
                "SigBlk": tstatus.get("SigBlk"),
                "TracerPid": tstatus.get("TracerPid"),
            }
            with open(f"{tbase}/children", encoding="utf-8") as f:
                children.update(int(c) for c in f.read().split())
        except FileNotFoundError:
            continue
    fds = {}
    for name in os.listdir(f"{base}/fd"):
        try:
            fds[int(name)] = os.readlink(f"{base}/fd/{name}")
        except OSError:
            continue
    return {
        "state": _state_letter(f"{base}/stat"),
        "threads": threads,
        "num_threads": int(status["Threads"]),
        "children": sorted(children),
        "fds": fds,
        "ShdPnd": status.get("ShdPnd"),
        "SigPnd": status.get("SigPnd"),
        "SigBlk": status.get("SigBlk"),
        "SigIgn": status.get("SigIgn"),
        "SigCgt": status.get("SigCgt"),
        "TracerPid": status.get("TracerPid"),
    }


def stopped_or_traced(pid: int) -> list[str]:
    """Threads of ``pid`` that are stopped (T), traced (t) or have a tracer; empty when none."""
    bad = []
    for tid, t in process_state(pid)["threads"].items():
        if t["state"] in ("T", "t") or t["TracerPid"] != "0":
            bad.append(f"tid {tid}: state {t['state']}, TracerPid {t['TracerPid']}")
    return bad


def strays(pattern: str) -> list[str]:
    """Command lines of live processes matching ``pattern`` (to find leaked stand-ins)."""
    out = []
    rx = re.compile(pattern)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            if argv and rx.search(argv) and _state_letter(f"/proc/{name}/stat") != "Z":
                out.append(f"{name}: {argv}")
        except OSError:
            continue
    return out
