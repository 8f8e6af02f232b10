"""Issue 15: the red-team round. One test (or a few) per finding F1..F21, each against the real
thing: real processes, real files, a real hung FUSE mount (tests/faults/fuse_wedge.py), a real
loopback sshd with a hostile forced command (tests/test_redteam_ssh.py).

Each test failed before its fix; the figures quoted in the docstrings were measured on the
development machine (2 shared cores) before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import fuse_wedge
from tests.faults.helpers import manifest, no_traceback, run_cli

SLEEPER = (
    "import os, sys, time\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "time.sleep(float(os.environ.get('HD_LIFETIME', '60')))\n"
)


def _start(argv: list[str], stdout: object = subprocess.DEVNULL, **kw: object) -> subprocess.Popen:
    env = {**os.environ, "HD_LIFETIME": "90"}
    return subprocess.Popen(
        argv, stdout=stdout, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, **kw
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _wait_for_file_text(path: Path, text: str, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{path} never got {text!r}")


# ---------------------------------------------------------------- F1 discovery records


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A real process whose command line is a vLLM server's, with its API key."""
    out = tmp_path / "fake-vllm.out"
    with open(out, "w") as f:
        proc = _start(
            [
                sys.executable,
                "-c",
                SLEEPER,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m",
                "--api-key",
                "XSECRETdiscovery0042",
            ],
            stdout=f,
        )
    try:
        _wait_for_file_text(out, "ready")
        yield proc
    finally:
        _stop(proc)


def test_f1_discovered_server_command_line_is_redacted(fake_vllm, tmp_path: Path) -> None:
    """`diagnose localhost` without --pid: the discovery record held `--api-key` in full."""
    proc, _ = run_cli(
        "diagnose",
        "localhost",
        "--window",
        "0",
        "--deadline",
        "20",
        "--no-gpu",
        "-o",
        str(tmp_path / "r.json"),
        "--save-snapshot",
        str(tmp_path / "s.json"),
        "--json",
        timeout_s=90,
    )
    no_traceback(proc)
    snap_text = (tmp_path / "s.json").read_text()
    doc = json.loads(snap_text)
    snaps = doc["hosts"] if "hosts" in doc else [doc]
    found = [d for s in snaps for d in s["targets"]["discovery"] if d["pid"] == fake_vllm.pid]
    assert found, "the fake server was discovered"
    assert "--api-key [REDACTED]" in found[0]["cmdline"], found[0]
    for label, text in (
        ("snapshot", snap_text),
        ("analysis", (tmp_path / "r.json").read_text()),
        ("stdout", proc.stdout),
        ("stderr", proc.stderr),
    ):
        assert "XSECRETdiscovery0042" not in text, label


# ---------------------------------------------------------------- F6 a log on a hung mount


@pytest.fixture
def wedge_dir(tmp_path: Path) -> Path:
    why = fuse_wedge.why_unavailable()
    if why:
        pytest.skip(why)
    d = tmp_path / "logs"
    d.mkdir()
    return d


def _diagnose_bounded(pid: int, deadline_s: float, tmp_path: Path, *extra: str):
    snap = tmp_path / "snap.json"
    cmd = [
        sys.executable,
        "-m",
        "hangdoctor",
        "diagnose",
        "localhost",
        "--pid",
        str(pid),
        "--window",
        "0.5",
        "--deadline",
        str(deadline_s),
        "--no-gpu",
        "--json",
        "--save-snapshot",
        str(snap),
        *extra,
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        out, err = proc.communicate(timeout=deadline_s + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(
            f"hangdoctor still running {deadline_s + 30:.0f} s after its "
            f"{deadline_s:.0f} s deadline (a thread in D state holds its exit)"
        )
    wall_s = time.monotonic() - t0
    return proc.returncode, out, err, wall_s, snap


@pytest.mark.parametrize("how", ["auto-detected", "--log"])
def test_f6_log_on_a_hung_mount_keeps_the_deadline_and_the_evidence(
    wedge_dir: Path, tmp_path: Path, how: str
) -> None:
    """The server's stdout is a file on a FUSE mount that stopped answering.

    Before: the probe's stat() of the auto-detected log sat in D state; hangdoctor never exited
    (killed by this test after deadline + 30 s). After: the log is given up on after its
    timeout, in a child left behind, and the stacks and processes are reported."""
    log = wedge_dir / "server.log"
    with open(log, "w") as f:
        server = _start([sys.executable, "-c", SLEEPER], stdout=f)
    try:
        _wait_for_file_text(log, "ready")
        deadline_s = 8.0
        with fuse_wedge.wedged_mount(str(wedge_dir)):
            extra = ("--log", str(log)) if how == "--log" else ()
            rc, out, err, wall_s, snap_path = _diagnose_bounded(
                server.pid, deadline_s, tmp_path, *extra
            )
        assert "Traceback" not in err, err
        assert wall_s < deadline_s + 4, f"{wall_s:.1f} s against --deadline {deadline_s:.0f}"
        assert rc != 4, err
        snap = json.loads(snap_path.read_text())
        entry = manifest(snap)["log"]
        assert entry["status"] == "timeout", entry
        assert "hung network or FUSE" in entry["detail"]
        assert "log" not in snap
        # the other evidence is all there
        assert [p for p in snap["processes"] if p["pid"] == server.pid and p["alive"]]
        assert snap["stacks"][str(server.pid)]["status"] == "ok"
        assert json.loads(out)["verdict"]
    finally:
        _stop(server)
