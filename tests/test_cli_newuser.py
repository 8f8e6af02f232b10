"""What a new user hit (issue 17), each against real processes where it is about processes:
a FIFO reader blocked in open and in read, a thread blocked on a threading.Lock another thread
holds, a SIGSTOPped process, a flock held by another process (seen in /proc/locks), a typo'd
pid, a `sleep`, two --pid trees, --port and --url tied to the listening process, bundles and
unreadable files as input, arguments refused before the window, terminal width and colour.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import schema_check
from conftest import REPO_ROOT, run_hangdoctor

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
READY_TIMEOUT_S = 30.0
# A collection that waited out this window before refusing an argument would blow the
# subprocess timeout (120 s) by far: these tests fail for a late check on any machine.
LONG_WINDOW = "600"


# ------------------------------------------------------------------ real programs

FIFO_PROGRAM = """
import os, sys
path, mode = sys.argv[1], sys.argv[2]
os.mkfifo(path)
print("ready", flush=True)
if mode == "open":
    with open(path) as f:  # blocks in open(): no writer
        f.read()
else:
    fd = os.open(path, os.O_RDWR)  # returns at once (we are a writer too); the read blocks
    os.read(fd, 10)
"""

LOCK_PROGRAM = """
import http.server, threading, time
LOCK = threading.Lock()
def refresh():
    with LOCK:
        time.sleep(3600)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with LOCK:
            self.send_response(200)
            self.end_headers()
threading.Thread(target=refresh, name="cache-refresh", daemon=True).start()
time.sleep(0.2)
srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""

FLOCK_PROGRAM = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
if sys.argv[2] == "hold":
    fcntl.flock(f, fcntl.LOCK_EX)
    print("ready", flush=True)
    time.sleep(3600)
print("ready", flush=True)
fcntl.flock(f, fcntl.LOCK_EX)  # blocks: the holder never lets go
"""

HTTP_PROGRAM = """
import http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""

# An unrelated "vLLM" on the host: discovery finds it by its command line.
DECOY_PROGRAM = "import time; print('ready', flush=True); time.sleep(3600)"


class Programs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, code: str, *args: str) -> tuple[subprocess.Popen[str], str]:
        """Start ``python PROGRAM.py args``; wait for its first line (ready or a port). A file,
        not ``-c``: frames of ``<string>`` do not look like Python source to the stack views."""
        script = self.tmp / f"program_{len(self.procs)}.py"
        script.write_text(textwrap.dedent(code))
        p = subprocess.Popen([sys.executable, str(script), *args], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)  # fmt: skip
        self.procs.append(p)
        assert p.stdout is not None
        ready, _, _ = select.select([p.stdout], [], [], READY_TIMEOUT_S)
        assert ready, "the program did not start"
        return p, p.stdout.readline().strip()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()  # SIGKILL ends a stopped process too
            p.wait(timeout=30)


@pytest.fixture
def programs(tmp_path: Path) -> Iterator[Programs]:
    progs = Programs(tmp_path)
    yield progs
    progs.stop()


