"""The exec-pipe transport: run the probe through a command that gives a shell in the target.

``docker exec -i NAME``, ``kubectl exec -i POD --``, ``podman exec -i NAME``,
``nsenter -t PID -a``, ``srun --overlap --jobid J -w NODE``, ``enroot exec PID``, an ``ssh``
through a bastion: each runs a command, in the target's namespaces, with our stdin and stdout.
It is the SSH path's one-probe design over another pipe, in ONE command::

    PREFIX sh -c 'find python and py-spy; exec python3 -S -c LOADER'

and on its stdin, a length line and the probe script (collect/probe_pack.py), then, only when the
target has no py-spy and asks for it, a length line and this machine's py-spy binary
(:mod:`.pyspy_binary`). The
loader keeps the binary in a memfd (an anonymous file: nothing on the target's disk, works on a
read-only root filesystem); where memfd is missing it uses a private temp dir that it removes
before the probe exits. The probe prints one JSON snapshot on stdout.

Deadlines: the command must start the shell within ``start_timeout_s`` (a wedged runtime
daemon, an unscheduled pod), the whole run ends by the probe's deadline plus ``margin_s``; the
command is killed then (its process group: we started it), and whatever it said is the error.
Afterwards the runtime's own view of the container is merged in (:mod:`.runtime_facts`).

Layer: reach; may import: the standard library, hangdoctor.errors, hangdoctor.redact,
hangdoctor.collect.config, hangdoctor.collect.probe_pack (the probe it sends) and
hangdoctor.reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from hangdoctor import bounded, redact
from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError
from hangdoctor.reach.pyspy_binary import elf_arch, find_local_pyspy, normalise_arch
from hangdoctor.reach.runtime_facts import host_kernel_log, merge_runtime_facts

DEFAULT_START_TIMEOUT_S = 15.0
MAX_STDOUT_BYTES = bounded.MAX_JSON_BYTES  # the snapshot is one JSON line on stdout
MAX_STDERR_LINE = 16384  # bytes of one stderr line kept; the rest of it is dropped
MAX_COMMAND_BYTES = 32 << 20  # of each stream of a short command (inspect, logs, get)
DEFAULT_MARGIN_S = 5.0
STDERR_TAIL_BYTES = 2048

# Runs in the target's Python (3.8+), given on the command line (it is short); everything else
# arrives on stdin. Reads the probe, gets py-spy when the shell found none (HD_WANT_PYSPY=1),
# and runs the probe in this same process: a memfd path /proc/PID/fd/N stays valid for
# py-spy's execve as long as this process lives, which is as long as the probe runs.
_LOADER = r"""
import sys, os
r = sys.stdin.buffer
src = r.read(int(r.readline()))
if os.environ.pop("HD_WANT_PYSPY", "") == "1":
    sys.stderr.write("hd_need_pyspy=%s\n" % os.uname().machine)
    sys.stderr.flush()
    n = int(r.readline() or 0)
    if n:
        d = None
        try:
            fd = os.memfd_create("py-spy", 0)
            path = "/proc/%d/fd/%d" % (os.getpid(), fd)
        except (AttributeError, OSError):
            import tempfile
            d = tempfile.mkdtemp(prefix="hangdoctor-pyspy.")
            path = d + "/py-spy"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 448)
        left = n
        while left > 0:
            b = r.read(min(left, 1 << 20))
            if not b:
                break
            os.write(fd, b)
            left -= len(b)
        if d is not None:
            os.close(fd)
            _exit = os._exit
            def _clean_exit(code, _d=d, _exit=_exit):
                import shutil
                shutil.rmtree(_d, True)
                _exit(code)
            os._exit = _clean_exit
        if left == 0:
            os.environ["HANGDOCTOR_PYSPY"] = path
            sys.stderr.write("hd_pyspy_at=%s\n" % ("memfd" if d is None else d))
            sys.stderr.flush()
