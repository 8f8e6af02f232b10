"""Every filesystem access to a path the target names happens in a disposable child with a
deadline (red-team round 2, class 2: R05), against a real wedged FUSE mount
(tests/faults/fuse_wedge.py) planted under each kind of path the probe touches:

- the open files of the lock scan (``stat`` of /proc/PID/fd/N);
- the NCCL library a process mapped (``realpath`` and the dist-info ``listdir``);
- the Flight Recorder dump folders its environment names (``listdir``, ``open``);
- a container's /dev/shm (``statvfs``, ``listdir``);
- the server's log (``--log`` and its stdout; round 1, tests/test_redteam.py F6).

The reads run in a child Python (the same code as the probe) so that, before the fix, the test
itself was not the process left in D state; the mount is then aborted, which frees every waiter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults import fuse_wedge
from tests.faults.helpers import REPO_ROOT

PROBE_EACH = r"""
import json, os, sys, time
from hangdoctor.collect import container, locks, nccl_sources
wedge, fake_proc, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
def timed(name, fn):
    t0 = time.monotonic()
    try:
        value = fn()
    except Exception as exc:
        value = "raised %s" % exc
    out[name] = {"s": round(time.monotonic() - t0, 2), "value": repr(value)[:200]}
    sys.stdout.write(json.dumps({name: out[name]}) + "\n")
    sys.stdout.flush()
timed("lock-scan-stat", lambda: locks._open_files(pid, fake_proc))
timed("nccl-realpath", lambda: nccl_sources.nccl_version(wedge + "/site/nvidia/nccl/lib/libnccl.so.2"))
timed("fr-listdir", lambda: nccl_sources.find_fr_dumps([wedge + "/fr/nccl_trace_rank_"]))
timed("fr-read", lambda: nccl_sources.read_fr_dump(wedge + "/fr/nccl_trace_rank_0"))
timed("container-shm", lambda: container.shm_facts(pid, fake_proc))
"""


@pytest.fixture
def wedge(tmp_path: Path) -> Path:
    why = fuse_wedge.why_unavailable()
    if why:
        pytest.skip(why)
    d = tmp_path / "wedge"
    d.mkdir()
    return d


def test_r05_a_wedged_mount_under_every_target_named_path_keeps_the_deadline(
        wedge: Path, tmp_path: Path) -> None:
    """Before: the first access (the lock scan's stat) stuck in D state and the script never
    finished (killed here after 60 s). After: each access gives up after its child's timeout
    (about 2 s), with an error, and the next one runs."""
    pid = 4242
    fake_proc = tmp_path / "proc"
    fd_dir = fake_proc / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    # the magic link of an open file on the hung mount: readlink answers, stat follows it
    os.symlink(str(wedge / "held.lock"), fd_dir / "3")
    shm = fake_proc / str(pid) / "root" / "dev" / "shm"
    shm.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with fuse_wedge.wedged_mount(str(wedge)), fuse_wedge.wedged_mount(str(shm)):
        t0 = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", PROBE_EACH, str(wedge), str(fake_proc),
                                  str(pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = "", ""
        wall = time.monotonic() - t0
    results = {}
    for line in out.splitlines():
        results.update(json.loads(line))
    print("FIGURES r05:", json.dumps(results), f"wall {wall:.1f} s")
    assert set(results) == {"lock-scan-stat", "nccl-realpath", "fr-listdir", "fr-read",
                            "container-shm"}, (results, err[-2000:])
    for name, r in results.items():
        assert r["s"] < 10, (name, r)
    assert results["lock-scan-stat"]["value"] == "[]"
    assert results["nccl-realpath"]["value"] == "(None, None)"
    assert results["fr-listdir"]["value"] == "[]"
    assert "not read" in results["fr-read"]["value"] or "unreadable" in results["fr-read"]["value"]
    assert "error" in results["container-shm"]["value"]


def test_target_fs_keeps_what_answered_before_a_hang(wedge: Path) -> None:
    """Answers that came before the hung operation are kept; the rest say timeout."""
    from hangdoctor.collect import target_fs

    with fuse_wedge.wedged_mount(str(wedge)):
        t0 = time.monotonic()
        res = target_fs.run([{"op": "stat", "path": "/"},
                             {"op": "listdir", "path": str(wedge)},
                             {"op": "stat", "path": "/tmp"}], 1.5)
        wall = time.monotonic() - t0
    assert res[0].get("dir") is True
    assert res[1] == {"timeout": True} and res[2] == {"timeout": True}
    assert wall < 5
