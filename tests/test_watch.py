"""Issue 6: `hangdoctor watch` takes one snapshot per incident, on a real server it watches.

The test is the operator here: it SIGSTOPs the scenario's HTTP server to make health fail and
SIGCONTs it afterwards. hangdoctor itself never signals what it watches.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from hangdoctor.watch import IncidentTracker, check_port, check_url, run_then, tcp_host_of

pytestmark = pytest.mark.slow

WATCH_EXIT_TIMEOUT_S = 20.0


def _start_watch(*args: str, stderr_path: Path) -> subprocess.Popen[bytes]:
    with open(stderr_path, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "hangdoctor", "watch", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )


def _wait_for_log(
    path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        assert proc.poll() is None, f"watch exited early ({proc.returncode}):\n{path.read_text()}"
        time.sleep(0.05)
    pytest.fail(f"no {text!r} in the watch log after {timeout_s} s:\n{path.read_text()}")


def _stop_watch(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout:
        proc.stdout.close()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _bundles(folder: Path) -> list[Path]:
    return sorted(folder.glob("hangdoctor-snapshot-*.tar.gz"))


def _answers(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
        return resp.status == 200


def test_stopped_server_gives_one_snapshot_and_one_then(run_scenario, tmp_path):
    info = run_scenario("healthy", workers=2)
    assert info.port
    out_dir, then_file, log = tmp_path / "bundles", tmp_path / "then.txt", tmp_path / "watch.err"
    then = f'echo "$HANGDOCTOR_VERDICT $HANGDOCTOR_BUNDLE" >> {then_file}'
    t0 = time.monotonic()
    proc = _start_watch(
        "localhost", "--url", f"http://127.0.0.1:{info.port}/health", "--pid", str(info.launcher_pid),
        "--interval", "0.5", "--after", "1.5", "--then", then, "--out-dir", str(out_dir), "--once",
        "--window", "1", "--deadline", "8", stderr_path=log,
    )  # fmt: skip
    try:
        _wait_for_log(log, "healthy (HTTP 200)", proc)
        os.kill(info.launcher_pid, signal.SIGSTOP)  # the operator freezes the server
        try:
            rc = proc.wait(timeout=WATCH_EXIT_TIMEOUT_S)
            wall_s = time.monotonic() - t0
        finally:
            os.kill(info.launcher_pid, signal.SIGCONT)
    finally:
        _stop_watch(proc)

    err = log.read_text()
    assert rc == 0, err
    assert wall_s < WATCH_EXIT_TIMEOUT_S
    bundles = _bundles(out_dir)
    assert len(bundles) == 1, err
    assert sorted(p.name for p in out_dir.iterdir()) == [bundles[0].name]  # no partial files
    lines = then_file.read_text().splitlines()
    assert len(lines) == 1
    verdict, bundle_path = lines[0].split(" ", 1)
    assert bundle_path == str(bundles[0].resolve())
    assert verdict in ("hung", "progressing", "healthy", "dead", "inconclusive")
    # One line per state change, none per poll.
    assert err.count("health failing") == 1 and err.count("incident 1") == 1
    assert "--then exited 0" in err and "poll:" not in err
    # The server was frozen and thawed by the test, never touched by hangdoctor.
    assert _state(info.launcher_pid) in ("S", "R") and _answers(info.port)


def test_healthy_server_gets_no_snapshot_and_sigterm_stops_cleanly(run_scenario, tmp_path):
    info = run_scenario("healthy", workers=2)
    out_dir, then_file, log = tmp_path / "bundles", tmp_path / "then.txt", tmp_path / "watch.err"
    proc = _start_watch(
        "localhost", "--url", f"http://127.0.0.1:{info.port}/health", "--port", str(info.port),
        "--pid", str(info.launcher_pid), "--interval", "0.2", "--after", "0.5",
        "--then", f"echo x >> {then_file}", "--out-dir", str(out_dir), stderr_path=log,
    )  # fmt: skip
    try:
        _wait_for_log(log, f"healthy (HTTP 200, port {info.port} open)", proc)
        time.sleep(2.0)  # ~10 healthy polls, well past --after
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=5)
    finally:
        _stop_watch(proc)
    err = log.read_text()
    assert rc == 0, err
    assert _bundles(out_dir) == [] and not then_file.exists()
    assert "health failing" not in err and "poll:" not in err
    assert len(err.strip().splitlines()) == 3  # watching, healthy, stopped
    assert err.strip().splitlines()[-1].endswith("SIGTERM: stopped")
    assert _answers(info.port)


def test_one_snapshot_per_incident_and_rearm_after_recovery(run_scenario, tmp_path):
    info = run_scenario("healthy", workers=1)
    out_dir, log = tmp_path / "bundles", tmp_path / "watch.err"
    proc = _start_watch(
        "localhost", "--port", str(info.port), "--url", f"http://127.0.0.1:{info.port}/health",
        "--pid", str(info.launcher_pid), "--interval", "0.3", "--after", "0.9",
        "--out-dir", str(out_dir), "--max-snapshots", "2", "--window", "0.5", "--deadline", "6",
        stderr_path=log,
    )  # fmt: skip
    pid = info.launcher_pid
    try:
        _wait_for_log(log, "healthy (", proc)
        os.kill(pid, signal.SIGSTOP)
        try:
            _wait_for_log(log, "waiting for health to come back", proc)
            time.sleep(1.5)  # still down for several polls: no second snapshot
            assert len(_bundles(out_dir)) == 1
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait_for_log(log, "healthy again", proc)
        os.kill(pid, signal.SIGSTOP)
        try:
            rc = proc.wait(timeout=WATCH_EXIT_TIMEOUT_S)
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        _stop_watch(proc)
    err = log.read_text()
    assert rc == 0, err
    assert len(_bundles(out_dir)) == 2, err
    assert err.count("health failing") == 2 and "handled 2 incident(s)" in err


def test_nothing_to_watch_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "watch", "localhost", "--out-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2 and "nothing to watch" in proc.stderr


# ------------------------------------------------------------------ the parts, without the CLI


def test_tracker_fires_once_per_incident():
    t = IncidentTracker(after_s=2.0)
    seen = [t.observe(ok, now) for ok, now in [
        (True, 0), (True, 1), (False, 2), (False, 3), (False, 4), (False, 5), (False, 9),
        (True, 10), (False, 11), (True, 12), (False, 13), (False, 15),
    ]]  # fmt: skip
    assert seen == [
        "up", None, "down", None, "incident", None, None,
        "back", "down", "back", "down", "incident",
    ]  # fmt: skip
    assert t.incidents == 2
    down_at_start = IncidentTracker(after_s=0.0)
    assert down_at_start.observe(False, 0) == "incident"
    assert down_at_start.observe(False, 1) is None


def test_checks_on_real_sockets():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not check_port("127.0.0.1", port, 1.0).ok  # bound, not listening: refused
        s.listen(1)
        assert check_port("127.0.0.1", port, 1.0).ok
        # Listening, never answering HTTP: the URL check times out, within its timeout.
        t0 = time.monotonic()
        health = check_url(f"http://127.0.0.1:{port}/health", 0.5)
        assert not health.ok and "no answer within 0.5 s" in health.detail
        assert time.monotonic() - t0 < 2.0
    assert tcp_host_of("localhost") == "127.0.0.1"
    assert tcp_host_of("ops@gpu-3:2222") == "gpu-3"
    assert tcp_host_of("[::1]:22") == "::1"


def test_then_runs_with_env_and_is_stopped_at_its_timeout(tmp_path):
    out = tmp_path / "env.txt"
    rc, _ = run_then(
        f'echo "$HANGDOCTOR_BUNDLE" > {out}; exit 3', {"HANGDOCTOR_BUNDLE": "b.tgz"}, 10
    )
    assert rc == 3 and out.read_text() == "b.tgz\n"
    pid_file = tmp_path / "pid"
    t0 = time.monotonic()
    rc, took_s = run_then(f"sleep 30 & echo $! > {pid_file}; wait", {}, 1.0)
    assert rc is None and 1.0 <= took_s < 8 and time.monotonic() - t0 < 8
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        if _state(child) == "Z":
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or _state(child) == "Z"  # its group was stopped


def test_watch_loop_stops_when_asked():
    from hangdoctor.watch import Health, Logger, watch_loop

    stop = threading.Event()
    polls = {"n": 0}

    def poll() -> Health:
        polls["n"] += 1
        if polls["n"] == 3:
            stop.set()
        return Health(True, "ok")

    stream = io.StringIO()
    count = watch_loop(poll, lambda *_: None, interval_s=0.01, after_s=1, stop=stop,
                       log=Logger(stream=stream))  # fmt: skip
    assert count == 0 and polls["n"] == 3
    assert stream.getvalue().count("\n") == 1 and "healthy (ok)" in stream.getvalue()
