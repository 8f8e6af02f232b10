"""Options that would silently change meaning say so, or are refused: a --window the deadline
cannot hold (the deadline grows when it was not given; a warning says what is measured when it
was), a thread id given as --pid (refused: it is not a process), and TERM=dumb (no progress
line, whose \\r and erase codes such a terminal shows raw).
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import run_hangdoctor

from hangdoctor.cli.diagnosis import deadline_for_window, window_that_fits


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


@pytest.mark.parametrize("window", [0.2, 2, 4, 10, 30, 40, 60, 600])
def test_the_deadline_found_for_a_window_keeps_it_whole(window: float) -> None:
    need = deadline_for_window(window)
    assert window_that_fits(window, need) == window
    assert window_that_fits(window, need - 1) < window or need - 1 < 5  # and is the shortest


def test_the_default_deadline_keeps_the_default_window() -> None:
    assert window_that_fits(2.0, 45.0) == 2.0


def test_a_window_longer_than_the_deadline_holds_is_said(sleeper, tmp_path: Path) -> None:
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(sleeper.pid), "--window", "10",
                          "--deadline", "5", "--json", "-q", cwd=tmp_path)  # fmt: skip
    warning = [x for x in proc.stderr.splitlines() if "does not fit" in x]
    assert warning == ["hangdoctor: warning: --window 10 does not fit in --deadline 5: the window "
                       "is cut to 2.4 s (--deadline 20 or more keeps it whole)"], proc.stderr  # fmt: skip
    measured = json.loads(proc.stdout)["window_s"]
    assert measured is not None and measured < 5, measured  # what the warning said


def test_a_window_that_fits_gets_no_warning(sleeper, tmp_path: Path) -> None:
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(sleeper.pid), "--window", "0.5",
                          "--deadline", "5", "--json", "-q", cwd=tmp_path)  # fmt: skip
    assert "does not fit" not in proc.stderr, proc.stderr


def test_a_thread_id_is_not_a_process(tmp_path: Path) -> None:
    code = ("import threading, time\n"
            "threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
            "print('ready', flush=True); time.sleep(120)\n")  # fmt: skip
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        tids = [int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid]
        assert tids
        proc = run_hangdoctor("diagnose", "localhost", "--pid", str(tids[0]), "--window", "600",
                              cwd=tmp_path)  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert lines == [f"hangdoctor: {tids[0]} on localhost is a thread of process {p.pid}, not a "
                         f"process (give the process: --pid {p.pid})"], proc.stderr  # fmt: skip
        # the control: the process itself is diagnosed
        ok = run_hangdoctor(
            "diagnose", "localhost", "--pid", str(p.pid), "--window", "0.2", cwd=tmp_path
        )
        assert ok.returncode != 2, ok.stderr
    finally:
        p.kill()
        p.wait()


def run_on_a_terminal(args: list[str], term: str, cwd: Path) -> bytes:
    """Run the CLI with stdout and stderr on a pseudo-terminal; everything it wrote there."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM=term, COLUMNS="100")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "hangdoctor", *args], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=env, cwd=cwd)  # fmt: skip
    os.close(slave)
    out = bytearray()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                out.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.wait(timeout=120)
    time.sleep(0.3)
    done.set()
    reader.join(5)
    os.close(master)
    return bytes(out)


@pytest.mark.parametrize("term", ["dumb", "xterm"])
def test_term_dumb_gets_no_progress_line(sleeper, tmp_path: Path, term: str) -> None:
    out = run_on_a_terminal(["diagnose", "localhost", "--pid", str(sleeper.pid), "--window", "1.5"],
                            term, tmp_path)  # fmt: skip
    assert b"HUNG" in out or b"hangdoctor:" in out, out
    if term == "dumb":
        assert b"\x1b[K" not in out and b"watching for" not in out, out
    else:  # the control: a terminal that can erase gets the progress line
        assert b"watching for" in out and b"\x1b[K" in out, out


@pytest.mark.ssh
def test_a_thread_id_over_ssh_is_not_a_process(tmp_path: Path) -> None:
    """On a remote host the probe finds out: the same one line, after collection."""
    from tests import sshd_fixture

    why = sshd_fixture._sshd_unavailable()
    if why:
        pytest.skip(why)
    work = tmp_path / "sshd"
    work.mkdir()
    sshd_proc, srv = sshd_fixture.start_sshd(work)
    code = ("import threading, time\n"
            "threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
            "print('ready', flush=True); time.sleep(120)\n")  # fmt: skip
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        tid = next(int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid)
        proc = run_hangdoctor("diagnose", srv.alias, "--ssh-config", srv.ssh_config, "--pid", str(tid),
                              "--window", "0.2", "-o", str(tmp_path / "r.html"))  # fmt: skip
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
        assert (
            f"hangdoctor: {tid} on {srv.alias} is a thread of process {p.pid}, not a process"
            in proc.stderr
        )
        assert not (tmp_path / "r.html").exists()
    finally:
        p.kill()
        p.wait()
        sshd_fixture.stop_sshd(sshd_proc)
