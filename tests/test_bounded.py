"""Bounded decoding (red-team round 2, class 4: R03, R04, R09, R10, R16, L4): every reader has
a byte cap and a cap on what decoding builds, and one line reader tolerates any length. Each
attack runs the real CLI in a child whose peak RSS is measured (the budget is 512 MiB)."""

from __future__ import annotations

import io
import json
import os
import resource  # noqa: F401  (the measuring child uses it)
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from hangdoctor import bounded
from tests.faults.helpers import REPO_ROOT

RSS_BUDGET_MIB = 512


# runs the CLI and reports its own peak RSS: RUSAGE_CHILDREN of a process with one child
_MEASURE = (
    "import resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL)\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write('\\nHD_PEAK_RSS_KIB=%d\\n' % rss)\n"
    "sys.exit(p.returncode)\n"
)


def _cli(*args: str, timeout_s: float = 240) -> tuple[subprocess.CompletedProcess, float, float]:
    """(completed, wall s, peak RSS MiB of the CLI process)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-m", "hangdoctor",
                               *args], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hangdoctor {' '.join(args)} still running after {timeout_s:.0f} s")
    wall = time.monotonic() - t0
    err, _, tail = proc.stderr.rpartition("\nHD_PEAK_RSS_KIB=")
    rss = int(tail.strip() or 0) / 1024
    assert "Traceback" not in err, err[-2000:]
    print(f"FIGURES {args[0]} {args[1][:40]}: rc {proc.returncode}, {wall:.1f} s, "
          f"peak RSS {rss:.0f} MiB")
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, err), wall, rss


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    path.write_bytes(buf.getvalue())


def test_r09_a_small_archive_of_dense_members_is_refused_before_decoding(tmp_path: Path) -> None:
    """Before: a 48 KB .tar.gz given to `report` took 2.4 GB and 17 s (members up to 512 MiB
    read and decoded; every member of one name read). After: the first member of a name only,
    its value count checked before decoding: exit 2, one line."""
    dense = b'{"schema_version":1,"x":[' + b"1," * (40 << 20) + b"1]}"
    bomb = tmp_path / "bundle.tar.gz"
    _tar(bomb, [("b/snapshot.json", dense)] * 3)
    assert bomb.stat().st_size < 1 << 20
    proc, _wall, rss = _cli("report", str(bomb), "-o", str(tmp_path / "r.md"))
    assert proc.returncode == 2, proc.stderr
    assert "JSON values" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert rss < RSS_BUDGET_MIB


def test_r10_a_snapshot_nested_900_deep_is_exit_2(tmp_path: Path) -> None:
    """Before: exit 1 "internal error: RecursionError". After: exit 2, one line."""
    doc: dict = {"schema_version": 1}
    cur = doc
    for _ in range(900):
        cur["x"] = {}
        cur = cur["x"]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(doc))
    for cmd in ("analyze", "report"):
        proc, _w, _r = _cli(cmd, str(path), "-o", str(tmp_path / "r.md"))
        assert proc.returncode == 2 and "nested deeper" in proc.stderr, proc.stderr


def test_r16_dense_json_under_the_byte_cap_is_refused_by_its_value_count() -> None:
    """SSH: 100 MB of dense JSON under the 256 MiB cap was decoded whole (2.6 GB). Now the
    value count is checked in C before decoding."""
    from hangdoctor.reach import ssh

    frame = b'{"schema_version": 1, "x": [' + b"1," * (50 << 20) + b"1]}\n"
    t0 = time.monotonic()
    with pytest.raises(bounded.TooLarge):
        ssh.parse_snapshot(b"banner\n" + frame)
    assert time.monotonic() - t0 < 30
    ok = ssh.parse_snapshot(b'motd\n{"schema_version": 1, "processes": []}\n')
    assert ok == {"schema_version": 1, "processes": []}


def test_every_json_reader_refuses_the_same_dense_document(tmp_path: Path) -> None:
    """The class: the exec pipe, SSH and the snapshot reader share one bounded decoder."""
    from hangdoctor.reach import exec_pipe, ssh
    from hangdoctor.snapshot.io import load_snapshot_text

    dense = '{"schema_version": 1, "x": [' + "[]," * (6 << 20) + "[]]}"
    for read in (lambda: load_snapshot_text(dense, "s"),
                 lambda: ssh.parse_snapshot(dense.encode()),
                 lambda: exec_pipe.parse_snapshot(dense.encode())):
        with pytest.raises(bounded.TooLarge):
            read()


def _script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return p


def test_r03_an_exec_pipe_that_writes_forever_is_cut_at_its_cap(tmp_path: Path) -> None:
    """Before: 5.9 GB of RSS at the default deadline. After: stopped past 128 MiB, one line."""
    forever = _script(tmp_path, "forever.sh", "exec yes " + "A" * 200 + "\n")
    proc, wall, rss = _cli("diagnose", f"via:{forever}", "--no-gpu", "--deadline", "30",
                           "-o", str(tmp_path / "r.md"))
    assert proc.returncode == 4, proc.stderr
    assert "MiB on stdout" in proc.stderr
    assert rss < RSS_BUDGET_MIB
    assert wall < 30 + 15


def test_r04_one_stderr_line_over_64_kib_keeps_the_snapshot(tmp_path: Path) -> None:
    """Before: the snapshot was thrown away at the deadline and an asyncio traceback printed.
    After: the line is cut, the probe's answer is read."""
    longerr = _script(tmp_path, "longerr.sh",
                      "head -c 300000 /dev/zero | tr '\\0' x >&2\necho >&2\nexec \"$@\"\n")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        time.sleep(0.3)
        out = tmp_path / "r.json"
        proc, _w, _r = _cli("diagnose", f"via:{longerr}", "--pid", str(sleeper.pid), "--window",
                            "0", "--no-gpu", "--deadline", "30", "-o", str(out))
        assert proc.returncode not in (2, 4), proc.stderr
        hosts = json.loads(out.read_text())["hosts"]
        assert hosts[0]["status"] == "ok" and sleeper.pid in hosts[0]["root_pids"], hosts[0]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_line_splitter_tolerates_any_length() -> None:
    buf = bytearray()
    lines = bounded.split_lines(buf, b"a" * 100000, 100)
    assert lines == [] and len(buf) == 100
    lines = bounded.split_lines(buf, b"b" * 50000 + b"\nnext\npart", 100)
    assert lines == [b"a" * 100 + b"\n", b"next\n"] and bytes(buf) == b"part"