def diagnose_json(*args: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    proc = run_hangdoctor("diagnose", "localhost", *args, "--json", "-q")
    assert proc.stdout.strip(), proc.stderr
    doc = json.loads(proc.stdout)
    schema_check.record("diagnose", doc)  # every --json the suite produces meets the schema
    return doc, proc


def cause_ids(a: dict[str, Any]) -> list[str]:
    return [c["id"] for c in a["causes"]]


def ruled_out(a: dict[str, Any]) -> list[str]:
    return [r["id"] for r in a["ruled_out"]]


def in_pty(args: list[str], env: dict[str, str] | None = None, cols: int = 80) -> str:
    """Run ``python -m hangdoctor ARGS`` with stdout and stderr on a real terminal."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    full_env = dict(os.environ)
    full_env.pop("COLUMNS", None)  # the terminal's own size, unless the test sets COLUMNS
    full_env.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "hangdoctor", *args], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=full_env, close_fds=True)  # fmt: skip
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 1.0)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the program is done
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


# ------------------------------------------------------------------ 2. missed causes


def test_fifo_open_without_writer_is_io_stall(programs: Programs, tmp_path: Path):
    p, _ = programs.start(FIFO_PROGRAM, str(tmp_path / "wedged"), "open")
    time.sleep(0.3)
    a, proc = diagnose_json("--pid", str(p.pid), "--window", "0.5")
    assert cause_ids(a)[:1] == ["io-stall"], a["causes"]
    assert "wait_for_partner" in a["causes"][0]["summary"]
    assert "io-stall" not in ruled_out(a)


def test_fifo_read_without_writer_is_io_stall_and_names_the_fifo(
    programs: Programs, tmp_path: Path
):
    fifo = tmp_path / "feed"
    p, _ = programs.start(FIFO_PROGRAM, str(fifo), "read")
    time.sleep(0.3)
    a, _ = diagnose_json("--pid", str(p.pid), "--window", "0.5", "--native")
    assert cause_ids(a)[:1] == ["io-stall"], a["causes"]
    assert str(fifo) in a["causes"][0]["summary"]


def test_multiprocessing_pipe_wait_is_not_io_stall(run_scenario):
    info = run_scenario("postload", workers=2)
    a, _ = diagnose_json("--pid", str(info.launcher_pid), "--window", "0.5")
    assert cause_ids(a)[:1] == ["post-load-deadlock"]
    assert "io-stall" not in cause_ids(a)


def test_handler_blocked_on_a_threading_lock_is_lock_contention(programs: Programs):
    p, port = programs.start(LOCK_PROGRAM)
    # a request parks a handler on the lock the refresh thread holds
    client = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    client.sendall(b"GET / HTTP/1.0\r\n\r\n")
    try:
        time.sleep(0.3)
        a, _ = diagnose_json("--pid", str(p.pid), "--window", "0.5")
    finally:
        client.close()
    assert cause_ids(a)[:1] == ["lock-contention"], a["causes"]
    assert "lock-contention" not in ruled_out(a)
    top = a["causes"][0]
    assert "cache-refresh" in top["summary"], top["summary"]  # the other thread is named
    assert a["verdict"] == "hung"


def test_an_idle_server_waiting_for_requests_has_no_lock_contention(programs: Programs):
    p, _port = programs.start(HTTP_PROGRAM)
    a, _ = diagnose_json("--pid", str(p.pid), "--window", "0.5")
    assert "lock-contention" not in cause_ids(a)
    assert a["verdict"] == "healthy"


def test_flock_held_by_another_process_is_lock_contention_naming_the_holder(
    programs: Programs, tmp_path: Path
):
    lock = tmp_path / "model.lock"
    holder, _ = programs.start(FLOCK_PROGRAM, str(lock), "hold")
    waiter, _ = programs.start(FLOCK_PROGRAM, str(lock), "wait")
    time.sleep(0.3)
    assert f" {waiter.pid} " in Path("/proc/locks").read_text()  # the kernel sees the wait
    a, _ = diagnose_json("--pid", str(waiter.pid), "--window", "0.5")
    assert cause_ids(a)[:1] == ["lock-contention"], a["causes"]
    summary = a["causes"][0]["summary"]
    assert str(lock) in summary and f"pid {holder.pid}" in summary and "outside" in summary


def test_a_stopped_process_is_shown_in_the_summary(programs: Programs):
    p, _ = programs.start(DECOY_PROGRAM.replace("ready", "up"))
    os.kill(p.pid, signal.SIGSTOP)
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(p.pid), "--window", "0.3")
    assert f"! pid {p.pid} [python" in proc.stdout and "is stopped" in proc.stdout, proc.stdout


# ------------------------------------------------------------------ 4. a typo'd pid, a `sleep`


def test_a_pid_with_no_process_is_one_line_exit_2_and_no_report(tmp_path: Path):
    out = tmp_path / "r.html"
    proc = run_hangdoctor("diagnose", "localhost", "--pid", "999999", "-o", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "hangdoctor: no process 999999 on localhost (check the PID: ps -eo pid,cmd | grep -iE "
        "'vllm|sglang|python')"
    ]
    assert not out.exists() and not (tmp_path / "r.snapshot.json").exists()


def test_a_process_that_is_not_python_says_there_are_no_python_stacks():
    sleeper = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        proc = run_hangdoctor("diagnose", "localhost", "--pid", str(sleeper.pid), "--window", "0.3")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert f"no Python stacks: pid {sleeper.pid} [sleep] is not a Python process" in proc.stdout
    assert "py-spy reads only Python" in proc.stdout


# ------------------------------------------------------------------ 5, 6. inputs


def test_a_bundle_tar_and_folder_are_input_to_analyze_and_report(
    programs: Programs, tmp_path: Path
):
    p, _ = programs.start(FIFO_PROGRAM, str(tmp_path / "wedged"), "open")
    tar = tmp_path / "snap.tar.gz"
    folder = tmp_path / "snapdir"
    for out in (tar, folder):
        proc = run_hangdoctor(
            "snapshot", "localhost", "--pid", str(p.pid), "--window", "0.3", "-o", str(out)
        )
        assert proc.returncode == 3, proc.stderr
    for bundle in (tar, folder):
        a = json.loads(run_hangdoctor("analyze", str(bundle), "--json", "-q").stdout)
        assert a["verdict"] == "hung" and cause_ids(a)[:1] == ["io-stall"]
        md = run_hangdoctor("report", str(bundle))
        assert md.returncode == 0 and md.stdout.startswith("# hangdoctor: HUNG"), md.stderr
    with tarfile.open(tar) as t:
        assert any(m.name.endswith("/snapshot.json") for m in t.getmembers())
    proc = run_hangdoctor("report", str(tar), "--format", "html", cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "snap.html").read_text().startswith(
        "<!doctype html"
    )


def test_a_folder_that_is_no_bundle_stands_for_its_files(tmp_path: Path):
    (tmp_path / "ev" / "sub").mkdir(parents=True)
    sample = REPO_ROOT / "tests" / "samples" / "dmesg_xid79_oom.txt"
    (tmp_path / "ev" / "sub" / "dmesg.txt").write_text(sample.read_text())
    a = json.loads(run_hangdoctor("analyze", str(tmp_path / "ev"), "--json", "-q").stdout)
    assert "gpu-fault" in cause_ids(a)


@pytest.mark.parametrize("kind", ["empty", "random", "elf"])
def test_unrecognised_input_is_nothing_recognised_exit_2(tmp_path: Path, kind: str):
    f = tmp_path / f"{kind}.dat"
    if kind == "empty":
        f.write_bytes(b"")
    elif kind == "random":
        f.write_bytes(os.urandom(8192))
    else:
        f.write_bytes(Path(sys.executable).resolve().read_bytes()[:65536])
    proc = run_hangdoctor("analyze", str(f))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"hangdoctor: nothing recognised in {f} ("), proc.stderr


def test_unrecognised_input_among_others_is_left_out_with_a_warning(tmp_path: Path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(4096))
    sample = REPO_ROOT / "tests" / "samples" / "dmesg_xid79_oom.txt"
    proc = run_hangdoctor("analyze", str(junk), str(sample), "--json", "-q")
    assert "gpu-fault" in cause_ids(json.loads(proc.stdout))
    assert f"warning: nothing recognised in {junk}; left out" in proc.stderr


# ------------------------------------------------------------------ 7. refused before the window


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "x.txt"], "-o x.txt: unknown report format '.txt'"),
    (["-o", "/nonexistent-dir/x.html"], "-o /nonexistent-dir/x.html: folder /nonexistent-dir does not exist"),
    (["--save-snapshot", "/nonexistent-dir/s.json"], "--save-snapshot /nonexistent-dir/s.json: folder"),
    (["--log", "/nonexistent.log"], "--log /nonexistent.log does not exist on localhost"),
])  # fmt: skip
def test_bad_arguments_are_refused_before_the_window(tmp_path: Path, args: list[str], message: str):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        proc = run_hangdoctor("diagnose", "localhost", "--pid", str(sleeper.pid), "--window", LONG_WINDOW,
                              *args, cwd=tmp_path)  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ 8. port and url


def test_port_without_pid_diagnoses_the_process_listening_on_it(programs: Programs):
    server, port = programs.start(HTTP_PROGRAM)
    decoy, _ = programs.start(DECOY_PROGRAM, "--model", "vllm")
    a, proc = diagnose_json("--port", port, "--window", "0.3")
    pids = {r["pid"] for r in a["ranks"]}
    assert server.pid in pids and decoy.pid not in pids, (pids, proc.stderr)
    assert f"{server.pid} (listens on port {port})" in proc.stderr


def test_without_port_discovery_would_have_found_the_decoy(programs: Programs):
    """The control of the test above: the decoy is what discovery finds on its own."""
    _decoy, _ = programs.start(DECOY_PROGRAM, "--model", "vllm")
    proc = run_hangdoctor("diagnose", "localhost", "--window", "0.2", "--json", "-q")
    assert str(_decoy.pid) in proc.stderr


def test_watch_url_without_pid_snapshots_the_listener_and_keeps_every_url(
    programs: Programs, tmp_path: Path
):
    healthy, healthy_port = programs.start(HTTP_PROGRAM)
    stuck, stuck_port = programs.start(LOCK_PROGRAM)
    client = socket.create_connection(("127.0.0.1", int(stuck_port)), timeout=5)
    client.sendall(b"GET / HTTP/1.0\r\n\r\n")  # parks the one handler: the port stops answering
    decoy, _ = programs.start(DECOY_PROGRAM, "--model", "vllm")
    try:
        proc = run_hangdoctor(
            "watch", "localhost", "--url", f"http://127.0.0.1:{healthy_port}/health",
            "--url", f"http://127.0.0.1:{stuck_port}/health", "--after", "0", "--interval", "0.5",
            "--once", "--window", "0.3", "--out-dir", str(tmp_path / "out"), timeout_s=150,
        )  # fmt: skip
    finally:
        client.close()
    assert proc.returncode == 0, proc.stderr
    bundles = list((tmp_path / "out").glob("*.tar.gz"))
    assert len(bundles) == 1, proc.stderr  # the second URL failed: had it been dropped, no incident
    with tarfile.open(bundles[0]) as t:
        member = next(m for m in t.getmembers() if m.name.endswith("/snapshot.json"))
        snap = json.loads(t.extractfile(member).read())  # type: ignore[union-attr]
    roots = snap["targets"]["root_pids"]
    assert stuck.pid in roots and healthy.pid in roots and decoy.pid not in roots, roots


# ------------------------------------------------------------------ 9. two trees


def test_two_pid_trees_keep_their_own_findings(run_scenario):
    deadlocked = run_scenario("postload", workers=2)
    healthy = run_scenario("healthy", workers=2)
    a, proc = diagnose_json("--pid", str(deadlocked.launcher_pid), "--pid", str(healthy.launcher_pid),
                            "--window", "0.5")  # fmt: skip
    assert a["verdict"] == "hung" and proc.returncode == 3, a["verdict_reason"]
    assert cause_ids(a)[:1] == ["post-load-deadlock"], a["causes"]
    assert f"tree of pid {deadlocked.launcher_pid}" in a["causes"][0]["summary"]
    trees = {t["root_pid"]: t["verdict"] for t in a["trees"]}
    assert trees == {deadlocked.launcher_pid: "hung", healthy.launcher_pid: "healthy"}


# ------------------------------------------------------------------ 10. wording


def test_one_worker_is_not_all_1_workers(run_scenario):
    info = run_scenario("postload", workers=1)
    a, _ = diagnose_json("--pid", str(info.launcher_pid), "--window", "0.5")
    summary = a["causes"][0]["summary"]
    assert "the one worker's main thread waits" in summary and "all 1" not in summary
    assert {r["pid"] for r in a["ranks"] if r["is_worker"]} == set(info.worker_pids)


MP_LAUNCHER = """
import multiprocessing as mp, sys

def work(q):
    q.get()  # waits for a task that never comes

if __name__ == "__main__":
    q = mp.Queue()
    procs = [mp.Process(target=work, args=(q,)) for _ in range(2)]
    for p in procs:
        p.start()
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(str(p.pid) for p in procs))
    for p in procs:
        p.join()
