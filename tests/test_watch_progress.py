"""``hangdoctor watch --progress`` on a real plain HTTP server (tests/plain_server.py): a request
that never finishes behind a green /health fires one incident (bundle, then --then once); an
idle server and a busy, moving one never do. The metrics it writes and serves say the same, and
the alert rules (docs/alerts/hangdoctor.rules.yml) fire on the hung one's metrics and not on the
others'.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from test_probe import Plain, wait_for_log

pytestmark = pytest.mark.slow


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Plain]:
    server = Plain(tmp_path)
    try:
        yield server
    finally:
        server.flag("block", False)
        server.stop()


def start_watch(plain: Plain, tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(tmp / "watch.err", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "hangdoctor", "watch", "localhost", "--progress",
             "--url", f"http://127.0.0.1:{plain.port}/health", "--pid", str(plain.proc.pid),
             "--log", str(plain.log), "--out-dir", str(tmp / "bundles"), "--interval", "0.5",
             "--textfile", str(tmp / "hd.prom"), "--window", "0.5", "--deadline", "20", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


def bundles(tmp: Path) -> list[Path]:
    return sorted((tmp / "bundles").glob("hangdoctor-snapshot-*.tar.gz"))


def test_request_stuck_behind_green_health_fires_once(plain: Plain, tmp_path: Path) -> None:
    then_file = tmp_path / "then.txt"
    proc = start_watch(plain, tmp_path, "--after", "1.5", "--once",
                       "--then", f'echo "$HANGDOCTOR_BUNDLE" >> {then_file}')
    try:
        wait_for_log(tmp_path / "watch.err", "healthy (idle")
        plain.flag("block")
        plain.get_in_thread("/work")
        rc = proc.wait(timeout=120)
        prom = (tmp_path / "hd.prom").read_text()
        health = urllib.request.urlopen(f"http://127.0.0.1:{plain.port}/health", timeout=10).status
    finally:
        plain.flag("block", False)
        stop(proc)
    err = (tmp_path / "watch.err").read_text()
    assert rc == 0, err
    assert health == 200  # green all along
    assert err.count("incident 1") == 1 and "no progress for" in err, err
    assert len(bundles(tmp_path)) == 1, err
    assert then_file.read_text().splitlines() == [str(bundles(tmp_path)[0].resolve())]
    assert 'hangdoctor_incidents_total{target="127.0.0.1:%d"} 1' % plain.port in prom, prom
    assert "hangdoctor_status{" in prom and 'state="hung"} 1' in prom, prom
    from test_alert_rules import firing

    assert "InferenceServerHung" in firing(prom, now=time.time()), prom


def test_idle_and_busy_never_fire_and_metrics_are_served(plain: Plain, tmp_path: Path) -> None:
    proc = start_watch(plain, tmp_path, "--after", "3", "--metrics-listen", "127.0.0.1:0")
    try:
        wait_for_log(tmp_path / "watch.err", "serving /metrics on")
        wait_for_log(tmp_path / "watch.err", "healthy (idle")
        time.sleep(3.5)  # idle past --after
        t = plain.get_in_thread("/stream?s=6")  # busy, and moving: log lines every 0.1 s
        wait_for_log(plain.log, "token")
        t.join(15)
        line = next(x for x in (tmp_path / "watch.err").read_text().splitlines() if "serving /metrics on" in x)
        served = urllib.request.urlopen(f"http://127.0.0.1:{line.rsplit(':', 1)[1]}/metrics", timeout=10).read().decode()
        prom = (tmp_path / "hd.prom").read_text()
    finally:
        rc = stop(proc)
    err = (tmp_path / "watch.err").read_text()
    assert rc == 0, err
    assert bundles(tmp_path) == [] and "incident" not in err, err
    from test_alert_rules import firing

    for text in (served, prom):
        assert 'hangdoctor_incidents_total{target="127.0.0.1:%d"} 0' % plain.port in text, text
        assert f'hangdoctor_process_up{{target="127.0.0.1:{plain.port}",pid="{plain.proc.pid}"' in text
        assert firing(text, now=time.time()) == set(), text


def test_progress_needs_a_local_server_and_textfile_needs_prom(tmp_path: Path) -> None:
    for args, words in (
        (["10.1.2.3", "--progress", "--port", "8000"], "this host"),
        (["localhost", "--progress", "--port", "8000", "--textfile", str(tmp_path / "x.txt")], ".prom"),
        (["localhost", "--port", "8000", "--metrics-listen", "nope"], "[HOST:]PORT"),
    ):
        proc = subprocess.run([sys.executable, "-m", "hangdoctor", "watch", *args, "--out-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, (args, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