def test_l4_a_paste_of_repeated_hostile_lines_is_read_in_seconds(tmp_path: Path) -> None:
    """64 MB of ':@' lines took 131 s in analyze; 8 MB took 204 s here before (every line
    through ~90 knowledge patterns). A line seen twice is now matched once."""
    line = ":@" * 200 + "\n"
    paste = tmp_path / "paste.log"
    paste.write_text(line * ((8 << 20) // len(line)))
    proc, wall, rss = _cli("analyze", str(paste), "-o", str(tmp_path / "r.md"))
    assert proc.returncode not in (1, 2), proc.stderr
    assert wall < 60, wall
    assert rss < RSS_BUDGET_MIB


def test_a_short_commands_output_is_capped() -> None:
    """`docker inspect` / `docker logs` / `kubectl get` ran through communicate(), uncapped: a
    runtime or a server that logged one endless line filled memory until the timeout."""
    import asyncio

    from hangdoctor.reach import exec_pipe

    t0 = time.monotonic()
    rc, out, err = asyncio.run(exec_pipe.run_command(["sh", "-c", "yes " + "A" * 100], 60))
    assert len(out) == exec_pipe.MAX_COMMAND_BYTES and rc != 0
    assert time.monotonic() - t0 < 30
    rc, out, err = asyncio.run(exec_pipe.run_command(["sh", "-c", "echo hi; echo e >&2; exit 3"], 10))
    assert (rc, out, err) == (3, b"hi\n", b"e\n")
