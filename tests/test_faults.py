"""Issue 8: faults injected into a real diagnosis; hangdoctor must end in time and report them.

Every case runs the real CLI (``python -m hangdoctor diagnose localhost ...``) against real
helper processes (tests/faults/waiter.py) with one source made to misbehave: a py-spy that
never answers, an NVML call that blocks (the fake libnvidia-ml.so.1), a process that vanishes
during the window, a log that is a FIFO (or becomes one), a stopped target, an SSH peer that
stops answering. The rule under test: the run ends within ``--deadline`` (plus start-up
slack), the failed source is in the manifest with the right status, the rest is still analysed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import in_ci, need
from tests.faults.helpers import (
    FAULTS_DIR,
    Helper,
    fake_python,
    manifest,
    no_traceback,
    run_cli,
    start_helper,
    stop_helper,
)

DEADLINE_S = 8.0
# Interpreter start-up, imports and rendering on top of the collection deadline.
SLACK_S = 3.0
LIMIT_S = DEADLINE_S + SLACK_S
OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.11 GiB of which 1.06 GiB is free."
)
# The never-answering py-spy; it records its pids (and its child's) in $HD_STANDIN_PIDS, so the
# test can check that hangdoctor ended both (and end them itself if not).
HUNG_PYSPY = FAULTS_DIR / "pyspy_sleeps"


@pytest.fixture
def waiter() -> Iterator[Callable[..., Helper]]:
    """Factory: ``waiter("--threads", "2", ...)`` starts tests/faults/waiter.py (stopped at teardown)."""
    started: list[Helper] = []

    def start(*args: str) -> Helper:
        helper = start_helper("waiter.py", "--lifetime", "90", *args)
        started.append(helper)
        return helper

    yield start
    for helper in started:
        stop_helper(helper)


@pytest.fixture
def standin_pids(tmp_path: Path) -> Iterator[Path]:
    """File the py-spy stand-ins append their pids to; leftovers are killed at teardown."""
    path = tmp_path / "standin.pids"
    path.touch()
    yield path
    for pid in _pids_in(path):
        try:
            os.kill(pid, signal.SIGKILL)  # a stand-in this test started (through hangdoctor)
        except (ProcessLookupError, PermissionError):
            pass


def _pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split() if x.strip().isdigit()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _diagnose(
    tmp_path: Path,
    pid: int,
    *extra: str,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], float, dict[str, Any], dict[str, Any]]:
    """diagnose localhost --pid PID --deadline 8 --window 1 --json --save-snapshot: (proc, wall, analysis, snapshot)."""
    snap_path = tmp_path / "snap.json"
    proc, wall_s = run_cli(
        "diagnose",
        "localhost",
        "--pid",
        str(pid),
        "--deadline",
        str(DEADLINE_S),
        "--window",
        "1",
        "--json",
        "--save-snapshot",
        str(snap_path),
        *extra,
        python=python,
        env=env,
    )
    no_traceback(proc)
    assert proc.stdout.strip(), proc.stderr
    analysis = json.loads(proc.stdout)
    assert snap_path.exists(), proc.stderr
    return proc, wall_s, analysis, json.loads(snap_path.read_text())


def _cause_ids(analysis: dict[str, Any]) -> list[str]:
    return [c["id"] for c in analysis["causes"]]


def _check(analysis: dict[str, Any], check_id: str) -> dict[str, Any]:
    found = [c for c in analysis["checks"] if c["id"] == check_id]
    assert found, f"no {check_id} in {[c['id'] for c in analysis['checks']]}"
    return found[0]


# ------------------------------------------------------------------ (a) py-spy never answers


@pytest.fixture
def hung_pyspy_python(tmp_path: Path) -> str:
    """A Python whose py-spy (found next to sys.executable, first) never answers."""
    return fake_python(tmp_path, HUNG_PYSPY.read_text())


def test_pyspy_that_never_answers_is_cut_and_the_rest_is_still_ranked(
    waiter, tmp_path: Path, hung_pyspy_python: str, standin_pids: Path
) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"INFO loading weights\n{OOM_LINE}\n")
    target = waiter("--children", "1")
    env = dict(os.environ, HD_STANDIN_PIDS=str(standin_pids))
    proc, wall_s, analysis, snap = _diagnose(
        tmp_path, target.pid, "--log", str(log), python=hung_pyspy_python, env=env
    )
    assert wall_s < LIMIT_S, f"took {wall_s:.1f} s with --deadline {DEADLINE_S}"
    assert proc.returncode not in (1, 2), proc.stderr
    man = manifest(snap)
    assert str(Path(hung_pyspy_python).parent / "py-spy") in man["stacks"]["detail"]
    for pid in (target.pid, *target.children):
        assert man[f"stacks:{pid}"]["status"] == "timeout", man
        assert snap["stacks"][str(pid)]["status"] == "timeout"
    # every dump timed out: the source as a whole timed out (not some other failure)
    assert man["stacks"]["status"] == "timeout", man["stacks"]
    # the other sources were still read and still rank a cause
    assert man["processes"]["status"] == "ok" and man["log"]["status"] == "ok"
    assert "gpu-oom" in _cause_ids(analysis), analysis["causes"]
    for check in analysis["checks"]:
        if check["id"].startswith("stacks."):
            assert check["verdict"] == "skipped", check
    # no stacks were read, so nothing may claim they did not change
    assert "stacks unchanged" not in analysis["headline"] + analysis["verdict_reason"], (
        analysis["headline"],
        analysis["verdict_reason"],
    )


def test_timed_out_pyspy_leaves_no_process_behind(
    waiter, tmp_path: Path, hung_pyspy_python: str, standin_pids: Path
) -> None:
    """A py-spy cut at its timeout is ended with everything it started (its process group)."""
    target = waiter()
    env = dict(os.environ, HD_STANDIN_PIDS=str(standin_pids))
    _diagnose(tmp_path, target.pid, python=hung_pyspy_python, env=env)
    started = _pids_in(standin_pids)
    assert len(started) >= 2, "the stand-in py-spy never ran"
    time.sleep(0.3)
    left = [pid for pid in started if _alive(pid)]
    assert not left, f"py-spy stand-in processes still running after the diagnosis: {left}"


def test_hangdoctor_pyspy_env_var_selects_the_binary(
    waiter, tmp_path: Path, standin_pids: Path
) -> None:
    """HANGDOCTOR_PYSPY=/path/to/py-spy is honoured (how a site points at its own py-spy)."""
    fake = HUNG_PYSPY
    target = waiter()
    env = dict(os.environ, HANGDOCTOR_PYSPY=str(fake), HD_STANDIN_PIDS=str(standin_pids))
    _proc, wall_s, _analysis, snap = _diagnose(tmp_path, target.pid, env=env)
    assert wall_s < LIMIT_S
    man = manifest(snap)
    assert str(fake) in man["stacks"]["detail"], man["stacks"]
    assert man[f"stacks:{target.pid}"]["status"] == "timeout"


# ------------------------------------------------------------------ (b) NVML blocks


def _fakenvml_build() -> Any:
    spec = importlib.util.spec_from_file_location(
        "fakenvml_build_faults", Path(__file__).with_name("fakenvml") / "build.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = _fakenvml_build()
    need(build.gcc_available(), "gcc (to build the fake libnvidia-ml.so.1)")
    return build.build(tmp_path_factory.mktemp("fakenvml"), "full")


@pytest.mark.parametrize("scenario", ["block", "block-init"])
def test_nvml_call_that_blocks_ends_in_time_and_is_a_gpu_fault(
    waiter, tmp_path: Path, fake_nvml_dir: Path, scenario: str
) -> None:
    target = waiter()
    env = dict(os.environ, FAKE_NVML_SCENARIO=scenario, LD_LIBRARY_PATH=str(fake_nvml_dir))
    proc, wall_s, analysis, snap = _diagnose(tmp_path, target.pid, env=env)
    assert wall_s < LIMIT_S, f"took {wall_s:.1f} s with --deadline {DEADLINE_S}"
    man = manifest(snap)
    assert man["nvml"]["status"] == "timeout", man["nvml"]
    assert man["stacks"]["status"] == "ok" and man["processes"]["status"] == "ok"
    assert "gpu-fault" in _cause_ids(analysis), analysis["causes"]
    assert _check(analysis, "gpu.health")["verdict"] == "fired"
    assert proc.returncode not in (1, 2)


# ------------------------------------------------------------------ (c) a process vanishes


def test_process_that_vanishes_during_the_window_is_reported_exited(waiter, tmp_path: Path) -> None:
    target = waiter("--children", "2")
    victim = target.children[0]
    snap_path = tmp_path / "snap.json"
    cmd = [
        sys.executable,
        "-m",
        "hangdoctor",
        "diagnose",
        "localhost",
        "--pid",
        str(target.pid),
        "--window",
        "3",
        "--deadline",
        str(DEADLINE_S),
        "--json",
        "--save-snapshot",
        str(snap_path),
    ]
    t0 = time.monotonic()
    diag = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)  # our own helper's child; its parent reaps it at once
        out, err = diag.communicate(timeout=LIMIT_S + 2)
    finally:
        if diag.poll() is None:
            diag.kill()
            diag.communicate(timeout=5)
    wall_s = time.monotonic() - t0
    assert wall_s < LIMIT_S + 1
    assert "Traceback" not in err and "internal error" not in err, err
    assert diag.returncode not in (1, 2), err
    analysis = json.loads(out)
    snap = json.loads(snap_path.read_text())
    record = {p["pid"]: p for p in snap["processes"]}[victim]
    assert record["alive"] is False
    assert "exited" in (record.get("exit_info") or ""), record
    survivors = {p["pid"]: p for p in snap["processes"]}
    assert survivors[target.pid]["alive"] and survivors[target.children[1]]["alive"]
    summary = _check(analysis, "process.alive")["summary"]
    assert str(victim) in json.dumps(analysis["causes"]) + summary, (summary, analysis["causes"])


# ------------------------------------------------------------------ (d) the log is a FIFO


def test_log_that_is_a_fifo_is_not_opened(waiter, tmp_path: Path) -> None:
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    target = waiter()
    _proc, wall_s, _analysis, snap = _diagnose(tmp_path, target.pid, "--log", str(fifo))
    assert wall_s < LIMIT_S
    entry = manifest(snap)["log"]
    assert entry["status"] == "failed" and "not a regular file" in entry["detail"], entry
    assert "log" not in snap


def test_log_that_is_a_character_device_is_not_read(waiter, tmp_path: Path) -> None:
    target = waiter()
    _proc, wall_s, _analysis, snap = _diagnose(tmp_path, target.pid, "--log", "/dev/zero")
    assert wall_s < LIMIT_S
    entry = manifest(snap)["log"]
    assert entry["status"] == "failed" and "not a regular file" in entry["detail"], entry


def test_huge_sparse_log_is_read_from_its_tail_only(waiter, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with open(log, "wb") as f:
        f.truncate(20 * 1024**3)  # 20 GiB of holes: reading it whole would take minutes
        f.seek(0, os.SEEK_END)
        f.write(b"\nINFO the last line\n")
    target = waiter()
    _proc, wall_s, _analysis, snap = _diagnose(tmp_path, target.pid, "--log", str(log))
    assert wall_s < LIMIT_S
    assert manifest(snap)["log"]["status"] == "ok"
    assert snap["log"]["tail"][-1] == "INFO the last line"
    assert len(snap["log"]["tail"]) <= 400


def test_log_replaced_by_a_fifo_during_the_window_does_not_block(waiter, tmp_path: Path) -> None:
    """Log rotation gone wrong: the path is a FIFO by the time the tail is read.

    The end-of-window read must not block on it (open it non-blocking and check what it opened);
    the diagnosis ends in time WITH the rest of the evidence, not as a lost host.
    """
    log = tmp_path / "server.log"
    log.write_text("INFO started\n")
    fifo = tmp_path / "server.log.fifo"
    os.mkfifo(fifo)
    target = waiter()
    snap_path = tmp_path / "snap.json"
    cmd = [
        sys.executable,
        "-m",
        "hangdoctor",
        "diagnose",
        "localhost",
        "--pid",
        str(target.pid),
        "--window",
        "3",
        "--deadline",
        str(DEADLINE_S),
        "--json",
        "--save-snapshot",
        str(snap_path),
        "--log",
        str(log),
    ]
    t0 = time.monotonic()
    diag = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        time.sleep(1.2)
        os.replace(fifo, log)  # the path now names a FIFO that nobody writes
        out, err = diag.communicate(timeout=LIMIT_S + 8)
    finally:
        if diag.poll() is None:
            diag.kill()
            diag.communicate(timeout=5)
        # unblock a reader stuck in open() (if any), so no thread lingers on it
        try:
            fd = os.open(log, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    wall_s = time.monotonic() - t0
    assert "Traceback" not in err, err
    assert wall_s < LIMIT_S, f"took {wall_s:.1f} s with --deadline {DEADLINE_S}"
    assert diag.returncode != 4, f"the host was lost: {err.strip()}"
    snap = json.loads(snap_path.read_text())
    assert snap["processes"] and manifest(snap)["log"]["status"] == "failed"
    assert json.loads(out)["verdict"] != "inconclusive" or snap["stacks"]


# ------------------------------------------------------------------ (e) a stopped target


def test_stopped_target_is_read_nonblocking_and_left_stopped(waiter, tmp_path: Path) -> None:
    target = waiter("--threads", "1")
    os.kill(target.pid, signal.SIGSTOP)  # our own helper
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _state(target.pid) != "T":
        time.sleep(0.02)
    assert _state(target.pid) == "T"
    _proc, wall_s, analysis, snap = _diagnose(tmp_path, target.pid)
    assert wall_s < LIMIT_S
    entry = snap["stacks"][str(target.pid)]
    assert entry["status"] == "ok", entry
    assert entry.get("nonblocking") is True, entry
    summary = _check(analysis, "process.alive")["summary"]
    assert "stopped" in summary, summary
    assert "stopped" in json.dumps(analysis["causes"]) + analysis["headline"] + summary
    # hangdoctor never continues a process: it is still stopped, every thread of it
    time.sleep(0.2)
    assert _state(target.pid) == "T"
    for tid in os.listdir(f"/proc/{target.pid}/task"):
        assert _state(target.pid, int(tid)) == "T", tid


def _state(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text[text.rfind(")") + 2 :].split()[0]


# ------------------------------------------------------------------ (f) an SSH peer goes silent


class _SilentListener:
    """A TCP listener on 127.0.0.1 that accepts and then never speaks (or only sends a banner)."""

    def __init__(self, banner: bytes = b"") -> None:
        self.banner = banner
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        end = time.monotonic() + 120  # ends on its own
        while not self._stop.is_set() and time.monotonic() < end:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            if self.banner:
                conn.sendall(self.banner)
            self.accepted.append(conn)  # held open, never read, never written again

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for c in self.accepted:
            c.close()
        self.sock.close()


def _ssh_ready() -> str | None:
    here = Path(__file__).parent
    if not (here / "sshd_fixture.py").exists():
        return "tests/sshd_fixture.py is missing"
    if importlib.util.find_spec("hangdoctor.reach.ssh") is None:
        return "hangdoctor/reach/ssh.py is missing"
    return None


def _require_ssh() -> None:
    why = _ssh_ready()
    if why:
        if in_ci():
            pytest.fail(f"{why}, but CI must run the SSH fault tests")
        pytest.skip(why)


@pytest.mark.parametrize(
    "banner", [b"", b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"], ids=["silent", "banner-then-silent"]
)
def test_ssh_peer_that_never_answers_is_bounded(tmp_path: Path, banner: bytes) -> None:
    _require_ssh()
    listener = _SilentListener(banner)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    try:
        proc, wall_s = run_cli(
            "diagnose",
            f"root@127.0.0.1:{listener.port}",
            "--pid",
            "1",
            "--deadline",
            str(DEADLINE_S),
            "--window",
            "1",
            "--json",
            "--known-hosts",
            str(known_hosts),
            timeout_s=LIMIT_S + 20,
        )
    finally:
        listener.close()
    no_traceback(proc)
    assert wall_s < LIMIT_S, f"took {wall_s:.1f} s with --deadline {DEADLINE_S}"
    assert proc.returncode == 4, (proc.returncode, proc.stderr)
    errors = [
        ln
        for ln in proc.stderr.splitlines()
        if ln.startswith("hangdoctor: 127.0.0.1") or "127.0.0.1" in ln and "hangdoctor:" in ln
    ]
    assert errors, proc.stderr


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children", encoding="utf-8") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_ssh_server_that_freezes_mid_collection_is_bounded(waiter, tmp_path: Path) -> None:
    """A real sshd (our own instance) is frozen with SIGSTOP once the probe runs through it."""
    _require_ssh()
    from tests import sshd_fixture

    why = sshd_fixture._sshd_unavailable()
    if why:
        need(False, why)
    sshd_proc, server = sshd_fixture.start_sshd(tmp_path)
    target = waiter()
    frozen: list[int] = []
    try:
        cmd = [
            sys.executable,
            "-m",
            "hangdoctor",
            "diagnose",
            server.spec,
            "--pid",
            str(target.pid),
            "--window",
            "4",
            "--deadline",
            str(DEADLINE_S),
            "--json",
            "-i",
            server.key_path,
            "--known-hosts",
            server.known_hosts,
            "--no-gpu",
        ]
        t0 = time.monotonic()
        diag = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
        )
        try:
            # wait until a session runs the probe (a python under the sshd), then freeze sshd
            end = time.monotonic() + DEADLINE_S
            while time.monotonic() < end:
                kids = _descendants(server.pid)
                if any(_comm(k).startswith("python") for k in kids):
                    break
                time.sleep(0.05)
            time.sleep(0.3)
            for pid in [server.pid, *_descendants(server.pid)]:
                if _comm(pid).startswith("sshd"):
                    os.kill(pid, signal.SIGSTOP)  # sshd processes this test started
                    frozen.append(pid)
            assert frozen, "no sshd session appeared"
            out, err = diag.communicate(timeout=LIMIT_S + 20)
        finally:
            if diag.poll() is None:
                diag.kill()
                diag.communicate(timeout=5)
        wall_s = time.monotonic() - t0
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        sshd_fixture.stop_sshd(sshd_proc)
        shutil.rmtree(tmp_path / "unused", ignore_errors=True)
    assert "Traceback" not in err, err
    assert wall_s < LIMIT_S, f"took {wall_s:.1f} s with --deadline {DEADLINE_S}"
    assert diag.returncode == 4, (diag.returncode, err)
    assert server.spec.split("@")[1].split(":")[0] in err, err
    assert out.strip() and json.loads(out)["hosts"], "a report is still written"
