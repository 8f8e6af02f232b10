"""Several hosts at once: parse what the user typed, collect concurrently under one deadline.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import HangdoctorError, UsageError
from hangdoctor.reach.base import HostResult, Target

LOCAL_NAMES = ("localhost", "local")


def parse_host_spec(spec: str, **ssh_kwargs: Any) -> Target:
    """``localhost`` / ``local`` -> the local target; anything else -> an :class:`SshTarget`.

    ``127.0.0.1`` stays SSH on purpose: it may be a forwarded port or a container's sshd.
    ``ssh_kwargs`` go to SshTarget (identity, ssh_options, known_hosts, connect_timeout_s...).
    """
    name = spec.strip()
    if name.lower() in LOCAL_NAMES:
        from hangdoctor.reach.local import LocalTarget  # lazy: psutil stays off this path

        return LocalTarget(name)
    from hangdoctor.reach.ssh import SshTarget  # lazy: asyncssh is slow to import

    return SshTarget(name, **ssh_kwargs)


async def _collect_one(
    target: Target, config: ProbeConfig, end: float, on_started: Callable[[], None]
) -> HostResult:
    start = time.monotonic()
    name = getattr(target, "name", repr(target))
    result = HostResult(name=name)
    try:
        remaining_s = max(0.0, end - start)
        result.snapshot = await asyncio.wait_for(target.collect(config, on_started), remaining_s)
    except HangdoctorError as exc:
        result.error, result.remedy = exc.message, exc.remedy
    except (asyncio.TimeoutError, TimeoutError):
        result.error = f"{name}: no result within the overall deadline"
        result.remedy = "the host may be wedged; raise --deadline or diagnose it alone"
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # one host's bug must not lose the other hosts' evidence
        result.error = f"{name}: collection failed: {type(exc).__name__}: {exc}"
        result.remedy = "this is a hangdoctor bug; please report it with the message"
    finally:
        on_started()  # a host that failed before its probe ran is not waited for either
    result.duration_s = time.monotonic() - start
    return result


async def collect_all(
    targets: list[Target],
    config_for: Callable[[Target], ProbeConfig],
    deadline_s: float,
    all_started: Optional[threading.Event] = None,
) -> list[HostResult]:
    """Collect from every target concurrently; one HostResult per target, in input order.

    Never raises for one host's failure: it becomes that host's ``error`` and ``remedy``.
    ``deadline_s`` bounds the whole call; a host still busy then is reported as timed out.
    ``all_started`` is set once every host's probe runs (or its host failed before that).
    """
    end = time.monotonic() + deadline_s
    results: list[HostResult] = []
    jobs = []
    for target in targets:
        try:
            config = config_for(target)
        except HangdoctorError as exc:
            results.append(HostResult(name=target.name, error=exc.message, remedy=exc.remedy))
            continue
        results.append(HostResult(name=target.name))
        jobs.append((len(results) - 1, target, config))
    waiting = {id(target) for _, target, _ in jobs}

    def started_for(target: Target) -> Callable[[], None]:
        def started() -> None:
            waiting.discard(id(target))
            if not waiting and all_started is not None:
                all_started.set()

        return started

    if not jobs and all_started is not None:
        all_started.set()
    done = await asyncio.gather(
        *(_collect_one(target, config, end, started_for(target)) for _, target, config in jobs)
    )
    for (index, _, _), result in zip(jobs, done):
        results[index] = result
    return results


def parse_pid_args(pids: list[str], hosts: list[str]) -> dict[str, list[int]]:
    """Map ``--pid 123`` (only with a single host) and ``--pid HOST:123`` to each host's pids.

    Every host appears in the result (an empty list: discover the servers there).
    """
    by_host: dict[str, list[int]] = {host: [] for host in hosts}
    for raw in pids:
        text = raw.strip()
        host, sep, pid_text = text.rpartition(":")
        if sep and not host:
            raise UsageError(f"--pid {raw!r}: no host before ':'", "write --pid HOST:PID")
        if not sep:
            if len(hosts) != 1:
                raise UsageError(
                    f"--pid {text} is ambiguous with {len(hosts)} hosts",
                    f"write --pid HOST:{text}, e.g. --pid {hosts[0] if hosts else 'HOST'}:{text}",
                )
            host = hosts[0]
        elif host not in by_host:
            raise UsageError(
                f"--pid {text} names host {host!r}, which is not among the hosts given",
                "use the host exactly as given: " + ", ".join(hosts),
            )
        pid = _parse_pid(pid_text, raw)
        if pid not in by_host[host]:
            by_host[host].append(pid)
    return by_host


def _parse_pid(text: str, raw: str) -> int:
    try:
        pid = int(text)
    except ValueError:
        raise UsageError(f"--pid {raw!r}: {text!r} is not a process id") from None
    if pid <= 0:
        raise UsageError(f"--pid {raw!r}: a process id is a positive number")
    return pid


@dataclass
class HostsFileEntry:
    host: str
    pids: list[int] = field(default_factory=list)


def parse_hosts_file(path: str) -> list[HostsFileEntry]:
    """Read a hosts file: one host per line, ``#`` comments, optional ``pid=123,456``.

    ::

        # the TP group
        gpu-node-1 pid=46294
        root@gpu-node-2:2222   pid=1001,1002
    """
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"cannot read hosts file {path}: {exc.strerror}", "check the --hosts-file path"
        ) from None
    entries: dict[str, HostsFileEntry] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        entry = entries.setdefault(words[0], HostsFileEntry(words[0]))
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if key != "pid" or not sep or not value:
                raise UsageError(
                    f"{path}:{number}: unexpected {word!r}", "write: HOST [pid=123,456]"
                )
            for item in value.split(","):
                pid = _parse_pid(item.strip(), f"{path}:{number}")
                if pid not in entry.pids:
                    entry.pids.append(pid)
    return list(entries.values())


def read_hosts_file(path: str) -> list[str]:
    """The hosts named in a hosts file, in order, each once."""
    return [entry.host for entry in parse_hosts_file(path)]


def hosts_file_pid_args(path: str) -> list[str]:
    """The ``pid=`` entries of a hosts file as ``HOST:PID`` strings for :func:`parse_pid_args`."""
    return [f"{e.host}:{pid}" for e in parse_hosts_file(path) for pid in e.pids]
