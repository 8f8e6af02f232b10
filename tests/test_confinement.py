"""Reads stay inside what the target itself holds (red-team round 2, class 1: R02, R13, R14,
R15), against real processes run as an unprivileged user while hangdoctor runs as root.

The attack is planted in every path by which the server can name a file to read: its stdout
(a deleted file whose name is replaced by a symlink), its stderr, ``--log`` in a folder the
service user owns (a final symlink, a symlinked folder), and each must come back without the
root-only secret.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangdoctor.collect import nccl_sources, target_fs
from tests.faults.helpers import manifest, no_traceback, run_cli

NOBODY = 65534
ROOT_SECRET = "R02rootOnlySecretValue7731"
SLEEPER = (
    "import sys, time\n"
    "print('server ready', flush=True)\n"
    "print('stderr ready', file=sys.stderr, flush=True)\n"
    "time.sleep(120)\n"
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs root to attack")


@pytest.fixture
def arena() -> Iterator[Path]:
    """A folder the unprivileged user owns (as a service user's log folder), and a root-only
    secret outside it."""
    top = Path(tempfile.mkdtemp(prefix="hd-confine-", dir="/tmp"))
    os.chmod(top, 0o755)
    own = top / "svc"
    own.mkdir()
    os.chown(own, NOBODY, NOBODY)
    secret = top / "root-only.txt"
    secret.write_text(f"root:{ROOT_SECRET}:19000:0:99999:7:::\n")
    os.chmod(secret, 0o600)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _server_as_nobody(stdout_path: Path, stderr_path: Path | None = None) -> subprocess.Popen:
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    out = open(stdout_path, "w")
    err = open(stderr_path, "w") if stderr_path else subprocess.DEVNULL
    os.chown(stdout_path, NOBODY, NOBODY)
    if stderr_path:
        os.chown(stderr_path, NOBODY, NOBODY)
    proc = subprocess.Popen([python, "-S", "-c", SLEEPER], stdout=out, stderr=err,
                            stdin=subprocess.DEVNULL, user=NOBODY, group=NOBODY,
                            extra_groups=[], cwd="/")
    out.close()
    if stderr_path:
        err.close()
    end = time.monotonic() + 20
    while time.monotonic() < end and "ready" not in stdout_path.read_text():
        time.sleep(0.05)
    return proc


def _diagnose(pid: int, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    snap_path, report = tmp / "s.json", tmp / "r.md"
    proc, _ = run_cli("diagnose", "localhost", "--pid", str(pid), "--window", "0", "--no-gpu",
                      "--save-snapshot", str(snap_path), "-o", str(report), *extra)
    no_traceback(proc)
    text = snap_path.read_text() + report.read_text() + proc.stdout + proc.stderr
    return proc, json.loads(snap_path.read_text()), text


def _plant_deleted(stream: Path, secret: Path) -> None:
    """The server's file deleted, and '<name> (deleted)' planted as a symlink to the secret:
    readlink(/proc/PID/fd/N) now names the symlink."""
    stream.unlink()
    os.symlink(secret, str(stream) + " (deleted)")


@pytest.mark.parametrize("fd", ["stdout", "stderr"])
def test_r02_a_deleted_stream_with_a_planted_name_is_read_through_the_descriptor(
        arena: Path, tmp_path: Path, fd: str) -> None:
    """Before: the log reader opened the name readlink gave, as root, and followed the planted
    symlink into the root-only file (the secret in the snapshot and the report). After: the file
    the server holds is read through /proc/PID/fd/N: its own lines, never the secret."""
    out, err = arena / "svc" / "out.log", arena / "svc" / "err.log"
    server = _server_as_nobody(out, err)
    try:
        if fd == "stdout":
            _plant_deleted(out, arena / "root-only.txt")
            err.unlink()  # the other stream gone too: the planted one is the only candidate
        else:
            out.unlink()
            _plant_deleted(err, arena / "root-only.txt")
        _proc, snap, text = _diagnose(server.pid, tmp_path)
        assert ROOT_SECRET not in text
        log = snap.get("log") or {}
        # the server's own lines (stdout comes first: its deleted file is still held too)
        assert any("server ready" in ln for ln in log.get("tail") or []), (log, manifest(snap).get("log"))
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("how", ["final-symlink", "folder-symlink"])
def test_r02_a_given_log_is_read_with_the_servers_rights(arena: Path, tmp_path: Path,
                                                         how: str) -> None:
    """``--log`` names a file in the service user's folder, which it turned into a symlink (or
    whose folder it turned into one). Before: root read the secret. After: the read runs as the
    server's user and is refused, with one line saying so."""
    out = arena / "svc" / "out.log"
    server = _server_as_nobody(out)
    try:
        if how == "final-symlink":
            given = arena / "svc" / "app.log"
            os.symlink(arena / "root-only.txt", given)
        else:
            os.symlink(arena, arena / "svc" / "logs")
            given = arena / "svc" / "logs" / "root-only.txt"
        os.lchown(given if how == "final-symlink" else arena / "svc" / "logs", NOBODY, NOBODY)
        proc, snap, text = _diagnose(server.pid, tmp_path, "--log", str(given))
        assert ROOT_SECRET not in text
        entry = manifest(snap)["log"]
        assert entry["status"] == "failed" and "uid 65534" in entry["detail"], entry
    finally:
        server.kill()
        server.wait()


