"""``docker:NAME``: the probe runs inside a Docker container through ``docker exec -i``.

The container's own view: its processes with their container PIDs, its /dev/shm, its cgroup
limits. Alongside the probe, ``docker inspect`` gives the runtime's view (id, image, host PID
of its init, --shm-size, --ipc, capabilities, memory limit, GPUs requested, OOMKilled), and
after the window ``docker logs`` gives what the server printed (the runtime keeps its stdout).
The docker CLI honours DOCKER_HOST and DOCKER_CONTEXT as usual; ``--context`` picks one.

Layer: reach; may import: the standard library, hangdoctor.errors, hangdoctor.reach and hangdoctor.collect (the container facts).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Optional

from hangdoctor.errors import TargetError, UsageError
from hangdoctor.reach.exec_pipe import ExecPipeTarget, first_line, run_command

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
LOG_TAIL_LINES = 400


def parse_docker_spec(spec: str) -> str:
    """``docker:NAME`` (or an id) -> NAME."""
    name = spec.split(":", 1)[1] if spec.startswith("docker:") else spec
    if not name or not _NAME_RE.match(name):
        raise UsageError(
            f"{spec!r}: not a container name or id",
            "write docker:NAME (as `docker ps` shows it) or docker:ID",
        )
    return name


class DockerTarget(ExecPipeTarget):
    runtime = "docker"

    def __init__(
        self,
        spec: str,
        *,
        docker: str = "docker",
        context: Optional[str] = None,
        user: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        self.container = parse_docker_spec(spec)
        self.docker = docker
        self.base = [docker] + (["--context", context] if context else [])
        prefix = self.base + ["exec", "-i"]
        if user:
            prefix += ["-u", user]
        super().__init__(
            spec if spec.startswith("docker:") else f"docker:{spec}",
            prefix + [self.container],
            **kwargs,
        )

    def missing_binary(self) -> TargetError:
        return TargetError(
            f"{self.name}: {self.docker}: command not found",
            "install the docker CLI (apt-get install docker.io) or diagnose from the host "
            "by PID: hangdoctor diagnose localhost --pid HOST_PID",
        )

    def classify_failure(self, stderr_text: str, returncode: Optional[int]) -> TargetError:
        return docker_error(self.name, self.container, stderr_text, returncode)

    async def runtime_facts(self) -> Optional[dict[str, Any]]:
        try:
            rc, out, err = await run_command(
                self.base + ["inspect", "--type", "container", self.container], 10.0, self.env
            )
        except FileNotFoundError:
            raise self.missing_binary() from None
        if rc != 0:
            raise docker_error(self.name, self.container, first_line(err), rc)
        try:
            doc = json.loads(out)
        except ValueError:
            return None
        if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
            return None
        return inspect_facts(doc[0])

    async def runtime_log(self, since_epoch_s: float) -> Optional[dict[str, Any]]:
        # --timestamps: lines printed during the window tell that the log grew
        rc, out, _ = await run_command(
            self.base + ["logs", "--timestamps", "--tail", str(LOG_TAIL_LINES), self.container],
            5.0,
            self.env,
        )
        # `docker logs` writes the container's stderr to its stderr: both are the server's log
        if rc != 0:
            return None
        return log_from_lines(
            out.decode("utf-8", "replace").splitlines(),
            since_epoch_s,
            f"docker logs {self.container}",
        )


def docker_error(name: str, container: str, text: str, returncode: Optional[int]) -> TargetError:
    """One line for each way ``docker exec``/``inspect`` fails before our shell runs."""
    low = text.lower()
    if "no such container" in low or "no such object" in low:
        return TargetError(
            f"{name}: no container named {container!r}",
            "see `docker ps` for the running containers' names",
        )
    if "is not running" in low or "is paused" in low or "is restarting" in low:
        return TargetError(
            f"{name}: {text}", "the container stopped: `docker logs` shows why; nothing to probe"
        )
    if "permission denied" in low and "docker" in low:
        return TargetError(
            f"{name}: no permission to use the Docker daemon ({text})",
            "run as root, or as a member of the docker group",
        )
    if "cannot connect to the docker daemon" in low or "is the docker daemon running" in low:
        return TargetError(
            f"{name}: the Docker daemon is not reachable ({text})",
            "start dockerd, or point DOCKER_HOST / --context at the right one",
        )
    if "executable file not found" in low or "no such file or directory" in low:
        return TargetError(
            f"{name}: the container has no sh ({text})",
            "a distroless image: diagnose it from the host by PID "
            "(hangdoctor diagnose localhost --pid HOST_PID; docker inspect -f '{{.State.Pid}}')",
        )
    return TargetError(
        f"{name}: docker exec failed: {text or f'exit {returncode}'}",
        "run `docker exec -i CONTAINER sh -c true` by hand to see why",
    )


def inspect_facts(doc: dict[str, Any]) -> dict[str, Any]:
    """The container facts of one ``docker inspect`` document: the names
    collect/container_runtime.py gives the same facts when it reads the runtime's state files
    from the host (one mapping, ``docker_facts``, serves both)."""
    from hangdoctor.collect.container_runtime import docker_facts

    facts = {
        "runtime": "docker",
        "engine": "docker",
        "id": doc.get("Id"),
        "short_id": str(doc.get("Id") or "")[:12] or None,
        "state_source": "docker inspect",
    }
    facts.update(docker_facts(doc, doc.get("HostConfig") or {}))
    return {k: v for k, v in facts.items() if v is not None}


_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)? ?")


def _epoch(stamp: str) -> Optional[float]:
    m = _TS_RE.match(stamp)
    if not m:
        return None
    import calendar

    base = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    frac = float("0." + m.group(2)) if m.group(2) else 0.0
    tz = m.group(3) or "Z"
    offset = 0
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        offset = sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return base + frac - offset


def log_from_lines(lines: list[str], since_epoch_s: float, path: str) -> dict[str, Any]:
    """A snapshot ``log`` from ``--timestamps`` lines (docker logs, kubectl logs): the text
    without its stamps, and how much of it was printed since the probe started."""
    tail: list[str] = []
    grew = 0
    last: Optional[float] = None
    for line in lines[-LOG_TAIL_LINES:]:
        m = _TS_RE.match(line)
        stamp = _epoch(line) if m else None
        text = line[m.end() :] if m else line
        tail.append(text)
        if stamp is not None:
            last = stamp
            if stamp >= since_epoch_s - 0.05:
                grew += len(text) + 1
    now = time.time()
    return {
        "path": path,
        "size_start": None,
        "size_end": None,
        "grew_bytes": grew,
        "mtime": last,
        "age_s": round(max(0.0, now - last), 2) if last is not None else None,
        "tail": tail,
        "auto_detected": True,
        "format": "runtime",
    }
