"""Fault injection: asyncssh's in-process server (and plain sockets) misbehaving on purpose.

Each failure must end within its deadline with its own one-line TargetError.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import asyncssh
import pytest

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError
from hangdoctor.reach.multi import collect_all
from hangdoctor.reach.ssh import SshTarget
from tests.sshd_fixture import free_port

CONNECT_TIMEOUT_S = 1.5
MARGIN_S = 0.5
CONFIG = ProbeConfig(window_s=0.1, deadline_s=1.0)
# What SshTarget.collect may take at most here: connect + probe deadline + margin.
TOTAL_S = CONNECT_TIMEOUT_S + CONFIG.deadline_s + MARGIN_S


class _Server(asyncssh.SSHServer):
    """Public-key auth only; accepts every key when ``accept`` is true, none otherwise."""

    def __init__(self, accept: bool) -> None:
        self.accept = accept

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self.accept

    def password_auth_supported(self) -> bool:
        return False


async def _never_returns(process: asyncssh.SSHServerProcess) -> None:
    await asyncio.sleep(3600)  # the command hangs; the client's deadline must end it


@dataclass
class Keys:
    host: asyncssh.SSHKey
    other_host: asyncssh.SSHKey
    client_path: str
    dir: Path

    def known_hosts(self, port: int, key: Optional[asyncssh.SSHKey]) -> str:
        path = self.dir / f"known_hosts_{port}_{id(key)}"
        line = ""
        if key is not None:
            line = f"[127.0.0.1]:{port} " + key.export_public_key().decode().strip() + "\n"
        path.write_text(line)
        return str(path)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    d = tmp_path_factory.mktemp("ssh-fault-keys")
    client = asyncssh.generate_private_key("ssh-ed25519")
    client_path = d / "id_ed25519"
    client.write_private_key(str(client_path))
    return Keys(
        host=asyncssh.generate_private_key("ssh-ed25519"),
        other_host=asyncssh.generate_private_key("ssh-ed25519"),
        client_path=str(client_path),
        dir=d,
    )


@asynccontextmanager
async def ssh_server(
    keys: Keys, accept: bool = True, handler: Optional[Callable[..., Any]] = None
) -> AsyncIterator[int]:
    """An in-process asyncssh server on 127.0.0.1; yields its port."""
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[keys.host],
        server_factory=lambda: _Server(accept),
        process_factory=handler or _never_returns,
    )
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that completes TCP handshakes (the kernel does) and never says a word."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _target(port: int, keys: Keys, known_key: Optional[asyncssh.SSHKey], **kw: Any) -> SshTarget:
    return SshTarget(
        f"tester@127.0.0.1:{port}",
        identity=[keys.client_path],
        known_hosts=keys.known_hosts(port, known_key),
        config_path=[],
        connect_timeout_s=CONNECT_TIMEOUT_S,
        margin_s=MARGIN_S,
        **kw,
    )


def _fails(coro_factory: Callable[[], Any]) -> tuple[TargetError, float]:
    """Run the scenario; return the TargetError and how long it took."""
    start = time.monotonic()
    with pytest.raises(TargetError) as info:
        asyncio.run(coro_factory())
    return info.value, time.monotonic() - start


def test_auth_failure(keys: Keys) -> None:
    async def scenario() -> None:
        async with ssh_server(keys, accept=False) as port:
            await _target(port, keys, keys.host).collect(CONFIG)

    error, elapsed_s = _fails(scenario)
    assert elapsed_s < TOTAL_S + 2
    assert "authentication failed for tester@127.0.0.1:" in error.message
    assert keys.client_path in error.message
    assert error.remedy and "--identity" in error.remedy


def test_unknown_host_key_is_refused_with_the_fingerprint(keys: Keys) -> None:
    port_box: list[int] = []

    async def scenario() -> None:
        async with ssh_server(keys) as port:
            port_box.append(port)
            await _target(port, keys, None).collect(CONFIG)

    error, elapsed_s = _fails(scenario)
    assert elapsed_s < TOTAL_S + 2
    port = port_box[0]
    fingerprint = keys.host.get_fingerprint("sha256")
    assert f"host key of [127.0.0.1]:{port} is not in " in error.message
    assert f"ssh-ed25519 {fingerprint}" in error.message
    assert error.remedy is not None
    assert f"ssh-keyscan -p {port} -t ssh-ed25519 127.0.0.1 >> " in error.remedy
    assert fingerprint in error.remedy  # verify *this* fingerprint before accepting


def test_changed_host_key_is_refused_loudly(keys: Keys) -> None:
    async def scenario() -> None:
        async with ssh_server(keys) as port:
            await _target(port, keys, keys.other_host).collect(CONFIG)

    error, elapsed_s = _fails(scenario)
    assert elapsed_s < TOTAL_S + 2
    assert "CHANGED" in error.message
    assert keys.other_host.get_fingerprint("sha256") in error.message  # what we knew
    assert keys.host.get_fingerprint("sha256") in error.message  # what it offers now
    assert error.remedy and "ssh-keygen -R '[127.0.0.1]:" in error.remedy


def test_accept_new_takes_an_unknown_key_but_not_a_changed_one(keys: Keys) -> None:
    async def scenario(known: Optional[asyncssh.SSHKey]) -> tuple[str, str]:
        async with ssh_server(keys, handler=_never_returns) as port:
            target = _target(port, keys, known, ssh_options=["StrictHostKeyChecking=accept-new"])
            try:
                await target.collect(CONFIG)
            except TargetError as exc:
                return exc.message, Path(target.known_hosts or "").read_text()
        return "", ""

    # Unknown: accepted and remembered; the hung command then runs into the deadline.
    message, known_hosts = asyncio.run(scenario(None))
    assert "stopped answering" in message
    assert keys.host.export_public_key().decode().split()[1] in known_hosts
    # Changed: still refused.
    message, _ = asyncio.run(scenario(keys.other_host))
    assert "CHANGED" in message


def test_silent_server_times_out_connecting(keys: Keys, silent_port: int) -> None:
    target = _target(silent_port, keys, keys.host)
    start = time.monotonic()
    with pytest.raises(TargetError) as info:
        asyncio.run(target.collect(CONFIG))
    elapsed_s = time.monotonic() - start
    assert CONNECT_TIMEOUT_S - 0.1 < elapsed_s < CONNECT_TIMEOUT_S + 2
    assert info.value.message == (
        f"{target.name}: no SSH answer from 127.0.0.1:{silent_port} within {CONNECT_TIMEOUT_S:g} s"
    )


def test_command_that_never_returns_hits_the_deadline(keys: Keys) -> None:
    async def scenario() -> None:
        async with ssh_server(keys, handler=_never_returns) as port:
            await _target(port, keys, keys.host).collect(CONFIG)

    error, elapsed_s = _fails(scenario)
    assert elapsed_s < TOTAL_S + 2
    assert "stopped answering after" in error.message
    assert "checking the remote" in error.message


def test_refused_port(keys: Keys) -> None:
    port = free_port()
    error, elapsed_s = _fails(lambda: _target(port, keys, keys.host).collect(CONFIG))
    assert elapsed_s < 2
    assert error.message == f"tester@127.0.0.1:{port}: connection refused by 127.0.0.1:{port}"


def test_dns_failure(keys: Keys) -> None:
    target = SshTarget(
        "no-such-host.invalid",
        identity=[keys.client_path],
        config_path=[],
        known_hosts=keys.known_hosts(22, None),
        connect_timeout_s=CONNECT_TIMEOUT_S,
    )
    error, elapsed_s = _fails(lambda: target.collect(CONFIG))
    assert elapsed_s < TOTAL_S + 2
    assert "cannot resolve host name 'no-such-host.invalid'" in error.message


def test_missing_identity_file(keys: Keys, tmp_path: Path) -> None:
    target = SshTarget(
        "127.0.0.1:1",
        identity=[str(tmp_path / "nope")],
        config_path=[],
        known_hosts=keys.known_hosts(1, None),
    )
    error, _ = _fails(lambda: target.collect(CONFIG))
    assert "file not found" in error.message and "nope" in error.message


def test_collect_all_mixes_faults_and_keeps_going(keys: Keys, silent_port: int) -> None:
    async def scenario() -> list:
        async with ssh_server(keys, accept=False) as bad_auth, ssh_server(keys) as hung:
            targets = [
                _target(bad_auth, keys, keys.host),
                _target(hung, keys, keys.host),
                _target(silent_port, keys, keys.host),
                _target(free_port(), keys, keys.host),
            ]
            return await collect_all(targets, lambda t: CONFIG, deadline_s=TOTAL_S + 1)

    start = time.monotonic()
    results = asyncio.run(scenario())
    elapsed_s = time.monotonic() - start
    assert elapsed_s < TOTAL_S + 3  # concurrent: the slowest, not the sum
    assert all(r.snapshot is None and r.error and r.remedy for r in results)
    assert "authentication failed" in results[0].error
    assert "stopped answering" in results[1].error
    assert "no SSH answer" in results[2].error
    assert "connection refused" in results[3].error


def test_collect_all_global_deadline_cuts_a_slow_host(keys: Keys) -> None:
    async def scenario() -> list:
        async with ssh_server(keys) as hung:
            target = _target(hung, keys, keys.host)
            return await collect_all([target], lambda t: CONFIG, deadline_s=0.8)

    start = time.monotonic()
    results = asyncio.run(scenario())
    assert time.monotonic() - start < 0.8 + 2
    assert results[0].error and "overall deadline" in results[0].error


def test_unreachable_host(keys: Keys) -> None:
    # 2001:db8::/32 is documentation space: no route to it on any sane network.
    target = SshTarget(
        "[2001:db8::1]:22",
        identity=[keys.client_path],
        config_path=[],
        known_hosts=keys.known_hosts(22, None),
        # Neighbour discovery gives up after ~3 s here; wait a little longer than that.
        connect_timeout_s=4.0,
        margin_s=MARGIN_S,
    )
    error, elapsed_s = _fails(lambda: target.collect(CONFIG))
    assert elapsed_s < target.total_deadline_s(CONFIG) + 2
    if "no SSH answer" in error.message:
        pytest.skip("this network drops packets to 2001:db8::1 instead of rejecting them")
    assert error.message.startswith("[2001:db8::1]:22: host 2001:db8::1 is unreachable (")
    assert error.remedy and "ProxyJump" in error.remedy