def test_r02_a_given_log_the_server_can_read_is_still_read(arena: Path, tmp_path: Path) -> None:
    """The confinement keeps the ordinary case: --log FILE the server writes is read."""
    out = arena / "svc" / "out.log"
    server = _server_as_nobody(out)
    try:
        _proc, snap, text = _diagnose(server.pid, tmp_path, "--log", str(out))
        assert any("server ready" in ln for ln in snap["log"]["tail"]), manifest(snap)["log"]
    finally:
        server.kill()
        server.wait()


def test_target_fs_drops_to_the_servers_ids(arena: Path) -> None:
    """The child that touches target-named paths reads with the server's rights when given."""
    secret = str(arena / "root-only.txt")
    as_root = target_fs.run([{"op": "stat", "path": secret}], 5.0)
    as_nobody = target_fs.run([{"op": "listdir", "path": str(arena)},
                               {"op": "realpath", "path": secret}], 5.0,
                              (NOBODY, NOBODY, []))
    assert as_root[0]["reg"] is True
    assert "root-only.txt" in as_nobody[0]["names"]
    ids = target_fs.ids_of(os.getpid())
    assert ids is not None and ids[0] == os.geteuid()


# ---------------------------------------------------------------- R13 RAS connections


def test_r13_ras_goes_only_to_loopback_or_the_targets_own_addresses() -> None:
    """A target's NCCL_RAS_ADDR steered our RAS client to any host:port. Now an address that is
    not loopback nor one of this host's own is refused before any connection."""
    env = {"NCCL_RAS_ADDR": "10.254.254.254:5432"}
    assert nccl_sources.ras_address(env, True) is None
    env = {"NCCL_RAS_ADDR": "203.0.113.9:28028"}
    assert nccl_sources.ras_address(env, True) is None
    assert nccl_sources.ras_address({"NCCL_RAS_ADDR": "127.0.0.1:28100"}, True) == (
        "127.0.0.1", 28100)
    assert nccl_sources.ras_address({}, True) == ("127.0.0.1", 28028)
    own = nccl_sources.local_addresses()
    assert "127.0.0.1" in own


