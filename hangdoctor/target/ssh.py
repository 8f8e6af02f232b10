"""The SSH target: run the probe on a remote host over one asyncssh connection.

One connection, and at most three short commands on it: a check (which python, which py-spy,
``uname -m``, ``id -u``, and a private temp dir when py-spy must be uploaded), the upload of
this machine's py-spy when the remote has none, and the probe itself (``python3 -`` with the
bundle on stdin, one JSON snapshot on stdout). Host keys are checked against known_hosts and
never accepted silently; every way of failing to reach the host is one TargetError line.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError, UsageError
from hangdoctor.target.asyncssh_import import import_asyncssh
from hangdoctor.target.exec_pipe import elf_arch, find_local_pyspy, normalise_arch
from hangdoctor.target.sshconfig import (
    HOST_KEY_POLICIES,
    known_hosts_pattern,
    parse_host,
    parse_ssh_options,
)

asyncssh = import_asyncssh()

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_MARGIN_S = 5.0  # on top of the probe's own deadline: discovery, upload, transfer
CLEANUP_TIMEOUT_S = 1.0
STDERR_TAIL_BYTES = 2048
STDERR_KEEP_BYTES = 32 * 1024  # of a remote command's stderr: its first and its last
# The most a remote command may print on stdout: the probe's document of 64 processes x 200
# threads with --native is ~40 MB compact.
MAX_STDOUT_BYTES = 256 * 1024 * 1024
TMPDIR_PREFIX = "hangdoctor-pyspy."
_TMPDIR_RE = re.compile(r"^/[^\s'\"]*/hangdoctor-pyspy\.[A-Za-z0-9]+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# How the remote Python runs the probe that arrives on stdin. Not `python3 -`: CPython's
# tokenizer reads a script from a pipe slowly when its lines are long (the bundle's are), ~80 ms
# for the bundle against ~1 ms for one read() and compile(). -S: the probe is stdlib only, so it
# starts without site-packages and adds them in a thread (ProbeConfig.late_site).
_LOADER = 'import sys; exec(compile(sys.stdin.buffer.read(), "<hangdoctor-probe>", "exec"))'
_RUN_PROBE_ARGS = "-S -c " + shlex.quote(_LOADER)
_FAST_MARK = b"hd_fast=1"

def _sh(script: str) -> str:
    # Run under POSIX sh whatever the login shell is (bash, zsh, fish).
    return "sh -c " + shlex.quote(script)


def _tail(data: bytes, limit: int = STDERR_TAIL_BYTES) -> str:
    text = data[-limit:].decode("utf-8", errors="replace").strip()
    return " | ".join(line for line in text.splitlines() if line.strip())


# The probe's document starts a line with its first key, schema_version. Only such lines are
# candidates: trying every "{" (the old way) re-sliced the output once per brace, 3.5 GB of RSS
# for 120 KB of "{" lines from a hostile login script.
_FRAME = re.compile(rb'(?m)^\{\s{0,8}"schema_version"\s{0,8}:')
MAX_FRAME_TRIES = 4


def parse_snapshot(stdout: bytes) -> Optional[dict[str, Any]]:
    """The probe's JSON snapshot from its stdout; tolerates junk printed by shell rc files.

    The last candidates are tried first, at most MAX_FRAME_TRIES of them, each decoded once."""
    from collections import deque

    starts: deque[int] = deque(maxlen=MAX_FRAME_TRIES)
    for match in _FRAME.finditer(stdout):
        starts.append(match.start())
    decoder = json.JSONDecoder()
    for start in reversed(starts):
        text = bytes(stdout[start:]).decode("utf-8", errors="replace")
        try:
            value, _ = decoder.raw_decode(text)
        except ValueError:
            continue
        if isinstance(value, dict) and "schema_version" in value:
            return value
    return None


@dataclass
class _Completed:
    """What one remote command left: its stdout (capped), the head and tail of its stderr."""

    stdout: bytes
    stderr: bytes
    exit_status: Optional[int]
    exit_signal: Any = None


class _TooMuchOutput(Exception):
    pass


@dataclass
class _Resolved:
    """Where the connection goes once ~/.ssh/config and -o options are applied."""

    host: str
    port: int
    user: str
    known_hosts: list[str]  # files; empty when checking is off
    encryption_algs: Optional[list[str]] = None  # our order, where the user set none


@dataclass
class _Run:
    """What one collection did, for the manifest entry and for error messages."""

    phase: str = "connecting"
    timings_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pyspy: str = ""
    python: str = ""
    uid: str = ""
    arch: str = ""
    tmpdir: Optional[str] = None
    tmpdir_cleaned: bool = False
    stderr_tail: str = ""


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


class SshTarget:
    """A remote host reached over SSH: ``[user@]host[:port]`` or an ~/.ssh/config alias.

    ``identity``: private key files to try (the agent is tried too). ``ssh_options``:
    ``-o Key=Value`` strings (Port, User, HostName, IdentityFile, StrictHostKeyChecking,
    UserKnownHostsFile, ConnectTimeout, ProxyJump). ``config_path``: OpenSSH client config
    file(s) to read instead of ~/.ssh/config (``[]``: none). ``known_hosts``: known_hosts file
    to check host keys against. ``remote_python``: the interpreter to run the probe with
    (default: ``python3``, else ``python``, on the remote PATH). ``remote_env``: variables set
    in the remote command line (OpenSSH drops env requests unless the server accepts them).
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
        remote_python: Optional[str] = None,
        remote_env: Optional[dict[str, str]] = None,
        local_pyspy: Optional[str] = None,
        upload_pyspy: bool = True,
        margin_s: float = DEFAULT_MARGIN_S,
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
        self.remote_python = remote_python
        self.remote_env = dict(remote_env or {})
        for key in self.remote_env:
            if not _ENV_NAME_RE.match(key):
                raise UsageError(f"remote environment name {key!r} is not a valid name")
        self.local_pyspy = local_pyspy
        self.upload_pyspy = upload_pyspy
        self.margin_s = margin_s
        self.last_run: Optional[_Run] = None

    def __repr__(self) -> str:
        return f"SshTarget({self.name!r})"

    def _first(self, option: str) -> Optional[str]:
        values = self.options.get(option)
        return values[0] if values else None

    def total_deadline_s(self, config: ProbeConfig) -> float:
        """How long :meth:`collect` may take at most before it gives up on the host."""
        return self.connect_timeout_s + config.deadline_s + self.margin_s

    # --- connection ---------------------------------------------------------------------

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

    def _resolve(self) -> _Resolved:
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
        return _Resolved(
            host=str(opts.host),
            port=int(opts.port),
            user=str(opts.username),
            known_hosts=known,
            encryption_algs=_gcm_first(list(opts.encryption_algs)),
        )

    def _known_keys(self, resolved: _Resolved, addr: str) -> list[asyncssh.SSHKey]:
        keys: list[asyncssh.SSHKey] = []
        port = resolved.port if resolved.port != 22 else None
        for path in resolved.known_hosts:
            if not os.path.exists(path):
                continue
            try:
                trusted = asyncssh.match_known_hosts(path, resolved.host, addr, port)[0]
            except (OSError, ValueError, asyncssh.KeyImportError):
                continue
            keys.extend(trusted)
        return keys

    async def _connect(self, resolved: _Resolved, run: _Run) -> asyncssh.SSHClientConnection:
        """Open the connection; every failure becomes one TargetError line with a remedy."""
        where = f"{resolved.user}@{resolved.host}:{resolved.port}"
        accept_unknown = False
        if self.host_key_policy == "accept-new":
            accept_unknown = not self._known_keys(resolved, resolved.host)
        watcher = _HostKeyWatcher(accept_unknown)
        kwargs = self._connect_kwargs()
        if resolved.encryption_algs:
            kwargs["encryption_algs"] = resolved.encryption_algs
        try:
            conn = await asyncssh.connect(
                self._host_to_dial(), client_factory=lambda: watcher, **kwargs
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise self._host_key_error(resolved, watcher.offered, str(exc)) from None
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
            saved = self._remember_host_key(resolved, watcher.offered)
            run.notes.append(
                f"new host key {self._fingerprint(watcher.offered)} accepted "
                f"(StrictHostKeyChecking=accept-new)" + (f", added to {saved}" if saved else "")
            )
        return conn

    @staticmethod
    def _fingerprint(key: asyncssh.SSHKey) -> str:
        return f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"

    def _host_key_error(
        self, resolved: _Resolved, offered: Optional[asyncssh.SSHKey], reason: str
    ) -> TargetError:
        pattern = known_hosts_pattern(resolved.host, resolved.port)
        known_file = resolved.known_hosts[0] if resolved.known_hosts else "~/.ssh/known_hosts"
        known_q = shlex.quote(known_file)
        key_type = offered.get_algorithm() if offered else ""
        scan = (
            f"ssh-keyscan -p {resolved.port}{' -t ' + key_type if key_type else ''} "
            f"{shlex.quote(resolved.host)} >> {known_q}"
        )
        offered_text = self._fingerprint(offered) if offered else "unknown key"
        known = self._known_keys(resolved, resolved.host)
        if offered is None:
            return TargetError(
                f"{self.name}: host key of {pattern} refused ({reason})",
                f"check {known_file}; the host key may be revoked or of a type not offered",
            )
        if known:
            old = ", ".join(self._fingerprint(k) for k in known)
            return TargetError(
                f"{self.name}: host key of {pattern} CHANGED: {known_file} has {old}, the host "
                f"now offers {offered_text}; refusing to connect (a reinstalled host, or a "
                f"man in the middle)",
                f"if the change is expected, verify {offered_text} on the host "
                f"(ssh-keygen -lf /etc/ssh/ssh_host_{_short_type(key_type)}_key.pub), then: "
                f"ssh-keygen -R {shlex.quote(pattern)} -f {known_q} && {scan}",
            )
        return TargetError(
            f"{self.name}: host key of {pattern} is not in {known_file}: the host offers "
            f"{offered_text}; refusing to connect to an unknown host",
            f"verify {offered_text} on the host (ssh-keygen -lf "
            f"/etc/ssh/ssh_host_{_short_type(key_type)}_key.pub), then accept it: {scan}",
        )

    def _remember_host_key(self, resolved: _Resolved, key: asyncssh.SSHKey) -> Optional[str]:
        """accept-new: add the first key of a new host to known_hosts, as OpenSSH does."""
        if not resolved.known_hosts:
            return None
        path = Path(resolved.known_hosts[0])
        key_text = " ".join(key.export_public_key().decode().split()[:2])
        line = f"{known_hosts_pattern(resolved.host, resolved.port)} {key_text}\n"
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(line)
        except OSError:
            return None  # the connection is still fine; the note says the key was not saved
        return str(path)

    # --- remote commands ----------------------------------------------------------------

    def _env_prefix(self) -> str:
        parts = [f"{k}={shlex.quote(v)}; export {k}; " for k, v in self.remote_env.items()]
        return "".join(parts)

    def _discovery_script(self, upload_arch: Optional[str]) -> str:
        """One shell command: python, py-spy, arch, uid, and a private temp dir if needed."""
        if self.remote_python:
            find_py = f"py=$(command -v {shlex.quote(self.remote_python)} 2>/dev/null)"
        else:
            find_py = "py=$(command -v python3 2>/dev/null || command -v python 2>/dev/null)"
        make_dir = ""
        if upload_arch:
            # Only when py-spy is missing and the remote runs our binary's architecture;
            # mktemp -d makes the dir mode 700.
            make_dir = (
                f'if [ -z "$sp" ] && [ "$arch" = {shlex.quote(upload_arch)} ]; then '
                f'd=$(mktemp -d "${{TMPDIR:-/tmp}}/{TMPDIR_PREFIX}XXXXXXXX") && chmod 700 "$d"; '
                "fi; "
            )
        return self._env_prefix() + (
            f"{find_py}; "
            "sp=$(command -v py-spy 2>/dev/null); "
            'if [ -z "$sp" ] && [ -x "$HOME/.local/bin/py-spy" ]; then '
            'sp="$HOME/.local/bin/py-spy"; fi; '
            'if [ -z "$sp" ] && [ -n "$py" ] && [ -x "$(dirname "$py")/py-spy" ]; then '
            'sp="$(dirname "$py")/py-spy"; fi; '
            # Fast path, one round trip: python and py-spy are there, so run the probe (its
            # source is already on stdin) and name them on stderr. The probe dumps with this
            # py-spy (HANGDOCTOR_PYSPY, unless the host sets it) rather than search again.
            # Arch and uid come from the probe's snapshot then: no `uname` or `id` to fork.
            'if [ -n "$py" ] && [ -n "$sp" ]; then '
            'echo "hd_python=$py" >&2; echo "hd_pyspy=$sp" >&2; echo "hd_fast=1" >&2; '
            ': "${HANGDOCTOR_PYSPY:=$sp}"; export HANGDOCTOR_PYSPY; '
            f'exec "$py" {_RUN_PROBE_ARGS}; fi; '
            "arch=$(uname -m); d=; "
            f"{make_dir}"
            'echo "hd_python=$py"; echo "hd_pyspy=$sp"; echo "hd_arch=$arch"; '
            'echo "hd_uid=$(id -u)"; echo "hd_tmpdir=$d"'
        )

    def _probe_command(self, python: str, tmpdir: Optional[str]) -> str:
        run_py = f"{shlex.quote(python)} {_RUN_PROBE_ARGS}"
        if not tmpdir:
            return _sh(self._env_prefix() + "exec " + run_py)
        # The shell stays as the probe's parent so its EXIT trap removes the uploaded py-spy
        # even when we are gone (timeout, dropped connection): the probe ends by its deadline.
        return _sh(
            self._env_prefix()
            + f"d={shlex.quote(tmpdir)}; trap 'rm -rf \"$d\"' EXIT; trap 'exit 129' HUP INT TERM; "
            + run_py
        )

    async def _run(
        self,
        conn: asyncssh.SSHClientConnection,
        command: str,
        stdin: bytes = b"",
        on_sent: Optional[Callable[[], None]] = None,
        max_stdout_bytes: int = MAX_STDOUT_BYTES,
    ) -> _Completed:
        """Run ``command``, calling ``on_sent`` once the command and its stdin are on their way.

        Output is read as it comes, stdout up to ``max_stdout_bytes`` (past it the command is
        closed and TargetError raised: a hostile or broken remote printing without end took
        4.6 GB of RSS in 10 s), stderr as its first and last STDERR_KEEP_BYTES."""
        process = await conn.create_process(command, input=stdin, encoding=None)
        if on_sent is not None:
            on_sent()

        async def read_stdout() -> bytes:
            buf = bytearray()
            while True:
                chunk = await process.stdout.read(1 << 20)
                if not chunk:
                    return bytes(buf)
                if len(buf) + len(chunk) > max_stdout_bytes:
                    raise _TooMuchOutput()
                buf += chunk

        async def read_stderr() -> bytes:
            head, tail, cut = bytearray(), bytearray(), False
            while True:
                chunk = await process.stderr.read(65536)
                if not chunk:
                    return bytes(head) + (b"\n[...]\n" if cut else b"") + bytes(tail)
                room = STDERR_KEEP_BYTES - len(head)
                if room > 0:
                    head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    tail += chunk
                    if len(tail) > STDERR_KEEP_BYTES:
                        cut = True
                        del tail[: len(tail) - STDERR_KEEP_BYTES]

        try:
            out, err = await asyncio.gather(read_stdout(), read_stderr())
        except _TooMuchOutput:
            process.close()
            raise TargetError(
                f"{self.name}: the remote printed more than {max_stdout_bytes >> 20} MiB on "
                "stdout; stopped reading it",
                "something on the host (a login script, a wrapper on the account) prints without "
                "end: check `ssh HOST true | head`",
            ) from None
        await process.wait_closed()
        return _Completed(out, err, process.exit_status, process.exit_signal)

    async def _discover(
        self,
        conn: asyncssh.SSHClientConnection,
        run: _Run,
        probe_stdin: bytes,
        on_sent: Optional[Callable[[], None]] = None,
    ) -> tuple[Optional[str], Optional[_Completed]]:
        """Fill ``run`` with the remote facts. Returns (the local py-spy to upload, if any; the
        probe's result when the fast path already ran it)."""
        local_pyspy = find_local_pyspy(self.local_pyspy) if self.upload_pyspy else None
        local_arch = elf_arch(local_pyspy) if local_pyspy else None
        upload_arch = normalise_arch(local_arch) if local_arch else None
        result = await self._run(
            conn, _sh(self._discovery_script(upload_arch)), stdin=probe_stdin, on_sent=on_sent
        )
        # The fast path names python and py-spy on stderr and then runs the probe.
        fast = _FAST_MARK in (result.stderr or b"") and b"hd_uid=" not in (result.stdout or b"")
        facts_text = (result.stderr if fast else result.stdout) or b""
        facts: dict[str, str] = {}
        for line in facts_text.decode("utf-8", "replace").splitlines():
            if line.startswith("hd_") and "=" in line:
                key, _, value = line.partition("=")
                facts[key[3:]] = value.strip()
        if "uid" not in facts and not fast:
            raise TargetError(
                f"{self.name}: the remote shell did not run our check "
                f"(exit {result.exit_status}): {_tail(result.stderr or b'') or 'no output'}",
                "check that the account has a working POSIX sh (not a restricted shell)",
            )
        run.python, run.pyspy = facts.get("python", ""), facts.get("pyspy", "")
        run.arch, run.uid = facts.get("arch", ""), facts.get("uid", "")
        tmpdir = facts.get("tmpdir", "")
        if tmpdir:
            if not _TMPDIR_RE.match(tmpdir):
                raise TargetError(f"{self.name}: remote mktemp gave an odd path {tmpdir!r}")
            run.tmpdir = tmpdir
        if not run.python:
            wanted = self.remote_python or "python3 or python"
            raise TargetError(
                f"{self.name}: no {wanted} on the remote PATH",
                "install python3 on the host, or point --remote-python at an interpreter",
            )
        if fast:
            # the facts went to stderr ahead of the probe's own stderr: keep only the probe's
            result.stderr = b"\n".join(
                ln for ln in (result.stderr or b"").splitlines() if not ln.startswith(b"hd_"))
            return None, result
        if run.pyspy:
            return None, None
        if not self.upload_pyspy:
            run.notes.append("py-spy not found on the remote; upload disabled: no stacks")
        elif not local_pyspy:
            run.notes.append("py-spy not found on the remote, and no py-spy binary here to upload")
        elif normalise_arch(run.arch) != upload_arch:
            run.notes.append(
                f"py-spy not uploaded: remote is {run.arch}, local {local_arch}; "
                f"install py-spy on the host (pip install py-spy) for stacks"
            )
        elif not run.tmpdir:
            run.notes.append("py-spy not uploaded: could not make a temp dir on the remote")
        else:
            return local_pyspy, None
        return None, None

    async def _upload(self, conn: asyncssh.SSHClientConnection, run: _Run, local: str) -> str:
        """Pipe the py-spy binary into the private temp dir over the same connection."""
        assert run.tmpdir
        remote = f"{run.tmpdir}/py-spy"
        data = Path(local).read_bytes()
        q = shlex.quote(remote)
        result = await self._run(conn, _sh(f"cat > {q} && chmod 700 {q}"), stdin=data)
        if result.exit_status != 0:
            raise TargetError(
                f"{self.name}: uploading py-spy to {remote} failed: "
                f"{_tail(result.stderr or b'') or 'exit ' + str(result.exit_status)}",
                "is the remote /tmp full or mounted noexec? set TMPDIR for the account",
            )
        run.notes.append(f"py-spy uploaded ({len(data) / 1e6:.1f} MB) to {run.tmpdir}")
        return remote

    async def _cleanup(self, conn: asyncssh.SSHClientConnection, run: _Run) -> None:
        if not run.tmpdir or run.tmpdir_cleaned:
            return
        try:
            await asyncio.wait_for(
                self._run(conn, _sh(f"rm -rf -- {shlex.quote(run.tmpdir)}")), CLEANUP_TIMEOUT_S
            )
            run.tmpdir_cleaned = True
        except (asyncio.TimeoutError, TimeoutError, asyncssh.Error, OSError):
            pass  # the remote EXIT trap removes it when the probe ends

    # --- the collection -----------------------------------------------------------------

    async def collect(
        self, config: ProbeConfig, on_started: Optional[Callable[[], None]] = None
    ) -> dict[str, Any]:
        """Run the probe on the host once; return its snapshot or raise TargetError."""
        run = _Run()
        self.last_run = run
        start = time.monotonic()
        total_s = self.total_deadline_s(config)
        try:
            return await asyncio.wait_for(
                self._collect(config, run, start, on_started), total_s
            )
        except (asyncio.TimeoutError, TimeoutError):
            elapsed = time.monotonic() - start
            raise TargetError(
                f"{self.name}: stopped answering after {elapsed:.0f} s (while {run.phase})",
                "the host or its sshd may be wedged: try `ssh HOST true`; if the probe just "
                "needs longer, raise --deadline",
            ) from None

    async def _collect(
        self,
        config: ProbeConfig,
        run: _Run,
        start: float,
        on_started: Optional[Callable[[], None]] = None,
    ) -> dict[str, Any]:
        resolved = self._resolve()
        probe_config = config.to_dict()
        probe_config["late_site"] = True  # it runs under `python3 -S`
        if probe_config.get("host_name") in (None, "", "localhost"):
            probe_config["host_name"] = self.name
        # The probe script is built while the connection is set up (~15 ms of packing).
        script = asyncio.get_running_loop().run_in_executor(
            None, lambda: _probe_script(dict(probe_config)).encode("utf-8")
        )
        conn = await self._connect(resolved, run)
        run.timings_s["connect"] = time.monotonic() - start
        finished = False
        try:
            run.phase = "checking the remote (python, py-spy) and probing"
            t = time.monotonic()
            # On the fast path this command runs the probe too.
            local_pyspy, fast = await self._discover(
                conn, run, await script, on_sent=on_started
            )
            run.timings_s["check"] = time.monotonic() - t
            if fast is not None:
                run.timings_s["probe"] = run.timings_s.pop("check")
                finished = True
                return self._finish_probe(fast, run, start)
            if local_pyspy:
                run.phase = "uploading py-spy"
                t = time.monotonic()
                probe_config["pyspy_path"] = await self._upload(conn, run, local_pyspy)
                run.timings_s["upload"] = time.monotonic() - t
            elif run.pyspy and not probe_config.get("pyspy_path"):
                probe_config["pyspy_path"] = run.pyspy
            run.phase = "running the probe"
            t = time.monotonic()
            result = await self._run(
                conn,
                self._probe_command(run.python, run.tmpdir),
                stdin=_probe_script(probe_config).encode("utf-8"),
                on_sent=on_started,
            )
            run.timings_s["probe"] = time.monotonic() - t
            # The probe shell's EXIT trap removed the temp dir when it returned.
            run.tmpdir_cleaned = True
            finished = True
            return self._finish_probe(result, run, start)
        finally:
            if not finished:
                await self._cleanup(conn, run)  # keeps run.phase: it says where it stopped
            conn.close()

    def _finish_probe(
        self, result: _Completed, run: _Run, start: float
    ) -> dict[str, Any]:
        run.stderr_tail = _tail(result.stderr or b"")
        snapshot = parse_snapshot(result.stdout or b"")
        if snapshot is None:
            status = result.exit_status if result.exit_signal is None else result.exit_signal
            raise TargetError(
                f"{self.name}: remote probe printed no snapshot (exit {status}): "
                f"{run.stderr_tail or 'no stderr'}",
                f"run it by hand to see more: ssh HOST {shlex.quote(run.python)} --version",
            )
        host = snapshot.get("host")
        if isinstance(host, dict):  # the fast path asked the shell for neither
            if not run.uid and host.get("euid") is not None:
                run.uid = str(host["euid"])
            if not run.arch and host.get("arch"):
                run.arch = str(host["arch"])
        self._record(snapshot, run, start, result.exit_status)
        return snapshot

    def _record(
        self, snapshot: dict[str, Any], run: _Run, start: float, exit_status: Optional[int]
    ) -> None:
        timings = run.timings_s
        parts = [f"connect {timings.get('connect', 0):.2f} s"]
        if "upload" in timings:
            parts.append(f"upload {timings['upload']:.2f} s")
        parts.append(f"probe {timings.get('probe', 0):.2f} s")
        if "upload" in timings:
            parts.append("py-spy uploaded")
        elif run.pyspy:
            parts.append(f"py-spy {run.pyspy}")
        parts.append(f"python {run.python}, uid {run.uid}, {run.arch}")
        if exit_status not in (0, None):
            parts.append(f"probe exit {exit_status}")
        entry = {
            "source": "ssh",
            "status": "ok",
            "duration_s": round(time.monotonic() - start, 3),
            "detail": ", ".join(parts),
        }
        manifest = snapshot.setdefault("manifest", [])
        if isinstance(manifest, list):
            manifest.append(entry)
        notes = snapshot.setdefault("notes", [])
        if isinstance(notes, list):
            notes.extend(n for n in run.notes if not n.startswith("py-spy uploaded"))


def _short_type(key_type: str) -> str:
    # ssh-ed25519 -> ed25519, ecdsa-sha2-nistp256 -> ecdsa, ssh-rsa -> rsa
    if key_type.startswith("ecdsa"):
        return "ecdsa"
    return key_type.replace("ssh-", "") or "*"


def _probe_script(config: dict[str, Any]) -> str:
    # Imported late: the bundle reads the probe sources from the package at call time.
    from hangdoctor.collect.probe_pack import build_probe_script

    return build_probe_script(config)
