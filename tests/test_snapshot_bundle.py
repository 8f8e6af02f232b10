"""Issue 6: `hangdoctor snapshot` writes a pre-kill bundle within its deadline, on real processes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from conftest import need

from hangdoctor import bundle

pytestmark = pytest.mark.slow

INTERPRETER_SLACK_S = 1.0
REQUIRED = ("MANIFEST.json", "snapshot.json", "analysis.json", "report.html", "report.md")


def _hd(*args: str, timeout_s: float = 60.0, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "hangdoctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _timed(*args: str, **kw):
    t0 = time.monotonic()
    proc = _hd(*args, **kw)
    return proc, time.monotonic() - t0


def _identity(pid: int) -> tuple[str, str]:
    """(state, start time) of a process from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], fields[19]


def _tar_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _check_manifest_hashes(manifest: dict, files: dict[str, bytes]) -> None:
    listed = {f["path"]: f for f in manifest["files"]}
    assert set(listed) == set(files) - {"MANIFEST.json"}
    for rel, body in files.items():
        if rel == "MANIFEST.json":
            continue
        assert listed[rel]["size_bytes"] == len(body)
        assert listed[rel]["sha256"] == hashlib.sha256(body).hexdigest()


def test_snapshot_of_post_load_deadlock_within_deadline(run_scenario, tmp_path):
    info = run_scenario("postload", workers=4)
    pids = [info.launcher_pid, *info.worker_pids]
    before = {pid: _identity(pid) for pid in pids}
    out = tmp_path / "x.tar.gz"

    proc, wall_s = _timed(
        "snapshot", "localhost", "--pid", str(info.launcher_pid), "--log", info.log,
        "-o", str(out), "--deadline", "10",
    )  # fmt: skip

    assert proc.returncode == 3, proc.stderr  # hung
    assert wall_s < 10 + INTERPRETER_SLACK_S
    assert proc.stderr == ""  # quiet by default
    assert proc.stdout.strip() == str(out)
    # Only the finished archive: no temporary left next to it.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["x.tar.gz"]

    members = _tar_members(out)
    files = {name.split("/", 1)[1]: body for name, body in members.items()}
    assert all(name.startswith("x/") for name in members)  # one top-level folder
    for name in REQUIRED:
        assert name in files, sorted(files)
    for pid in info.worker_pids:
        text = files[f"raw/stacks/{pid}.txt"].decode()
        assert text.startswith(("Process ", "# sample")) and f"Process {pid}: " in text
        assert "Thread " in text and '(idle): "MainThread"' in text
        assert "multiprocessing/connection.py" in text
        assert json.loads(files[f"raw/stacks/{pid}.json"])["status"] == "ok"
    log_lines = Path(info.log).read_text().splitlines()
    assert files["raw/log-tail.txt"].decode().splitlines() == log_lines  # short log: all of it
    for name in ("raw/processes.json", "raw/gpus.json", "raw/http.json", "raw/kernel.txt"):
        assert name in files

    snap = json.loads(files["snapshot.json"])
    assert snap["schema_version"] == 1 and set(map(str, pids)) <= set(snap["stacks"])
    analysis = json.loads(files["analysis.json"])
    assert analysis["verdict"] == "hung" and analysis["causes"][0]["id"] == "post-load-deadlock"
    assert "post-load-deadlock" in files["report.html"].decode()
    assert "post-load-deadlock" in files["report.md"].decode()

    manifest = json.loads(files["MANIFEST.json"])
    _check_manifest_hashes(manifest, files)
    assert manifest["tool"]["name"] == "hangdoctor" and manifest["tool"]["version"]
    assert manifest["command"].startswith("hangdoctor snapshot localhost --pid")
    assert manifest["deadline_hit"] is False and manifest["exit_code"] == 3
    assert manifest["verdict"] == "hung" and manifest["top_cause"] == "post-load-deadlock"
    assert manifest["started_at"] <= manifest["ended_at"]
    assert {s["source"] for s in manifest["sources"]} >= {"processes", "stacks", "log"}

    # The target is untouched: same processes, same state.
    assert {pid: _identity(pid) for pid in pids} == before