exec(compile(src, "<hangdoctor-probe>", "exec"))
"""


def shell_script(remote_python: Optional[str] = None) -> str:
    """The POSIX sh script that finds python and py-spy in the target and starts the loader."""
    if remote_python:
        find_py = f"py=$(command -v {shlex.quote(remote_python)} 2>/dev/null)"
    else:
        find_py = "py=$(command -v python3 2>/dev/null || command -v python 2>/dev/null)"
    return (
        f"{find_py}; "
        'if [ -z "$py" ]; then echo "hd_nopython=1" >&2; exit 127; fi; '
        "sp=$(command -v py-spy 2>/dev/null); "
        'if [ -z "$sp" ] && [ -x "$(dirname "$py")/py-spy" ]; then sp="$(dirname "$py")/py-spy"; fi; '
        'if [ -z "$sp" ] && [ -n "$HOME" ] && [ -x "$HOME/.local/bin/py-spy" ]; then '
        'sp="$HOME/.local/bin/py-spy"; fi; '
        'echo "hd_python=$py" >&2; echo "hd_pyspy=$sp" >&2; echo "hd_uid=$(id -u 2>/dev/null)" >&2; '
        'if [ -n "$sp" ]; then : "${HANGDOCTOR_PYSPY:=$sp}"; export HANGDOCTOR_PYSPY; '
        "else HD_WANT_PYSPY=1; export HD_WANT_PYSPY; fi; "
        f'exec "$py" -S -c {shlex.quote(_LOADER)}'
    )


@dataclass
class ExecRun:
    """What one collection did: for the manifest entry and for error messages."""

    phase: str = "starting"
    timings_s: dict[str, float] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    uploaded_bytes: int = 0
    stderr: bytearray = field(default_factory=bytearray)
    returncode: Optional[int] = None

    def stderr_tail(self, limit: int = STDERR_TAIL_BYTES) -> str:
        lines = bytes(self.stderr).decode("utf-8", "replace").splitlines()
        keep = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("hd_")]
        # the target's own stderr: redacted as lines (a key block spans several) before it is
        # cut, so a cut never keeps half a token
        return " | ".join(redact.redact_lines(keep))[-limit:]


class ExecPipeTarget:
    """A target reached by running ``argv_prefix + [sh, -c, SCRIPT]`` on this machine.

    ``quote_for_shell``: the prefix hands its arguments to a remote shell as one command line
    (``ssh``), so the script is sent as one quoted word. ``runtime``: the kind, for messages
    and the report (``docker``, ``kubernetes``, ``via``). Subclasses add the runtime's own
    facts (:meth:`runtime_facts`), its captured log (:meth:`runtime_log`) and their reading
    of its error messages (:meth:`classify_failure`).
    """

    runtime = "via"

    def __init__(
        self,
        name: str,
        argv_prefix: Sequence[str],
        *,
        quote_for_shell: bool = False,
        remote_python: Optional[str] = None,
        local_pyspy: Optional[str] = None,
        upload_pyspy: bool = True,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        margin_s: float = DEFAULT_MARGIN_S,
        env: Optional[dict[str, str]] = None,
    ) -> None:
        self.name = name
        self.argv_prefix = list(argv_prefix)
        self.quote_for_shell = quote_for_shell
        self.remote_python = remote_python
        self.local_pyspy = local_pyspy
        self.upload_pyspy = upload_pyspy
        self.start_timeout_s = start_timeout_s
        self.margin_s = margin_s
        self.env = env
        self.last_run: Optional[ExecRun] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # --- what subclasses refine ---------------------------------------------------------

    def command(self) -> list[str]:
        """The full argv that starts the probe's shell in the target."""
        script = shell_script(self.remote_python)
        if self.quote_for_shell:
            return self.argv_prefix + ["sh -c " + shlex.quote(script)]
        return self.argv_prefix + ["sh", "-c", script]

    def describe(self) -> str:
        """The prefix as the user would type it, for messages."""
        return " ".join(shlex.quote(a) for a in self.argv_prefix)

    async def runtime_facts(self) -> Optional[dict[str, Any]]:
        """The runtime's own view of the container (``docker inspect``): None when none."""
        return None

    async def runtime_log(self, since_epoch_s: float) -> Optional[dict[str, Any]]:
        """The runtime's captured stdout/stderr of the target, as a snapshot ``log``."""
        return None

    def classify_failure(self, stderr_text: str, returncode: Optional[int]) -> TargetError:
        """The one-line error for a command that did not start our shell."""
        detail = stderr_text or f"exit {returncode}, no output"
        return TargetError(
            f"{self.name}: `{self.describe()}` did not start a shell in the target: {detail}",
            "run the command by hand with `sh -c true` appended to see why",
        )

    def total_deadline_s(self, config: ProbeConfig) -> float:
        return self.start_timeout_s + config.deadline_s + self.margin_s

    # --- the collection -----------------------------------------------------------------

    async def collect(
        self, config: ProbeConfig, on_started: Optional[Callable[[], None]] = None
    ) -> dict[str, Any]:
        """Run the probe in the target once; return its snapshot or raise TargetError."""
        run = ExecRun()
        self.last_run = run
        start = time.monotonic()
        start_epoch = time.time()
        facts_task = asyncio.ensure_future(self._bounded(self.runtime_facts(), 10.0))
        ok = False
        try:
            snapshot = await asyncio.wait_for(
                self._collect(config, run, start, on_started), self.total_deadline_s(config)
            )
            ok = True
        except (asyncio.TimeoutError, TimeoutError):
            raise TargetError(
                f"{self.name}: no snapshot after {time.monotonic() - start:.0f} s "
                f"(while {run.phase}){': ' + run.stderr_tail() if run.stderr_tail() else ''}",
                f"check that `{self.describe()} true` answers; if the probe needs longer, "
                "raise --deadline",
            ) from None
        except TargetError:
            # The runtime's own view explains a failed exec better (no such container).
            facts = await facts_task
            if isinstance(facts, TargetError):
                raise facts from None
            raise
        finally:
            if not ok and not facts_task.done():  # a timeout, or the caller gave up on us
                facts_task.cancel()
        facts = await facts_task  # bounded by _bounded's own 10 s
        if isinstance(facts, TargetError):
            facts = None
        if facts:
            merge_runtime_facts(snapshot, facts)
        host_kernel_log(snapshot)
        log = await self._bounded(self.runtime_log(start_epoch), 5.0)
        if isinstance(log, dict) and not snapshot.get("log"):
            if config.redact:  # the probe redacts what it reads; this was read here
                # as lines, not one by one: a PEM key logged over 27 lines keeps no body line
                log["tail"] = redact.redact_lines(
                    [ln for ln in log.get("tail") or [] if isinstance(ln, str)])
            snapshot["log"] = log
            self._fix_log_manifest(snapshot, log)
        self._record(snapshot, run, start)
        return snapshot

    async def _bounded(self, coro: Any, timeout_s: float) -> Any:
        """A side call (inspect, logs): its TargetError is returned, anything else is None."""
        try:
            return await asyncio.wait_for(coro, timeout_s)
        except TargetError as exc:
            return exc
        except (asyncio.TimeoutError, TimeoutError, OSError, ValueError):
            return None

    async def _collect(
        self,
        config: ProbeConfig,
        run: ExecRun,
        start: float,
        on_started: Optional[Callable[[], None]],
    ) -> dict[str, Any]:
        probe_config = config.to_dict()
        probe_config["late_site"] = True  # it runs under `python3 -S`
        if probe_config.get("host_name") in (None, "", "localhost"):
            probe_config["host_name"] = self.name
        from hangdoctor.collect.probe_pack import build_probe_script

        loop = asyncio.get_running_loop()
        script = loop.run_in_executor(
            None, lambda: build_probe_script(dict(probe_config)).encode("utf-8")
        )
        argv = self.command()
        run.phase = f"starting `{self.describe()}`"
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: killed whole on a deadline
                env=self.env,
            )
        except FileNotFoundError:
            raise self.missing_binary() from None
        except PermissionError as exc:
            raise TargetError(
                f"{self.name}: cannot run {argv[0]}: {exc.strerror}",
                f"check the permissions of {argv[0]}",
            ) from None
        try:
            return await self._drive(proc, await script, run, start, on_started)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await asyncio.wait_for(proc.wait(), 2.0)

    def missing_binary(self) -> TargetError:
        tool = self.argv_prefix[0] if self.argv_prefix else "?"
        return TargetError(
            f"{self.name}: {tool}: command not found",
            f"install {tool} or put it on PATH",
        )

    async def _drive(
        self,
        proc: asyncio.subprocess.Process,
        script: bytes,
        run: ExecRun,
        start: float,
        on_started: Optional[Callable[[], None]],
    ) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdin = proc.stdin
        events: dict[str, asyncio.Event] = {k: asyncio.Event() for k in ("pyspy", "need", "eof")}

        async def read_stderr() -> None:
            assert proc.stderr is not None
            partial = bytearray()
            while True:
                # lines of any length (readline() raised past 64 KiB and lost the snapshot)
                chunk = await proc.stderr.read(1 << 16)
                if not chunk:
                    break
                for line in bounded.split_lines(partial, chunk, MAX_STDERR_LINE):
                    if len(run.stderr) < 1 << 16:
                        run.stderr.extend(line)
                    text = line.decode("utf-8", "replace").strip()
                    if text.startswith("hd_") and "=" in text:
                        key, _, value = text[3:].partition("=")
                        run.facts[key] = value
                        if key == "pyspy":
                            events["pyspy"].set()
                        elif key == "need_pyspy":
                            events["need"].set()
            if partial and len(run.stderr) < 1 << 16:
                run.stderr.extend(bytes(partial))
            events["eof"].set()

        async def read_stdout() -> bytes:
            # a byte cap: a shell that writes forever filled 5.9 GB before the deadline
            assert proc.stdout is not None
            buf = bytearray()
            while True:
                chunk = await proc.stdout.read(1 << 20)
                if not chunk:
                    return bytes(buf)
                buf.extend(chunk)
                if len(buf) > MAX_STDOUT_BYTES:
                    # stop it (its process group: we started it) and say so once it is gone
                    run.facts["stdout_over_cap"] = "1"
                    with contextlib.suppress(OSError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    return b""

        err_task = asyncio.ensure_future(read_stderr())
        out_task = asyncio.ensure_future(read_stdout())
        try:
            run.phase = f"sending the probe through `{self.describe()}`"
            await self._send(stdin, b"%d\n" % len(script) + script, self.start_timeout_s, run)
            # The shell names what it found before it starts python; until then the runtime
            # is still starting it (pulling a pod's exec session, a slow daemon).
            await self._wait_any(events, ("pyspy", "eof"), self.start_timeout_s, run)
            run.timings_s["start"] = time.monotonic() - start
            if on_started is not None:
                on_started()
            if "pyspy" in run.facts and not run.facts["pyspy"]:
                run.phase = "sending py-spy"
                await self._wait_any(events, ("need", "eof"), self.start_timeout_s, run)
                if events["need"].is_set():
                    t = time.monotonic()
                    data = self._pyspy_for(run.facts.get("need_pyspy", ""), run)
                    await self._send(stdin, b"%d\n" % len(data) + data, 2 * self.start_timeout_s, run)
                    run.uploaded_bytes = len(data)
                    run.timings_s["upload"] = time.monotonic() - t
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
                stdin.close()
            run.phase = "running the probe"
            t = time.monotonic()
            stdout = await out_task
            await err_task
            if run.facts.get("stdout_over_cap"):
                raise TargetError(
                    f"{self.name}: `{self.describe()}` wrote more than "
                    f"{MAX_STDOUT_BYTES >> 20} MiB on stdout; not a snapshot, not read",
                    "something in the target's shell start-up writes forever")
            run.returncode = await proc.wait()
            run.timings_s["probe"] = time.monotonic() - t
        finally:
            for task in (err_task, out_task):
                task.cancel()
        return self._finish(stdout, run)

    async def _send(self, stdin: asyncio.StreamWriter, data: bytes, timeout_s: float,
                    run: ExecRun) -> None:
        """Write to the command's stdin within ``timeout_s``: a command that never reads it
        (waiting on a prompt, a wedged runtime) must not hold us until the overall deadline."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(data)
            try:
                await asyncio.wait_for(stdin.drain(), timeout_s)
            except (asyncio.TimeoutError, TimeoutError):
                raise TargetError(
                    f"{self.name}: `{self.describe()}` did not read its input within "
                    f"{timeout_s:.0f} s (while {run.phase})"
                    f"{': ' + run.stderr_tail() if run.stderr_tail() else ''}",
                    "the command may wait for a password or a prompt: it must run unattended",
                ) from None

    async def _wait_any(
        self, events: dict[str, asyncio.Event], names: Sequence[str], timeout_s: float, run: ExecRun
    ) -> None:
        waits = [asyncio.ensure_future(events[n].wait()) for n in names]
        try:
            done, _ = await asyncio.wait(
                waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for w in waits:
                w.cancel()
        if not done:
            raise TargetError(
                f"{self.name}: `{self.describe()}` gave no answer within {timeout_s:.0f} s "
                f"(while {run.phase}){': ' + run.stderr_tail() if run.stderr_tail() else ''}",
                "the runtime or the target may be wedged; try the command by hand",
            )

    def _pyspy_for(self, remote_arch: str, run: ExecRun) -> bytes:
        """This machine's py-spy binary when the target runs its architecture, else b""."""
        if not self.upload_pyspy:
            run.notes.append("py-spy not found in the target; upload disabled: no stacks")
            return b""
        local = find_local_pyspy(self.local_pyspy)
        if not local:
            run.notes.append("py-spy not found in the target, and no py-spy binary here to send")
            return b""
        local_arch = elf_arch(local) or "?"
        if normalise_arch(remote_arch) != normalise_arch(local_arch):
            run.notes.append(
                f"py-spy not sent: the target is {remote_arch}, this py-spy {local_arch}; "
                "install py-spy in the target (pip install py-spy) for stacks"
            )
            return b""
        try:
            return Path(local).read_bytes()
        except OSError as exc:
            run.notes.append(f"py-spy not sent: cannot read {local}: {exc.strerror}")
            return b""

    def _finish(self, stdout: bytes, run: ExecRun) -> dict[str, Any]:
        snapshot = parse_snapshot(stdout)
        if snapshot is not None:
            return snapshot
        if run.facts.get("nopython"):
            wanted = self.remote_python or "python3 or python"
            raise TargetError(
                f"{self.name}: no {wanted} in the target",
                "diagnose it from the host it runs on instead (hangdoctor diagnose localhost "
                "--pid HOST_PID: the container is named), or point --remote-python at one",
            )
        if "python" not in run.facts:
            raise self.classify_failure(run.stderr_tail(), run.returncode)
        raise TargetError(
            f"{self.name}: the probe printed no snapshot (exit {run.returncode}): "
            f"{run.stderr_tail() or 'no stderr'}",
            f"run it by hand: {self.describe()} {run.facts.get('python', 'python3')} --version",
        )

    def _fix_log_manifest(self, snapshot: dict[str, Any], log: dict[str, Any]) -> None:
        entry = {
            "source": "log",
            "status": "ok",
            "duration_s": 0.0,
            "detail": f"{log.get('path')}, {len(log.get('tail') or [])} lines kept "
            f"(the runtime's captured stdout/stderr)",
        }
        manifest = snapshot.setdefault("manifest", [])
        if isinstance(manifest, list):
            manifest[:] = [
                m for m in manifest if not (isinstance(m, dict) and m.get("source") == "log")
            ]
            manifest.append(entry)

    def _record(self, snapshot: dict[str, Any], run: ExecRun, start: float) -> None:
        t = run.timings_s
        parts = [f"start {t.get('start', 0):.2f} s"]
        if run.uploaded_bytes:
            where = run.facts.get("pyspy_at", "?")
            where = "a memfd" if where == "memfd" else f"{where} (removed at exit)"
            parts.append(
                f"py-spy sent ({run.uploaded_bytes / 1e6:.1f} MB, {t.get('upload', 0):.2f} s) into {where}"
            )
        elif run.facts.get("pyspy"):
            parts.append(f"py-spy {run.facts['pyspy']}")
        parts.append(f"probe {t.get('probe', 0):.2f} s")
        parts.append(f"python {run.facts.get('python', '?')}, uid {run.facts.get('uid', '?')}")
        if run.returncode not in (0, None):
            parts.append(f"exit {run.returncode}")
        entry = {
            "source": self.runtime if self.runtime != "via" else "exec",
            "status": "ok",
            "duration_s": round(time.monotonic() - start, 3),
            "detail": f"{self.describe()}: " + ", ".join(parts),
        }
        manifest = snapshot.setdefault("manifest", [])
        if isinstance(manifest, list):
            manifest.append(entry)
        notes = snapshot.setdefault("notes", [])
        if isinstance(notes, list):
            notes.extend(run.notes)
        target = snapshot.setdefault("target", {})
        if isinstance(target, dict):
            target.update({"kind": self.runtime, "name": self.name, "via": self.describe()})


async def run_command(
    argv: Sequence[str], timeout_s: float, env: Optional[dict[str, str]] = None
) -> tuple[Optional[int], bytes, bytes]:
    """Run a short command (inspect, logs, get); (returncode, stdout, stderr).

    FileNotFoundError when the binary is missing; TimeoutError when it overran (it is killed).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    async def capped(stream: Any) -> bytes:
        # a byte cap on each stream (`docker logs` of a server that logged one 1 GB line):
        # past it the command is stopped and what came is kept
        buf = bytearray()
        while True:
            chunk = await stream.read(1 << 16)
            if not chunk:
                return bytes(buf)
            buf.extend(chunk[: max(0, MAX_COMMAND_BYTES - len(buf))])
            if len(buf) >= MAX_COMMAND_BYTES:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return bytes(buf)

    async def both() -> tuple[bytes, bytes]:
        out, err = await asyncio.gather(capped(proc.stdout), capped(proc.stderr))
        await proc.wait()
        return out, err

    try:
        out, err = await asyncio.wait_for(both(), timeout_s)
    except (asyncio.TimeoutError, TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(proc.wait(), 2.0)
        raise
    return proc.returncode, out, err


def parse_snapshot(stdout: bytes) -> Optional[dict[str, Any]]:
    """The probe's snapshot: its one JSON line, the last line of stdout that is one. Lines
    before it (a login banner, an ``srun`` or ``kubectl`` notice) are skipped."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith(b"{"):
            continue
        try:
            value = bounded.loads(line, "the probe's answer")
        except ValueError:
            continue
        if isinstance(value, dict) and "schema_version" in value:
            return value
    return None


def first_line(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    return ""
