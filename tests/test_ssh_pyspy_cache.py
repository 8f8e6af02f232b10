"""py-spy kept on the remote between runs, over a real sshd: the first run without py-spy
uploads it and keeps a copy in the user's private cache (${XDG_CACHE_HOME:-~/.cache}/hangdoctor,
mode 700, named by its sha256); the next run uses it in one round trip, after checking its hash;
a copy whose bytes changed, or a cache folder others can write to, is not used (uploaded again).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path

import pytest

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.reach.pyspy_binary import find_local_pyspy
from hangdoctor.reach.ssh import SshTarget
from tests import sshd_fixture

sshd = sshd_fixture.sshd
hung_process = sshd_fixture.hung_process
pytestmark = [pytest.mark.ssh]
BARE_PATH = "/usr/bin:/bin"  # no py-spy on the remote PATH


def run_once(sshd, pid: int, cache: Path) -> tuple[SshTarget, dict]:
    target = SshTarget(sshd.alias, config_path=sshd.ssh_config,
                       remote_env={"PATH": BARE_PATH, "XDG_CACHE_HOME": str(cache)})  # fmt: skip
    snap = asyncio.run(target.collect(ProbeConfig(root_pids=[pid], window_s=0.3, deadline_s=20)))
    return target, snap


def frames(snap: dict, pid: int) -> str:
    entry = (snap.get("stacks") or {}).get(str(pid)) or {}
    return repr(entry)


def test_the_second_run_uses_the_kept_copy(sshd, hung_process, tmp_path: Path) -> None:
    local = find_local_pyspy(None)
    if not local:
        pytest.skip("no py-spy here to upload")
    digest = hashlib.sha256(Path(local).read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    first, snap = run_once(sshd, hung_process.pid, cache)
    assert "upload" in first.last_run.timings_s, first.last_run.timings_s
    kept = cache / "hangdoctor" / f"py-spy-{digest}"
    assert kept.is_file() and hashlib.sha256(kept.read_bytes()).hexdigest() == digest
    assert stat.S_IMODE((cache / "hangdoctor").stat().st_mode) == 0o700
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    assert "Connection._recv" in frames(snap, hung_process.pid)
    second, snap = run_once(sshd, hung_process.pid, cache)
    run = second.last_run
    assert run.pyspy == str(kept) and "upload" not in run.timings_s and "check" not in run.timings_s
    assert any("per-user cache" in n for n in run.notes), run.notes
    assert "Connection._recv" in frames(snap, hung_process.pid)


def test_a_changed_copy_is_not_used(sshd, hung_process, tmp_path: Path) -> None:
    local = find_local_pyspy(None)
    if not local:
        pytest.skip("no py-spy here to upload")
    cache = tmp_path / "cache"
    run_once(sshd, hung_process.pid, cache)
    kept = next((cache / "hangdoctor").glob("py-spy-*"))
    data = bytearray(kept.read_bytes())
    data[-1] ^= 0xFF  # one byte changed: its hash no longer matches its name
    kept.write_bytes(bytes(data))
    again, _ = run_once(sshd, hung_process.pid, cache)
    assert "upload" in again.last_run.timings_s, again.last_run.timings_s
    assert (
        hashlib.sha256(kept.read_bytes()).digest() != hashlib.sha256(bytes(data)).digest()
    )  # replaced


def test_a_cache_others_can_write_is_not_used(sshd, hung_process, tmp_path: Path) -> None:
    local = find_local_pyspy(None)
    if not local:
        pytest.skip("no py-spy here to upload")
    cache = tmp_path / "cache"
    run_once(sshd, hung_process.pid, cache)
    folder = cache / "hangdoctor"
    os.chmod(folder, 0o777)  # as if anyone could have put a binary there
    again, _ = run_once(sshd, hung_process.pid, cache)
    assert "upload" in again.last_run.timings_s, again.last_run.timings_s
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # made private again when it was kept
