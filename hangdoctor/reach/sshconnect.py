"""The SSH connection: one asyncssh connection to a host, as ~/.ssh/config and the ``-o``
options make it (Port, User, HostName, IdentityFile, UserKnownHostsFile, ProxyJump as an
asyncssh tunnel), within the connect timeout; every way of failing to reach the host is one
TargetError line with a remedy. Host keys are checked through :mod:`hangdoctor.reach.hostkeys`.

Two things keep the first round trips short: AES-GCM first where this CPU has AES
instructions, and every server packet acknowledged at once (TCP_QUICKACK).

Layer: reach; may import: the standard library, asyncssh (through
hangdoctor.reach.asyncssh_import), hangdoctor.errors and hangdoctor.reach.sshconfig /
hostkeys.
"""

from __future__ import annotations

import asyncio
import errno
import shlex
import socket
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from hangdoctor.errors import TargetError
from hangdoctor.reach.asyncssh_import import import_asyncssh
from hangdoctor.reach.hostkeys import (
    fingerprint,
    host_key_error,
    known_keys,
    remember_host_key,
)
from hangdoctor.reach.sshconfig import (
    HOST_KEY_POLICIES,
    Resolved,
    parse_host,
    parse_ssh_options,
)

asyncssh = import_asyncssh()

DEFAULT_CONNECT_TIMEOUT_S = 10.0


def _cpu_has_aes() -> bool:
    """Whether this CPU encrypts AES in hardware (x86 ``aes`` flag, arm64 ``aes`` feature)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            first_cpu = f.read(16384).split(b"\n\n", 1)[0]
    except OSError:
        return False
    for line in first_cpu.splitlines():
        key, _, value = line.partition(b":")
        if key.strip() in (b"flags", b"Features") and b"aes" in value.split():
            return True
    return False


def _gcm_first(configured: list[bytes]) -> Optional[list[str]]:
    """asyncssh's default ciphers with AES-GCM first, where the user configured no Ciphers
    and this CPU has AES instructions; else None (leave the order alone).

    asyncssh prefers chacha20-poly1305, as OpenSSH does, which it computes in two passes per
    packet; AES-GCM is one hardware-accelerated pass at both ends. That matters for the
    py-spy upload: 8 MB over loopback took 100 to 150 ms with chacha20-poly1305 and ~60 ms
    with aes128-gcm. Every OpenSSH server since 6.2 offers AES-GCM; one that does not still agrees
    on another cipher of the same list."""
    from asyncssh.encryption import get_default_encryption_algs

    default = list(get_default_encryption_algs())
    if configured != default or not _cpu_has_aes():
        return None
    gcm = [alg for alg in (b"aes128-gcm@openssh.com", b"aes256-gcm@openssh.com") if alg in default]
    return [alg.decode("ascii") for alg in gcm + [alg for alg in default if alg not in gcm]]


def ack_each_read(conn: asyncssh.SSHClientConnection) -> None:
    """Acknowledge every TCP segment from the server as soon as it is read (TCP_QUICKACK).

    sshd sends small packets without TCP_NODELAY on non-interactive sessions, so Nagle holds
    its next packet until the previous one is acknowledged, and Linux delays that
    acknowledgement up to 40 ms when we have nothing to send. The first session after
    authentication waited exactly that: its open confirmation came ~45 ms after the server's
    preceding debug and host-keys messages (8 ms instead of 50, loopback, 20 connections).
    The flag does not stick, so it is set again on each read. A tunnelled connection
    (ProxyJump) has no socket of its own and is left as it is.
    """
    quickack = getattr(socket, "TCP_QUICKACK", None)  # Linux only
    sock = conn.get_extra_info("socket")
    if quickack is None or sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    received = conn.data_received

    def data_received(data: bytes, datatype: Any = None) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
        except OSError:
            pass
        if datatype is None:
            received(data)
        else:
            received(data, datatype)

    conn.data_received = data_received  # type: ignore[method-assign]


class _HostKeyWatcher(asyncssh.SSHClient):
    """Sees the key a host offers when known_hosts does not vouch for it; acknowledges the
    server's packets at once from the first one on (``ack_each_read``)."""

    def __init__(self, accept_unknown: bool) -> None:
        self.accept_unknown = accept_unknown
        self.offered: Optional[asyncssh.SSHKey] = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        ack_each_read(conn)

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.offered = key
        return self.accept_unknown