"""


def test_the_launcher_under_a_wrapper_is_not_a_worker(tmp_path: Path):
    """--pid of a shell script that runs `python launch.py` (a multiprocessing launcher): the
    launcher waits for its children and is not counted with them."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(textwrap.dedent(MP_LAUNCHER))
    pids_file = tmp_path / "pids"
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n{sys.executable} {launcher} {pids_file}\necho done\n")
    script.chmod(0o755)
    shell = subprocess.Popen([str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (pids_file.exists() and pids_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        worker_pids = {int(x) for x in pids_file.read_text().split()}
        time.sleep(0.3)
        a, _ = diagnose_json("--pid", str(shell.pid), "--window", "0.5")
    finally:
        os.killpg(shell.pid, signal.SIGKILL)  # its own session: the shell, launcher, workers
        shell.wait()
    workers = {r["pid"] for r in a["ranks"] if r["is_worker"]}
    assert workers == worker_pids, (workers, worker_pids)
    assert "all 2 workers' main threads wait" in a["causes"][0]["summary"], a["causes"]


def test_torchrun_agent_is_a_launcher_not_an_api_server():
    from hangdoctor.collect.processes import _role_of

    argv = ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node", "2", "train.py"]
    store = [{"ip": "0.0.0.0", "port": 29500, "proto": "tcp"}]
    assert _role_of(100, 100, argv, "torchrun", store, None, True) == "launcher"
    assert _role_of(101, 100, argv, "torchrun", store, None, True) == "launcher"
    # a worker it started keeps its role
    assert _role_of(102, 100, ["python3", "-u", "train.py"], "python3", [], 0, True) == "worker"
    # and a real API server still is one
    assert _role_of(100, 100, ["python3", "-m", "vllm.entrypoints.openai.api_server"], "python3",
                    [{"ip": "0.0.0.0", "port": 8000}], None, False) == "api-server"  # fmt: skip


def test_gloo_job_gets_no_nccl_advice_and_no_gpu_next_command():
    from hangdoctor.triage.analyze import analyze

    snap = json.loads((REPO_ROOT / "tests/fixtures/snapshots/cpu-gloo-desync.json").read_text())
    a = analyze([snap])
    desync = next(c for c in a["causes"] if c["id"] == "nccl-desync")
    assert not any("NCCL" in s.split("#")[0] for s in desync["next_steps"]), desync["next_steps"]
    assert any(s.startswith("TORCH_DISTRIBUTED_DEBUG=DETAIL") for s in desync["next_steps"])
    assert "CUDA/NCCL" not in a["next_command"]
    gpu = json.loads((REPO_ROOT / "tests/fixtures/snapshots/gpu-peer-never-joins.json").read_text())
    g = analyze([gpu])
    steps = next(c for c in g["causes"] if c["id"] == "nccl-desync")["next_steps"]
    assert any(s.startswith("TORCH_NCCL_TRACE_BUFFER_SIZE") for s in steps)


def test_next_command_after_native_is_not_native_again(programs: Programs, tmp_path: Path):
    p, _ = programs.start(FIFO_PROGRAM, str(tmp_path / "wedged"), "open")
    plain, _ = diagnose_json("--pid", str(p.pid), "--window", "0.3")
    native, _ = diagnose_json("--pid", str(p.pid), "--window", "0.3", "--native")
    assert "--native" in plain["next_command"] and "C call" in plain["next_command"]
    assert "--native" not in native["next_command"], native["next_command"]
    assert native["next_command"] == native["causes"][0]["next_steps"][0]


def test_reports_say_host_memory_and_name_pids_without_ranks(tmp_path: Path):
    from hangdoctor.report.markdown import render_markdown
    from hangdoctor.report.render import render_html
    from hangdoctor.triage.analyze import analyze

    snap = json.loads((REPO_ROOT / "tests/fixtures/snapshots/cpu-postload.json").read_text())
    for p in snap["processes"]:
        p["rank"] = None
    a = analyze([snap])
    assert not a["gpus"] and a["host_facts"]
    html = render_html(a)
    assert "<h2>Host memory</h2>" in html and "<h2>GPUs" not in html
    assert "rank –" not in html and re.search(r"<b>\d+ ×</b> pids? \d+", html)
    md = render_markdown(a)
    assert "× ranks –" not in md and re.search(r"\d+ × pids? \d+", md)
    from hangdoctor.knowledge.causes import title

    assert "engine" not in title("frontend-hang")


# ------------------------------------------------------------------ 1, 11. the terminal


def test_summary_uses_the_terminal_width_and_never_cuts_the_next_command(
    programs: Programs, tmp_path: Path
):
    p, _ = programs.start(FIFO_PROGRAM, str(tmp_path / "wedged"), "open")
    for cols in (80, 160):
        out = ANSI.sub("", in_pty(["diagnose", "localhost", "--pid", str(p.pid), "--window", "0.3",
                                   "--save-snapshot", str(tmp_path / "a-rather-long-folder-name-for-the-snapshot-file.json")],
                                  cols=cols))  # fmt: skip
        # the progress line is redrawn with \r; a path (snapshot: ...) is never cut: it is copied
        lines = [
            x for x in re.split(r"[\r\n]", out) if x.strip() and not x.startswith("snapshot: ")
        ]
        assert all(len(x) <= cols for x in lines), out
        assert any(x.startswith("hangdoctor: HUNG") for x in lines)
        # the next command, joined again from its ` \` continuations, is whole
        at = next(i for i, x in enumerate(lines) if x.startswith("  next: "))
        joined = " ".join(x.strip().rstrip("\\").strip() for x in lines[at : at + 4])
        assert f"diagnose localhost --pid {p.pid} --native -o report.html" in joined, out
    wide = ANSI.sub(
        "",
        in_pty(
            ["diagnose", "localhost", "--pid", str(p.pid), "--window", "0.3", "--wide"], cols=80
        ),
    )
    assert any(len(x) > 80 for x in wide.split("\n")), wide
    # COLUMNS beats the terminal's own size, as shells and tmux set it
    narrow = ANSI.sub("", in_pty(["diagnose", "localhost", "--pid", str(p.pid), "--window", "0.3"],
                                 env={"COLUMNS": "60"}, cols=200))  # fmt: skip
    assert all(len(x) <= 60 for x in re.split(r"[\r\n]", narrow) if x.strip()), narrow


def test_summary_is_not_cut_when_stdout_is_not_a_terminal(programs: Programs, tmp_path: Path):
    p, _ = programs.start(FIFO_PROGRAM, str(tmp_path / "wedged"), "open")
    proc = run_hangdoctor("diagnose", "localhost", "--pid", str(p.pid), "--window", "0.3",
                          env=dict(os.environ, COLUMNS="60"))  # fmt: skip
    assert "…" not in proc.stdout and "cut at" not in proc.stdout
    assert (
        "it waits until something opens the other end, as a read from a wedged mount waits"
        in proc.stdout
    )
    nxt = [x for x in proc.stdout.splitlines() if x.startswith("  next: ")]
    assert len(nxt) == 1 and nxt[0].endswith(
        "native frames show the C call each thread is blocked in"
    )
    assert "\x1b" not in proc.stdout and "\r" not in proc.stderr  # no colour, no progress


def test_progress_on_a_terminal_and_colour_rules(programs: Programs, tmp_path: Path):
    p, _ = programs.start(FIFO_PROGRAM, str(tmp_path / "wedged"), "open")
    args = ["diagnose", "localhost", "--pid", str(p.pid), "--window", "1"]
    out = in_pty(args, env={"NO_COLOR": ""})
    assert "hangdoctor: localhost: watching for 1 s" in out  # the progress line
    assert "\x1b[1;31mHUNG" in out  # colour on a terminal
    assert "\x1b[1;31m" not in in_pty(args, env={"NO_COLOR": "1"})
    assert "\x1b[1;31mHUNG" in in_pty(args + ["--color", "always"], env={"NO_COLOR": "1"})
    assert "\x1b[1;31m" not in in_pty(args + ["--color", "never"])
    piped = run_hangdoctor(*args, "--color", "always")
    assert "\x1b[1;31mHUNG" in piped.stdout and "watching" not in piped.stderr


def test_help_texts_and_metavars():
    diag = run_hangdoctor("diagnose", "--help").stdout
    assert "--pid PID" in diag and "--pid TEXT" not in diag
    rep = run_hangdoctor("report", "--help").stdout
    assert "report file; the format follows the suffix" in rep
    assert "report format when -o's suffix does not say" in rep
    assert "also load the checks in this folder" in rep
    assert "Without -o the report goes to stdout" in rep


def test_snapshot_still_writes_its_bundle_with_a_missing_log(tmp_path: Path):
    """The pre-kill bundle is the exception to refusing early (README): a hook must get it."""
    sleeper = subprocess.Popen(["sleep", "60"])
    out = tmp_path / "b.tar.gz"
    try:
        proc = run_hangdoctor("snapshot", "localhost", "--pid", str(sleeper.pid), "--window", "0.2",
                              "--log", "/nonexistent.log", "-o", str(out))  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode != 2 and out.exists(), proc.stderr
    with tarfile.open(out) as t:
        member = next(m for m in t.getmembers() if m.name.endswith("/snapshot.json"))
        snap = json.loads(t.extractfile(member).read())  # type: ignore[union-attr]
    log = next(m for m in snap["manifest"] if m["source"] == "log")
    assert log["status"] == "failed" and "No such file" in log["detail"]


def test_proc_locks_lines_are_parsed_with_waiters_and_ofd_locks():
    from hangdoctor.collect.locks import parse_proc_locks

    text = (
        "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 4343 fe:00:2146513 0 EOF\n"
        "2: -> FLOCK  ADVISORY  WRITE 4444 fe:00:2146513 0 EOF\n"
        "3: OFDLCK ADVISORY  READ -1 00:06:3 0 EOF\n"
        "garbage\n"
    )
    locks = parse_proc_locks(text)
    assert [(x["id"], x["waiting"], x["kind"], x["pid"], x["inode"]) for x in locks] == [
        (1, False, "POSIX", 4242, 1234),
        (2, False, "FLOCK", 4343, 2146513),
        (2, True, "FLOCK", 4444, 2146513),
        (3, False, "OFDLCK", None, 3),
    ]
    assert locks[1]["dev"] == "fe:00"
