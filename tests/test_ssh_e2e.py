"""End to end over a real OpenSSH server on loopback, with the real probe bundle."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pytest

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError
from hangdoctor.reach.multi import collect_all
from hangdoctor.reach.ssh import TMPDIR_PREFIX, SshTarget
from tests import sshd_fixture
from tests.sshd_fixture import HungProcess, SshdServer, free_port

# The shared fixtures (tests/conftest.py is not ours to extend).
sshd = sshd_fixture.sshd
hung_process = sshd_fixture.hung_process

pytestmark = pytest.mark.ssh

# No py-spy and no pyenv shims on this PATH: the remote python is the system one.
BARE_PATH = "/usr/bin:/bin"


def _config(pid: int, window_s: float = 0.5) -> ProbeConfig:
    return ProbeConfig(root_pids=[pid], window_s=window_s, deadline_s=20.0, nvml=False)


def _frames(snapshot: dict, pid: int) -> list[str]:
    stack = snapshot["stacks"][str(pid)]
    assert stack["status"] == "ok", stack
    names = []
    for sample in stack["samples"]:
        for thread in sample["threads"]:
            names += [f["name"] for f in thread["frames"]]
    return names


def _manifest(snapshot: dict, source: str) -> dict:
    entries = [m for m in snapshot["manifest"] if m["source"] == source]
    assert entries, f"no {source} entry in {snapshot['manifest']}"
    return entries[0]


def _pyspy_tmpdirs() -> set[str]:
    base = os.environ.get("TMPDIR", "/tmp")
    return set(glob.glob(os.path.join(base, TMPDIR_PREFIX + "*")))


def test_alias_from_ssh_config_diagnoses_a_hung_process(
    sshd: SshdServer, hung_process: HungProcess
) -> None:
    target = SshTarget(sshd.alias, config_path=sshd.ssh_config)
    snapshot = asyncio.run(target.collect(_config(hung_process.pid)))
    assert snapshot["schema_version"] == 1
    assert snapshot["host"]["name"] == sshd.alias
    pids = [p["pid"] for p in snapshot["processes"]]
    assert hung_process.pid in pids
    # Parked in multiprocessing's Connection.recv on a pipe nobody writes to.
    assert "Connection._recv" in _frames(snapshot, hung_process.pid)
    ssh = _manifest(snapshot, "ssh")
    assert ssh["status"] == "ok" and ssh["detail"].startswith("connect ")
    assert "probe" in ssh["detail"]
    # one round trip (python and py-spy on the remote PATH): uid and arch come from the probe
    assert "upload" not in target.last_run.timings_s and "check" not in target.last_run.timings_s
    assert f"uid {os.geteuid()}, {os.uname().machine}" in ssh["detail"], ssh["detail"]


def test_proxyjump_from_ssh_config(sshd: SshdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A spy on asyncssh: the final connection must be set up through a tunnel.
    tunnels: list[object] = []
    original = asyncssh.SSHClientConnection.set_tunnel

    def spy(self: asyncssh.SSHClientConnection, tunnel: object) -> None:
        tunnels.append(tunnel)
        original(self, tunnel)

    monkeypatch.setattr(asyncssh.SSHClientConnection, "set_tunnel", spy)
    target = SshTarget(sshd.alias + "-jump", config_path=sshd.ssh_config)
    snapshot = asyncio.run(target.collect(ProbeConfig(root_pids=[os.getpid()], window_s=0.1)))
    assert os.getpid() in [p["pid"] for p in snapshot["processes"]]
    assert [t for t in tunnels if isinstance(t, asyncssh.SSHClientConnection)], tunnels


def test_user_host_port_with_explicit_key_and_known_hosts(
    sshd: SshdServer, hung_process: HungProcess
) -> None:
    target = SshTarget(
        sshd.spec, identity=[sshd.key_path], known_hosts=sshd.known_hosts, config_path=[]
    )
    snapshot = asyncio.run(target.collect(_config(hung_process.pid)))
    assert hung_process.pid in [p["pid"] for p in snapshot["processes"]]


def test_ssh_options_style(sshd: SshdServer, hung_process: HungProcess) -> None:
    target = SshTarget(
        "127.0.0.1",
        ssh_options=[
            f"-o Port={sshd.port}",
            f"User={sshd.user}",
            f"IdentityFile={sshd.key_path}",
            f"UserKnownHostsFile={sshd.known_hosts}",
            "ConnectTimeout=5",
            "StrictHostKeyChecking=yes",
        ],
        config_path=[],
    )
    assert target.connect_timeout_s == 5.0
    snapshot = asyncio.run(target.collect(_config(hung_process.pid)))
    assert hung_process.pid in [p["pid"] for p in snapshot["processes"]]


def test_remote_without_pyspy_gets_it_uploaded_and_removed(
    sshd: SshdServer, hung_process: HungProcess, tmp_path: Path
) -> None:
    before = _pyspy_tmpdirs()
    # an empty py-spy cache of its own: the upload path, whatever earlier runs kept
    target = SshTarget(sshd.alias, config_path=sshd.ssh_config,
                       remote_env={"PATH": BARE_PATH, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    snapshot = asyncio.run(target.collect(_config(hung_process.pid)))
    run = target.last_run
    assert run is not None and run.tmpdir and run.tmpdir.startswith("/")
    assert run.pyspy == ""  # the remote PATH had none
    assert run.python == "/usr/bin/python3"
    ssh = _manifest(snapshot, "ssh")
    assert "py-spy uploaded" in ssh["detail"]
    stacks = _manifest(snapshot, "stacks")
    assert run.tmpdir + "/py-spy" in (stacks["detail"] or "")
    assert "Connection._recv" in _frames(snapshot, hung_process.pid)
    # The remote shell's EXIT trap removed the private dir once the probe returned.
    assert not os.path.exists(run.tmpdir)
    assert _pyspy_tmpdirs() == before


def test_arch_mismatch_skips_upload_with_a_note(
    sshd: SshdServer, hung_process: HungProcess, tmp_path: Path
) -> None:
    # An ELF header claiming aarch64 stands in for a py-spy built for another machine.
    fake = tmp_path / "py-spy"
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[18:20] = (183).to_bytes(2, "little")
    fake.write_bytes(bytes(header))
    fake.chmod(0o755)
    before = _pyspy_tmpdirs()
    target = SshTarget(
        sshd.alias,
        config_path=sshd.ssh_config,
        remote_env={"PATH": BARE_PATH},
        local_pyspy=str(fake),
    )
    snapshot = asyncio.run(target.collect(_config(hung_process.pid)))
    notes = " ".join(snapshot["notes"])
    assert f"py-spy not uploaded: remote is {os.uname().machine}, local aarch64" in notes
    assert hung_process.pid in [p["pid"] for p in snapshot["processes"]]
    assert _pyspy_tmpdirs() == before  # no temp dir was made for nothing


def test_remote_python_without_psutil_uses_proc(
    sshd: SshdServer, hung_process: HungProcess, tmp_path: Path
) -> None:
    venv = tmp_path / "bare-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = str(venv / "bin" / "python")
    no_psutil = subprocess.run([python, "-c", "import psutil"], capture_output=True, timeout=30)
    assert no_psutil.returncode != 0
    target = SshTarget(sshd.alias, config_path=sshd.ssh_config, remote_python=python)
    snapshot = asyncio.run(target.collect(_config(hung_process.pid)))
    assert target.last_run is not None and target.last_run.python == python
    processes = _manifest(snapshot, "processes")
    assert "backend proc" in processes["detail"] and "psutil" not in processes["detail"]
    proc = next(p for p in snapshot["processes"] if p["pid"] == hung_process.pid)
    assert proc["status"] == "S"


def test_missing_remote_python_is_one_clear_error(sshd: SshdServer) -> None:
    target = SshTarget(
        sshd.alias, config_path=sshd.ssh_config, remote_python="/nonexistent/python9"
    )
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0.1, deadline_s=5)))
    assert "no /nonexistent/python9 on the remote PATH" in info.value.message
    assert info.value.remedy and "--remote-python" in info.value.remedy


def test_probe_that_prints_no_snapshot_is_an_error_with_stderr(
    sshd: SshdServer, tmp_path: Path
) -> None:
    # A "python" that fails the way a broken interpreter would: stderr and an exit code.
    broken = tmp_path / "python-broken"
    broken.write_text("#!/bin/sh\necho 'SyntaxError: boom' >&2\nexit 3\n")
    broken.chmod(0o755)
    target = SshTarget(sshd.alias, config_path=sshd.ssh_config, remote_python=str(broken))
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0.1, deadline_s=5)))
    assert "remote probe printed no snapshot (exit 3): SyntaxError: boom" in info.value.message


def test_unknown_host_key_remedy_really_works(sshd: SshdServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    target = SshTarget(sshd.spec, identity=[sshd.key_path], known_hosts=str(known), config_path=[])
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0.1, deadline_s=5)))
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", "-"],
        input=sshd.host_key_pub,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.split()[1]
    assert fingerprint in info.value.message
    assert "not in" in info.value.message and "refusing" in info.value.message
    remedy = info.value.remedy or ""
    command = remedy[remedy.index("ssh-keyscan") :]
    assert command.startswith(f"ssh-keyscan -p {sshd.port} -t ssh-ed25519 127.0.0.1 >> ")
    # Following the remedy makes the next connection work.
    subprocess.run(["sh", "-c", command], check=True, timeout=20, capture_output=True)
    snapshot = asyncio.run(target.collect(ProbeConfig(root_pids=[os.getpid()], window_s=0.1)))
    assert os.getpid() in [p["pid"] for p in snapshot["processes"]]


def test_wrong_key_is_an_auth_failure(sshd: SshdServer, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
        check=True,
        timeout=20,
    )
    target = SshTarget(
        sshd.spec, identity=[str(other)], known_hosts=sshd.known_hosts, config_path=[]
    )
    start = time.monotonic()
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(ProbeConfig(window_s=0.1, deadline_s=5)))
    assert time.monotonic() - start < 5
    assert info.value.message.startswith(f"{sshd.spec}: authentication failed for ")
    assert str(other) in info.value.message


def test_four_hosts_at_once(sshd: SshdServer, hung_process: HungProcess) -> None:
    targets = [
        SshTarget(sshd.alias, name=f"{sshd.alias}#{i}", config_path=sshd.ssh_config)
        for i in range(4)
    ]
    start = time.monotonic()
    results = asyncio.run(collect_all(targets, lambda t: _config(hung_process.pid), deadline_s=30))
    elapsed = time.monotonic() - start
    assert [r.name for r in results] == [t.name for t in targets]
    for result in results:
        assert result.error is None, result.error
        assert result.snapshot is not None
        assert result.snapshot["host"]["name"] == result.name
        assert hung_process.pid in [p["pid"] for p in result.snapshot["processes"]]
    # Concurrent, not one after another: four 0.5 s windows take well under 4 x one host.
    one = max(r.duration_s for r in results)
    assert elapsed < one + 1.5


def test_one_good_one_dead_host(sshd: SshdServer, hung_process: HungProcess) -> None:
    dead_port = free_port()
    good = SshTarget(sshd.alias, config_path=sshd.ssh_config)
    dead = SshTarget(
        f"{sshd.user}@127.0.0.1:{dead_port}", known_hosts=sshd.known_hosts, config_path=[]
    )
    results = asyncio.run(collect_all([good, dead], lambda t: _config(hung_process.pid), 30))
    assert results[0].snapshot is not None and results[0].error is None
    assert results[1].snapshot is None
    assert results[1].error == f"{dead.name}: connection refused by 127.0.0.1:{dead_port}"
    assert results[1].remedy


def test_uploaded_pyspy_is_removed_when_the_probe_hangs(sshd: SshdServer, tmp_path: Path) -> None:
    # A "python" that hangs past the deadline (and ends on its own a little later).
    hanging = tmp_path / "python-hangs"
    hanging.write_text("#!/bin/sh\nsleep 8\n")
    hanging.chmod(0o755)
    before = _pyspy_tmpdirs()
    target = SshTarget(
        sshd.alias,
        config_path=sshd.ssh_config,
        remote_python=str(hanging),
        remote_env={"PATH": BARE_PATH, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        connect_timeout_s=2.0,
        margin_s=0.5,
    )
    config = ProbeConfig(window_s=0.1, deadline_s=1.0)
    start = time.monotonic()
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(config))
    assert time.monotonic() - start < target.total_deadline_s(config) + 2
    assert "stopped answering after" in info.value.message
    assert "running the probe" in info.value.message
    run = target.last_run
    assert run is not None and run.tmpdir
    assert not os.path.exists(run.tmpdir)  # removed by the cleanup command, not left behind
    assert _pyspy_tmpdirs() == before


def test_the_connection_acknowledges_each_server_packet_at_once(sshd: SshdServer) -> None:
    """sshd's small packets wait on our acknowledgement (Nagle on its side, delayed ACK on
    ours: up to 40 ms each time). From the first packet on, every read of the connection sets
    TCP_QUICKACK, which sends the pending acknowledgement now; the data still arrives whole."""
    import socket

    from hangdoctor.reach import sshconnect

    quickacks: list[int] = []
    reads: list[int] = []
    original = sshconnect.ack_each_read

    def spying(conn: asyncssh.SSHClientConnection) -> None:
        sock = conn.get_extra_info("socket")
        assert sock is not None and sock.family == socket.AF_INET
        inner = conn.data_received

        def counting(data: bytes, datatype: object = None) -> None:
            reads.append(len(data))
            inner(data) if datatype is None else inner(data, datatype)

        conn.data_received = counting  # under the wrapper: reads it passes on
        real_setsockopt = sock.setsockopt

        class Sock:  # the wrapper's view of the socket: count TCP_QUICKACK
            family = sock.family

            def setsockopt(self, level: int, opt: int, value: int) -> None:
                if level == socket.IPPROTO_TCP and opt == socket.TCP_QUICKACK:
                    quickacks.append(value)
                real_setsockopt(level, opt, value)

        conn.get_extra_info = lambda name, default=None: Sock() if name == "socket" else default
        original(conn)

    async def go() -> bytes:
        target = SshTarget(sshd.alias, config_path=sshd.ssh_config)
        sshconnect.ack_each_read = spying
        try:
            conn = await target._connect(target._resolve(), [])
        finally:
            sshconnect.ack_each_read = original
        async with conn:
            result = await conn.run("printf hello", encoding=None)
        return result.stdout

    assert asyncio.run(go()) == b"hello"
    assert reads and len(quickacks) == len(reads) and set(quickacks) == {1}


def test_acknowledging_at_once_leaves_a_connection_without_a_tcp_socket_alone() -> None:
    """A tunnelled connection (ProxyJump) has no socket of its own: nothing is wrapped."""
    from hangdoctor.reach.sshconnect import ack_each_read

    class Tunnelled:
        def get_extra_info(self, name: str, default: object = None) -> object:
            return None

        def data_received(self, data: bytes) -> None:
            pass

    conn = Tunnelled()
    before = conn.data_received
    ack_each_read(conn)  # type: ignore[arg-type]
    assert conn.data_received == before


def test_aes_gcm_is_preferred_unless_the_user_chose_ciphers(sshd: SshdServer, tmp_path: Path) -> None:
    """With no Ciphers configured, and AES instructions here, the connection agrees on
    AES-GCM (one hardware pass per packet; asyncssh's chacha20-poly1305 takes two: the py-spy
    upload ran 2.3x faster). A Ciphers line in the user's ssh_config is obeyed as written."""
    from hangdoctor.reach import sshconnect

    async def cipher(target: SshTarget) -> tuple[str, object]:
        resolved = target._resolve()
        conn = await target._connect(resolved, [])
        async with conn:
            return conn.get_extra_info("send_cipher"), resolved.encryption_algs

    default_cipher, order = asyncio.run(cipher(SshTarget(sshd.alias, config_path=sshd.ssh_config)))
    if sshconnect._cpu_has_aes():
        assert default_cipher == "aes128-gcm@openssh.com" and order and order[0] == default_cipher
    else:
        assert order is None  # asyncssh's own order, chacha20-poly1305 first
    chosen = tmp_path / "ssh_config"
    chosen.write_text(Path(sshd.ssh_config).read_text()
                      + "\nHost *\n    Ciphers chacha20-poly1305@openssh.com\n")
    user_cipher, order = asyncio.run(cipher(SshTarget(sshd.alias, config_path=str(chosen))))
    assert user_cipher == "chacha20-poly1305@openssh.com" and order is None


def test_the_fast_path_probe_dumps_with_the_py_spy_the_shell_found(
    sshd: SshdServer, hung_process: HungProcess, tmp_path: Path
) -> None:
    """One round trip: the shell looks for py-spy (PATH first) and starts the probe; the probe
    must use that py-spy, not search again in its own order (its Python's scripts dir first)."""
    real = os.path.join(os.path.dirname(sys.executable), "py-spy")  # the probe's own pick
    assert os.access(real, os.X_OK), real
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "py-spy"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    target = SshTarget(sshd.alias, config_path=sshd.ssh_config, remote_python=sys.executable,
                       remote_env={"PATH": f"{wrapper_dir}:{BARE_PATH}"})
    snapshot = asyncio.run(target.collect(_config(hung_process.pid, window_s=0)))
    assert target.last_run.pyspy == str(wrapper)
    assert "check" not in target.last_run.timings_s  # the fast path ran
    assert str(wrapper) in _manifest(snapshot, "stacks")["detail"]
    assert "Connection._recv" in _frames(snapshot, hung_process.pid)