def test_one_sample_snapshot_for_a_tight_pre_kill_hook(run_scenario, tmp_path):
    """`--window 0`: one sample of every process, nothing to wait for but the dumps."""
    info = run_scenario("postload", workers=2)
    out = tmp_path / "quick.tar.gz"
    proc, _ = _timed("snapshot", "localhost", "--pid", str(info.launcher_pid), "--log", info.log,
                     "-o", str(out), "--window", "0", "--deadline", "5")
    assert proc.returncode == 3, proc.stderr
    files = {name.split("/", 1)[1]: body for name, body in _tar_members(out).items()}
    snap = json.loads(files["snapshot.json"])
    assert snap["window_s"] == 0
    assert {len(s["samples"]) for s in snap["stacks"].values()} == {1}
    analysis = json.loads(files["analysis.json"])
    assert analysis["causes"][0]["id"] == "post-load-deadlock"
    assert "one live sample" in analysis["verdict_reason"]


def test_folder_bundle_and_json_line_on_a_healthy_server(run_scenario, tmp_path):
    info = run_scenario("healthy", workers=2)
    out = tmp_path / "bundle"

    proc = _hd("snapshot", "localhost", "--pid", str(info.launcher_pid), "-o", str(out),
               "--json", "--window", "1", "--deadline", "10")  # fmt: skip

    assert proc.returncode == 0, proc.stderr  # healthy
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert set(line) == {"verdict", "top_cause", "score", "bundle", "exit_code", "duration_s"}
    assert line["verdict"] == "healthy" and line["exit_code"] == 0
    assert line["bundle"] == str(out) and 0 < line["duration_s"] < 10

    files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for name in REQUIRED:
        assert name in files
    _check_manifest_hashes(json.loads(files["MANIFEST.json"]), files)
    http = json.loads(files["raw/http.json"])
    assert any(h.get("port") == info.port and h.get("ok") for h in http)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder

    # The stack text reads back as py-spy text dumps.
    stack_files = sorted(str(p) for p in (out / "raw" / "stacks").glob("*.txt"))
    back = _hd("analyze", *stack_files, "--json", "-q")
    pids = {r["pid"] for r in json.loads(back.stdout)["ranks"]}
    assert pids == {info.launcher_pid, *info.worker_pids}


def test_unreachable_host_still_writes_a_bundle(tmp_path):
    out = tmp_path / "gone.tar.gz"

    proc, wall_s = _timed("snapshot", "nosuchhost.invalid", "--pid", "1", "-o", str(out),
                          "--deadline", "6", "--json")  # fmt: skip

    assert proc.returncode == 4, proc.stderr  # could not collect
    assert wall_s < 6 + INTERPRETER_SLACK_S
    assert json.loads(proc.stdout)["exit_code"] == 4
    assert len(proc.stderr.strip().splitlines()) == 1 and "nosuchhost.invalid" in proc.stderr
    files = {n.split("/", 1)[1]: b for n, b in _tar_members(out).items()}
    assert {"MANIFEST.json", "analysis.json", "report.html", "report.md"} <= set(files)
    assert "snapshot.json" not in files
    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["exit_code"] == 4 and manifest["hosts"][0]["ok"] is False
    assert "nosuchhost.invalid" in manifest["hosts"][0]["error"]
    _check_manifest_hashes(manifest, files)