class SshEndpoint:
    """Where and how to reach an SSH host: ``[user@]host[:port]`` or an ~/.ssh/config alias.

    ``identity``: private key files to try (the agent is tried too). ``ssh_options``:
    ``-o Key=Value`` strings (Port, User, HostName, IdentityFile, StrictHostKeyChecking,
    UserKnownHostsFile, ConnectTimeout, ProxyJump). ``config_path``: OpenSSH client config
    file(s) to read instead of ~/.ssh/config (``[]``: none). ``known_hosts``: known_hosts file
    to check host keys against.
    """

    def __init__(
        self,
        spec: str,
        *,
        name: Optional[str] = None,
        identity: Sequence[str] = (),
        ssh_options: Sequence[str] = (),
        known_hosts: Optional[str] = None,
        config_path: Union[str, Sequence[str], None] = None,
        connect_timeout_s: Optional[float] = None,
    ) -> None:
        self.name = name or spec
        self.host_spec = parse_host(spec)
        self.options = parse_ssh_options(list(ssh_options))
        self.identity = [str(Path(p).expanduser()) for p in identity]
        self.identity += [str(Path(p).expanduser()) for p in self.options.get("IdentityFile", [])]
        self.known_hosts = known_hosts or self._first("UserKnownHostsFile")
        if self.known_hosts:
            self.known_hosts = str(Path(self.known_hosts).expanduser())
        policy_text = (self._first("StrictHostKeyChecking") or "yes").lower()
        self.host_key_policy = HOST_KEY_POLICIES[policy_text]
        if isinstance(config_path, str):
            self.config_paths: Optional[list[str]] = [config_path]
        elif config_path is None:
            self.config_paths = None  # ~/.ssh/config, as ssh does
        else:
            self.config_paths = list(config_path)
        if connect_timeout_s is None and self._first("ConnectTimeout"):
            connect_timeout_s = float(self._first("ConnectTimeout") or 0)
        self.connect_timeout_s = connect_timeout_s or DEFAULT_CONNECT_TIMEOUT_S

    def _first(self, option: str) -> Optional[str]:
        values = self.options.get(option)
        return values[0] if values else None

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"connect_timeout": self.connect_timeout_s}
        # None here means ~/.ssh/config (asyncssh's default, ()); [] means no config at all.
        if self.config_paths is None:
            kwargs["config"] = ()
        else:
            kwargs["config"] = self.config_paths or None
        port = self.host_spec.port or self._first("Port")
        if port:
            kwargs["port"] = int(port)
        user = self.host_spec.user or self._first("User")
        if user:
            kwargs["username"] = user
        if self.identity:
            kwargs["client_keys"] = self.identity
        if self._first("ProxyJump"):
            kwargs["tunnel"] = self._first("ProxyJump")
        if self.host_key_policy == "off":
            kwargs["known_hosts"] = None  # the user asked for it (-o StrictHostKeyChecking=no)
        elif self.known_hosts:
            kwargs["known_hosts"] = self.known_hosts
        return kwargs

    def _host_to_dial(self) -> str:
        return self._first("HostName") or self.host_spec.host

    def _resolve(self) -> Resolved:
        """Apply the config file(s) and options the way the connection will, loading keys."""
        kwargs = self._connect_kwargs()
        kwargs.pop("connect_timeout", None)
        kwargs.pop("tunnel", None)  # resolving the jump host here would connect to it
        try:
            opts = asyncssh.SSHClientConnectionOptions(host=self._host_to_dial(), **kwargs)
        except FileNotFoundError as exc:
            raise TargetError(
                f"{self.name}: file not found: {exc.filename}",
                "check the --identity / IdentityFile / known_hosts / config paths",
            ) from None
        except asyncssh.KeyEncryptionError as exc:
            raise TargetError(
                f"{self.name}: cannot use an encrypted private key ({exc})",
                "load it into ssh-agent (ssh-add KEY) so no passphrase is needed here",
            ) from None
        except (asyncssh.KeyImportError, ValueError, OSError) as exc:
            raise TargetError(
                f"{self.name}: bad SSH configuration or key: {exc}",
                "check the key files and ~/.ssh/config entries for this host",
            ) from None
        if self.host_key_policy == "off":
            known: list[str] = []
        elif opts.known_hosts in ((), None, [], b""):
            known = [str(Path("~/.ssh/known_hosts").expanduser())]
        elif isinstance(opts.known_hosts, (list, tuple)):
            known = [str(p) for p in opts.known_hosts]
        else:
            known = [str(opts.known_hosts)]
        return Resolved(
            host=str(opts.host),
            port=int(opts.port),
            user=str(opts.username),
            known_hosts=known,
            encryption_algs=_gcm_first(list(opts.encryption_algs)),
        )

    async def _connect(self, resolved: Resolved, notes: list[str]) -> asyncssh.SSHClientConnection:
        """Open the connection; every failure becomes one TargetError line with a remedy."""
        where = f"{resolved.user}@{resolved.host}:{resolved.port}"
        accept_unknown = False
        if self.host_key_policy == "accept-new":
            accept_unknown = not known_keys(resolved, resolved.host)
        watcher = _HostKeyWatcher(accept_unknown)
        kwargs = self._connect_kwargs()
        if resolved.encryption_algs:
            kwargs["encryption_algs"] = resolved.encryption_algs
        try:
            conn = await asyncssh.connect(
                self._host_to_dial(), client_factory=lambda: watcher, **kwargs
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise host_key_error(self.name, resolved, watcher.offered, str(exc)) from None
        except asyncssh.PermissionDenied:
            tried = ", ".join(self.identity) if self.identity else "ssh-agent and ~/.ssh/id_*"
            raise TargetError(
                f"{self.name}: authentication failed for {where} (tried {tried})",
                f"check the user and key: ssh -p {resolved.port} "
                f"{shlex.quote(resolved.user + '@' + resolved.host)} true; pass --identity KEY "
                "or load the key into ssh-agent",
            ) from None
        except ConnectionRefusedError:
            raise TargetError(
                f"{self.name}: connection refused by {resolved.host}:{resolved.port}",
                "is sshd running and listening on that port? (check the port: HOST:PORT or "
                "-o Port=...)",
            ) from None
        except socket.gaierror as exc:
            raise TargetError(
                f"{self.name}: cannot resolve host name {resolved.host!r} ({exc.strerror})",
                "check the spelling, DNS, or add a HostName to ~/.ssh/config",
            ) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise TargetError(
                f"{self.name}: no SSH answer from {resolved.host}:{resolved.port} within "
                f"{self.connect_timeout_s:g} s",
                "is the host up and the port open (firewall)? raise --connect-timeout if the "
                "link is slow",
            ) from None
        except asyncssh.KeyExchangeFailed as exc:
            raise TargetError(
                f"{self.name}: SSH key exchange with {resolved.host}:{resolved.port} failed "
                f"({exc.reason})",
                "the server and asyncssh share no algorithm, or known_hosts pins a host key "
                "type the server does not offer",
            ) from None
        except asyncssh.DisconnectError as exc:
            raise TargetError(
                f"{self.name}: {resolved.host}:{resolved.port} closed the SSH connection "
                f"({exc.reason or type(exc).__name__})",
                "check the server's sshd log; MaxStartups or AllowUsers may refuse us",
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN):
                raise TargetError(
                    f"{self.name}: host {resolved.host} is unreachable ({exc.strerror})",
                    "check the network route / VPN, or use -o ProxyJump=BASTION",
                ) from None
            raise TargetError(
                f"{self.name}: cannot connect to {resolved.host}:{resolved.port} "
                f"({exc.strerror or exc})",
                "check the host name and port",
            ) from None
        if accept_unknown and watcher.offered is not None:
            saved = remember_host_key(resolved, watcher.offered)
            notes.append(
                f"new host key {fingerprint(watcher.offered)} accepted "
                f"(StrictHostKeyChecking=accept-new)" + (f", added to {saved}" if saved else "")
            )
        return conn
