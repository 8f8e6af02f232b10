"""Running py-spy against target processes, bounded and read-only.

Stdlib only, Python 3.8 compatible (ships with the probe).

py-spy pauses a process for a few milliseconds while it reads its memory; that is the only
intrusion hangdoctor makes. A stopped process (state T) cannot be suspended again, so it is
read with ``--nonblocking``, which does not pause it at all.

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

PTRACE_REMEDY = (
    "py-spy needs ptrace: run as root or the process owner; in a container add "
    "--cap-add SYS_PTRACE (Kubernetes: securityContext.capabilities.add [SYS_PTRACE], or "
    "`kubectl debug`); with Yama set /proc/sys/kernel/yama/ptrace_scope to 0 or use --sudo"
)


def find_pyspy(explicit: Optional[str] = None) -> Optional[str]:
    """py-spy from the config, $HANGDOCTOR_PYSPY, next to this Python (a venv's scripts dir),
    or on PATH."""
    explicit = explicit or os.environ.get("HANGDOCTOR_PYSPY") or None
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for c in pyspy_candidates():
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def pyspy_candidates() -> List[str]:
    """Where py-spy usually is, in order: next to this Python (a venv's scripts dir, also when
    the venv is not activated), on PATH, in ~/.local/bin."""
    # Imported here: the remote probe is handed py-spy's path and never needs them (~5 ms).
    import shutil
    import sysconfig

    found = [
        os.path.join(sysconfig.get_path("scripts") or "", "py-spy"),
        os.path.join(os.path.dirname(sys.executable), "py-spy"),
        shutil.which("py-spy") or "",
        os.path.expanduser("~/.local/bin/py-spy"),
    ]
    return [c for c in found if c]


def _first_error(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Error:"):
            return line[len("Error:") :].strip()
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[0] if lines else "py-spy failed without a message"


def classify_error(message: str) -> str:
    low = message.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return "denied"
    if "no such process" in low or "failed to find" in low and "process" in low:
        return "gone"
    if "failed to find python interpreter" in low or "failed to get process" in low:
        return "not-python"
    return "failed"


def dump(
    pyspy: str,
    pid: int,
    timeout_s: float,
    native: bool = False,
    with_locals: bool = False,
    nonblocking: bool = False,
    sudo: bool = False,
) -> Dict[str, Any]:
    """One ``py-spy dump --json`` of ``pid``. Returns a stacks entry (SCHEMA.md)."""
    cmd = [pyspy, "dump", "--pid", str(pid), "--json"]
    if native:
        cmd.append("--native")
    if with_locals:
        cmd.append("--locals")
    if nonblocking:
        cmd.append("--nonblocking")
    if sudo:
        cmd = ["sudo", "-n"] + cmd
    env = dict(os.environ, RUST_BACKTRACE="0")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return {"status": "failed", "error": "cannot run py-spy: %s" % exc, "duration_s": 0.0}
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # Killing py-spy mid-dump is safe for the target: the kernel detaches a dead tracer
        # and the tracee resumes. Kill its whole session (sudo, wrappers), not just the pid.
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            proc.kill()
        try:
            proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        return {
            "status": "timeout",
            "error": "py-spy dump did not return within %.1f s" % timeout_s,
            "duration_s": round(time.monotonic() - t0, 4),
        }
    duration = round(time.monotonic() - t0, 4)
    text_err = err.decode("utf-8", "replace")
    if proc.returncode != 0:
        message = _first_error(text_err or out.decode("utf-8", "replace"))
        status = classify_error(message)
        if sudo and "a password is required" in text_err:
            status, message = "denied", "sudo -n needs a password: " + message
        entry = {"status": status, "error": message, "duration_s": duration}
        if status == "denied":
            entry["remedy"] = PTRACE_REMEDY
        return entry
    try:
        threads = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        return {
            "status": "failed",
            "error": "py-spy printed output that is not JSON (truncated dump?)",
            "duration_s": duration,
        }
    if not isinstance(threads, list):
        threads = []
    return {
        "status": "ok",
        "error": None,
        "duration_s": duration,
        "nonblocking": nonblocking,
        "native": native,
        "samples": [{"t": 0.0, "threads": [_thread(t) for t in threads if isinstance(t, dict)]}],
    }


def _thread(t: Dict[str, Any]) -> Dict[str, Any]:
    frames = []
    for f in t.get("frames") or []:
        if not isinstance(f, dict):
            continue
        filename = f.get("filename") or ""
        frames.append(
            {
                "name": f.get("name"),
                "filename": filename,
                "short_filename": f.get("short_filename") or filename,
                "line": f.get("line"),
                "native": not filename.endswith(".py") and bool(filename),
                "locals": f.get("locals"),
            }
        )
    return {
        "thread_id": t.get("thread_id"),
        "os_thread_id": t.get("os_thread_id"),
        "name": t.get("thread_name"),
        "active": bool(t.get("active")),
        "owns_gil": bool(t.get("owns_gil")),
        "frames": frames,
    }


def dump_with_retry(pyspy: str, pid: int, timeout_s: float, state: str, **kw: Any) -> Dict[str, Any]:
    """Dump, reading a stopped process non-blocking; retry non-blocking if suspend fails."""
    nonblocking = state in ("T", "t")
    entry = dump(pyspy, pid, timeout_s, nonblocking=nonblocking, **kw)
    if (
        entry["status"] == "failed"
        and not nonblocking
        and "suspend" in (entry.get("error") or "").lower()
    ):
        entry = dump(pyspy, pid, timeout_s, nonblocking=True, **kw)
        entry["note"] = "process could not be suspended; read without pausing it"
    return entry


def merge_samples(first: Dict[str, Any], second: Optional[Dict[str, Any]], t_s: float) -> Dict[str, Any]:
    """Append the end-of-window sample of ``second`` to ``first``."""
    if second is None or second.get("status") != "ok":
        return first
    if first.get("status") != "ok":
        second = dict(second)
        for s in second.get("samples", []):
            s["t"] = t_s
        return second
    for s in second.get("samples", []):
        s["t"] = t_s
        first.setdefault("samples", []).append(s)
    # every dump's own duration: their sum bounds how long the process was paused
    first["durations_s"] = [first.get("duration_s") or 0.0, second.get("duration_s") or 0.0]
    first["duration_s"] = max(first["durations_s"])
    return first


def pyspy_version(pyspy: str, timeout_s: float = 3.0) -> Optional[str]:
    try:
        out = subprocess.run(
            [pyspy, "--version"], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode("utf-8", "replace").strip() or None


def is_python_process(exe_path: Optional[str], argv: List[str], maps_head: Optional[bytes]) -> bool:
    names = [os.path.basename(exe_path or "")] + [os.path.basename(argv[0]) if argv else ""]
    for n in names:
        if n.startswith("python") or n.startswith("pypy"):
            return True
    return bool(maps_head and b"python" in maps_head)