class _SilentListener:
    """A TCP port that accepts connections and never says a word (a wedged sshd)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        end = time.monotonic() + 60  # ends on its own
        while not self.done.is_set() and time.monotonic() < end:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                pass

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        for c in [*self.conns, self.sock]:
            c.close()


def test_host_that_never_answers_is_cut_at_the_deadline(tmp_path):
    listener = _SilentListener()
    out = tmp_path / "silent.tar.gz"
    try:
        proc, wall_s = _timed("snapshot", "127.0.0.1", "--ssh-option", f"Port={listener.port}",
                              "--pid", "1", "-o", str(out), "--deadline", "6")  # fmt: skip
    finally:
        listener.close()
    assert proc.returncode == 4, proc.stderr
    assert wall_s < 6 + INTERPRETER_SLACK_S
    manifest = json.loads(_tar_members(out)["silent/MANIFEST.json"])
    assert manifest["deadline_hit"] is True and manifest["hosts"][0]["ok"] is False


def test_dead_pid_gives_the_dead_code_and_a_bundle(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    out = tmp_path / "dead.tgz"
    proc, wall_s = _timed("snapshot", "localhost", "--pid", str(gone.pid), "-o", str(out),
                          "--deadline", "6", "--json")  # fmt: skip
    assert proc.returncode == 6, proc.stderr
    assert wall_s < 6 + INTERPRETER_SLACK_S
    assert json.loads(proc.stdout)["verdict"] == "dead"
    assert "dead/MANIFEST.json" in _tar_members(out)


def _fake_nvml(tmp_path: Path) -> Path:
    need(shutil.which("gcc") is not None, "gcc (to build the fake NVML library)")
    sys.path.insert(0, str(Path(__file__).with_name("fakenvml")))
    try:
        import build as fakenvml_build  # tests/fakenvml/build.py
    finally:
        sys.path.pop(0)
    return fakenvml_build.build(tmp_path / "fakenvml")


def test_wedged_nvml_cannot_hold_the_snapshot_past_its_deadline(run_scenario, tmp_path):
    lib_dir = _fake_nvml(tmp_path)
    info = run_scenario("postload", workers=2)
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_SCENARIO": "block",
           "FAKE_NVML_PIDS": ",".join(map(str, info.worker_pids))}  # fmt: skip
    out = tmp_path / "nvml.tar.gz"

    proc, wall_s = _timed("snapshot", "localhost", "--pid", str(info.launcher_pid), "-o", str(out),
                          "--deadline", "8", env=env)  # fmt: skip

    assert proc.returncode == 3, proc.stderr  # the stacks still tell the story
    assert wall_s < 8 + INTERPRETER_SLACK_S
    files = _tar_members(out)
    manifest = json.loads(files["nvml/MANIFEST.json"])
    assert manifest["deadline_hit"] is True and "localhost:nvml" in manifest["timeouts"]
    assert json.loads(files["nvml/raw/gpus.json"])["status"] == "timeout"


def test_gpu_samples_land_in_raw_gpus_json(run_scenario, tmp_path):
    lib_dir = _fake_nvml(tmp_path)
    info = run_scenario("postload", workers=2)
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_SCENARIO": "h200x2-nccl-wait",
           "FAKE_NVML_PIDS": ",".join(map(str, info.worker_pids))}  # fmt: skip
    out = tmp_path / "gpu"
    proc = _hd("snapshot", "localhost", "--pid", str(info.launcher_pid), "-o", str(out),
               "--window", "1", "--deadline", "8", env=env)  # fmt: skip
    assert proc.returncode in (3, 7), proc.stderr
    gpus = json.loads((out / "raw" / "gpus.json").read_text())
    assert gpus["status"] == "ok" and len(gpus["devices"]) == 2
    assert all(d["samples"] for d in gpus["devices"])


def test_unwritable_output_is_a_usage_error_before_collecting(tmp_path):
    proc, wall_s = _timed("snapshot", "localhost", "--pid", "1",
                          "-o", str(tmp_path / "no" / "such" / "x.tar.gz"))  # fmt: skip
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert wall_s < 5  # refused at once, nothing collected
    assert not any(tmp_path.iterdir())


def test_interrupted_archive_write_leaves_nothing_under_the_final_name(tmp_path):
    target = tmp_path / "b.tar.gz"
    files = {"a.txt": b"x" * 1000, "b.txt": "not bytes"}  # the second file breaks the write
    with pytest.raises((TypeError, AttributeError)):
        bundle.write_tar(files, str(target))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises((TypeError, AttributeError)):
        bundle.write_folder(files, str(tmp_path / "folder"))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_stack_text_is_py_spy_shaped():
    entry = {
        "status": "ok",
        "samples": [{"t": 0.0, "threads": [{
            "os_thread_id": 42, "name": "MainThread", "active": True, "owns_gil": True,
            "frames": [
                {"name": "wait", "short_filename": "threading.py", "line": 320,
                 "locals": [{"name": "timeout", "repr": "None", "arg": True}]},
                {"name": "cuCtxSynchronize", "filename": "libcuda.so.1", "native": True},
            ],
        }]}],
    }  # fmt: skip
    text = bundle.stack_text("42", entry, {"cmdline": ["python3", "serve.py", "--tp", "2"]})
    assert text.splitlines() == [
        "Process 42: python3 serve.py --tp 2",
        "",
        'Thread 42 (active+gil): "MainThread"',
        "    wait (threading.py:320)",
        "        Arguments:",
        "            timeout: None",
        "    cuCtxSynchronize (libcuda.so.1)",
    ]
    failed = bundle.stack_text("7", {"status": "denied", "error": "ptrace not allowed"}, None)
    assert failed.splitlines()[0] == "# py-spy: denied: ptrace not allowed"


def test_output_paths():
    assert bundle.default_bundle_name("root@gpu-1:22", 0.0) == (
        "hangdoctor-snapshot-root_gpu-1_22-19700101T000000Z.tar.gz"
    )
    assert bundle.is_tar_path("a.TGZ") and bundle.is_tar_path("a.tar.gz")
    assert not bundle.is_tar_path("a.tar")
    assert bundle.bundle_root_name("/x/y/snap.tgz") == "snap"