def test_r13_the_ras_reply_is_redacted() -> None:
    """Whatever the RAS server answers is redacted before it is kept."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve() -> None:
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(b"SERVER PROTOCOL 2\n")
        c.recv(100)
        c.sendall(b"ERROR no json\n")
        c.recv(100)
        c.sendall(b"Job summary\nhf_abcdefghijklmnopqrstuvwxyz0123 password=R13leakValue\n")
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    res = nccl_sources.query_ras("127.0.0.1", port, 3.0)
    srv.close()
    blob = json.dumps(res)
    assert "Job summary" in blob
    assert "R13leakValue" not in blob and "hf_abcdefghijkl" not in blob


# ---------------------------------------------------------------- R14 the FR dump pipe


def test_r14_fr_dump_writes_only_to_a_fifo_the_target_created(arena: Path) -> None:
    """--fr-dump wrote b"1\\n" into any regular file the target's environment named. Now only a
    FIFO owned by the target's uid is written to."""
    plain = arena / "victim0.pipe"
    plain.write_text("untouched\n")
    res = nccl_sources.request_fr_dump({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(arena / "victim")},
                                       0, "", owner_uid=NOBODY)
    assert not res["ok"] and "not a FIFO" in res["error"], res
    assert plain.read_text() == "untouched\n"
    fifo = arena / "svc" / "trace0.pipe"
    os.mkfifo(fifo)
    # a FIFO of another user (root here) is not the target's either
    res = nccl_sources.request_fr_dump({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(arena / "svc" / "trace")},
                                       0, "", owner_uid=NOBODY)
    assert not res["ok"] and "not the target's" in res["error"], res
    os.chown(fifo, NOBODY, NOBODY)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        res = nccl_sources.request_fr_dump(
            {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(arena / "svc" / "trace")}, 0, "",
            owner_uid=NOBODY)
        assert res["ok"], res
        assert os.read(reader, 10) == b"1\n"
    finally:
        os.close(reader)


# ---------------------------------------------------------------- R15 analyze FOLDER


def test_r15_analyze_folder_does_not_follow_links_out_of_it(tmp_path: Path) -> None:
    """A ticket archive with ``vllm.log -> ~/.netrc``: before, analyze read the analyst's file.
    Now a link that leaves the folder is skipped, one that stays inside is read."""
    outside = tmp_path / "netrc"
    # not secret-shaped: only the folder rule (not redaction) can keep it out
    outside.write_text("machine x login me R15analystMarker\n")
    ticket = tmp_path / "ticket"
    ticket.mkdir()
    (ticket / "inside.log").write_text("INFO engine started\nRuntimeError: CUDA error\n")
    os.symlink(outside, ticket / "vllm.log")
    os.symlink(tmp_path, ticket / "up")  # a folder link out of the ticket
    os.symlink("inside.log", ticket / "again.log")  # stays inside: fine
    proc, _ = run_cli("analyze", str(ticket), "--json")
    no_traceback(proc)
    assert "R15analystMarker" not in proc.stdout + proc.stderr
    assert "netrc" not in proc.stdout
    assert proc.returncode not in (2, 4), proc.stderr
    assert "inside.log" in proc.stdout


def test_r02_a_dockerd_of_another_user_names_no_data_root(arena: Path) -> None:
    """Any user can start a process named dockerd with a --data-root of their own, whose
    config.v2.json names a LogPath read as root. Only root's dockerd is believed."""
    from hangdoctor.collect import container_runtime

    evil_root = arena / "svc" / "evil-root"
    link = arena / "bin"
    link.mkdir()
    link.chmod(0o755)
    os.symlink("/bin/sh", link / "dockerd")  # comm is the executable's name: "dockerd"
    proc = subprocess.Popen([str(link / "dockerd"), "-c", "sleep 60; :", "--data-root",
                             str(evil_root)],
                            user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.3)
        assert proc.poll() is None
        assert open(f"/proc/{proc.pid}/comm").read() == "dockerd\n"
        assert str(evil_root) not in container_runtime.docker_roots()
    finally:
        os.killpg(proc.pid, 9)  # its own group: the shell and its sleep
        proc.wait()
