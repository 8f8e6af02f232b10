"""The SSH target: run the probe on a remote host over one asyncssh connection.

One connection (:mod:`hangdoctor.reach.sshconnect`), and at most three short commands on it: a
check (which python, which py-spy, ``uname -m``, ``id -u``, and a private temp dir when py-spy
must be uploaded), the upload of this machine's py-spy when the remote has none, and the probe
itself (``python3 -`` with the bundle on stdin, one JSON snapshot on stdout). When the remote
has python and py-spy, the check runs the probe at once: one round trip. The whole collection
ends by the connect timeout plus the probe's deadline plus ``margin_s``; every way of failing is
one TargetError line.

Layer: reach; may import: the standard library, asyncssh (through
hangdoctor.reach.asyncssh_import), hangdoctor.errors, hangdoctor.collect.config,
hangdoctor.collect.probe_pack (the probe it sends) and hangdoctor.reach.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from hangdoctor import bounded
from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError, UsageError
from hangdoctor.reach.asyncssh_import import import_asyncssh
from hangdoctor.reach.pyspy_binary import elf_arch, find_local_pyspy, normalise_arch
from hangdoctor.reach.sshconnect import SshEndpoint

asyncssh = import_asyncssh()

DEFAULT_MARGIN_S = 5.0  # on top of the probe's own deadline: discovery, upload, transfer
CLEANUP_TIMEOUT_S = 1.0
STDERR_TAIL_BYTES = 2048
STDERR_KEEP_BYTES = 32 * 1024  # of a remote command's stderr: its first and its last
# The most a remote command may print on stdout: the probe's document of 64 processes x 200
# threads with --native is ~40 MB compact.
MAX_STDOUT_BYTES = bounded.MAX_JSON_BYTES
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

# py-spy kept on the remote between runs, per user, named by its sha256 and checked against it
# before each use: a private folder (mode 700, owned by the user, not a symlink) under the XDG
# cache; never a shared or world-writable path. Deleting the folder removes it.
PYSPY_CACHE_DIR = '"${XDG_CACHE_HOME:-$HOME/.cache}/hangdoctor"'


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _sha256_of(path: str) -> str:
    import hashlib
    import os

    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def _cached_pyspy_check(digest: str) -> str:
    """Shell: use the cached py-spy when it is ours, private, and has this sha256."""
    return (
        f'if [ -z "$sp" ]; then c={PYSPY_CACHE_DIR}; f="$c/py-spy-{digest}"; '
        'if [ -f "$f" ] && [ ! -L "$f" ] && [ ! -L "$c" ] && [ -O "$f" ] && [ -O "$c" ] && [ -x "$f" ] '
        r'&& [ -z "$(find "$c" "$f" -maxdepth 0 \( -perm -002 -o -perm -020 \) 2>/dev/null)" ] '
        f'&& [ "$(sha256sum "$f" 2>/dev/null | cut -d" " -f1)" = {digest} ]; then '
        'sp="$f"; echo "hd_cached=1" >&2; fi; fi; '
    )


def _cache_install(remote: str, digest: str) -> str:
    """Shell: copy the uploaded py-spy into the private cache (atomically); never fails the run."""
    q = shlex.quote(remote)
    return (
        f"{{ c={PYSPY_CACHE_DIR}; umask 077; mkdir -p \"$c\" && [ -d \"$c\" ] && [ ! -L \"$c\" ] "
        f'&& [ -O "$c" ] && chmod 700 "$c" && t="$c/.py-spy-{digest}.$$" && cp {q} "$t" '
        f'&& chmod 700 "$t" && mv -f "$t" "$c/py-spy-{digest}" || rm -f "$t"; }} 2>/dev/null; '
    )


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
            # bounded: 100 MB of dense JSON decoded whole was 2.6 GB of RSS
            value = bounded.raw_decode(decoder, text, "the probe's answer")
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
    pyspy_digest: str = ""  # sha256 of the py-spy we would upload (names it in the cache)


class SshTarget(SshEndpoint):
    """A remote host reached over SSH: ``[user@]host[:port]`` or an ~/.ssh/config alias.

    ``identity``: private key files to try (the agent is tried too). ``ssh_options``:
    ``-o Key=Value`` strings (Port, User, HostName, IdentityFile, StrictHostKeyChecking,
    UserKnownHostsFile, ConnectTimeout, ProxyJump). ``config_path``: OpenSSH client config
    file(s) to read instead of ~/.ssh/config (``[]``: none). ``known_hosts``: known_hosts file
    to check host keys against (these and ``connect_timeout_s`` make the connection:
    :class:`~hangdoctor.reach.sshconnect.SshEndpoint`). ``remote_python``: the interpreter to
    run the probe with (default: ``python3``, else ``python``, on the remote PATH).
    ``remote_env``: variables set in the remote command line (OpenSSH drops env requests unless
    the server accepts them).
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
        cache_pyspy: bool = True,
        margin_s: float = DEFAULT_MARGIN_S,
    ) -> None:
        super().__init__(
            spec,
            name=name,
            identity=identity,
            ssh_options=ssh_options,
            known_hosts=known_hosts,
            config_path=config_path,
            connect_timeout_s=connect_timeout_s,
        )
        self.remote_python = remote_python
        self.remote_env = dict(remote_env or {})
        for key in self.remote_env:
            if not _ENV_NAME_RE.match(key):
                raise UsageError(f"remote environment name {key!r} is not a valid name")
        self.local_pyspy = local_pyspy
        self.upload_pyspy = upload_pyspy
        self.cache_pyspy = cache_pyspy
        self.margin_s = margin_s
        self.last_run: Optional[_Run] = None

    def __repr__(self) -> str:
        return f"SshTarget({self.name!r})"

    def total_deadline_s(self, config: ProbeConfig) -> float:
        """How long :meth:`collect` may take at most before it gives up on the host."""
        return self.connect_timeout_s + config.deadline_s + self.margin_s

    # --- remote commands ----------------------------------------------------------------

    def _env_prefix(self) -> str:
        parts = [f"{k}={shlex.quote(v)}; export {k}; " for k, v in self.remote_env.items()]
        return "".join(parts)

    def _discovery_script(self, upload_arch: Optional[str], digest: Optional[str] = None) -> str:
        """One shell command: python, py-spy, arch, uid, and a private temp dir if needed."""
        if self.remote_python:
            find_py = f"py=$(command -v {shlex.quote(self.remote_python)} 2>/dev/null)"
        else:
            find_py = "py=$(command -v python3 2>/dev/null || command -v python 2>/dev/null)"
        make_dir = ""
        cache_check = _cached_pyspy_check(digest) if digest else ""
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
            f"{cache_check}"
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
        run.pyspy_digest = _sha256_of(local_pyspy) if (local_pyspy and upload_arch and self.cache_pyspy) else ""
        result = await self._run(
            conn, _sh(self._discovery_script(upload_arch, run.pyspy_digest or None)), stdin=probe_stdin,
            on_sent=on_sent,
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
        if facts.get("cached"):
            run.notes.append("py-spy from the per-user cache (~/.cache/hangdoctor, sha256 checked)")
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
        install = _cache_install(remote, run.pyspy_digest) if run.pyspy_digest else ""
        result = await self._run(conn, _sh(self._env_prefix() + f"cat > {q} && chmod 700 {q} || exit 1; {install}exit 0"),
                                 stdin=data)
        if result.exit_status != 0:
            raise TargetError(
                f"{self.name}: uploading py-spy to {remote} failed: "
                f"{_tail(result.stderr or b'') or 'exit ' + str(result.exit_status)}",
                "is the remote /tmp full or mounted noexec? set TMPDIR for the account",
            )
        run.notes.append(f"py-spy uploaded ({len(data) / 1e6:.1f} MB) to {run.tmpdir}"
                         + ("; kept for the next run in ~/.cache/hangdoctor (checked by its sha256)"
                            if run.pyspy_digest else ""))
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
        conn = await self._connect(resolved, run.notes)
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



def _probe_script(config: dict[str, Any]) -> str:
    # Imported late: the bundle reads the probe sources from the package at call time.
    from hangdoctor.collect.probe_pack import build_probe_script

    return build_probe_script(config)
