"""A real Docker engine for the container tests, and containers that run this checkout.

No registry is reachable here: the image is ``docker import`` of a tar holding only an empty
``/tmp``, and each container bind-mounts the host's /usr /lib /lib64 /bin /etc read-only, plus
this checkout (with its .venv) read-only and a work folder read-write, at the same paths. So a
container runs the host's Python and this checkout's code in its own PID, mount, IPC (and,
with ``network="none"``, network) namespaces, with Docker's default capabilities (no
SYS_PTRACE), and starts in well under a second. py-spy is not on its PATH: hangdoctor must
send it.

The engine: the one DOCKER_HOST (or /var/run/docker.sock) answers on, else a dockerd started
here with its data-root, exec-root and socket under /tmp/hangdoctor-dockerd (stopped again by
:meth:`Engine.stop`; containerd, which it starts, goes with it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from conftest import need, torch_available

from hangdoctor.scenarios.launch import scenario_argv

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGE = "hangdoctor-test-base:1"
HOST_MOUNTS = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
OWN_ENGINE_DIR = Path("/tmp/hangdoctor-dockerd")
ENGINE_START_TIMEOUT_S = 60.0
CMD_TIMEOUT_S = 60.0
# The host's own Python, which the mounts make available in the container; this checkout's
# .venv (its site-packages: torch for the gloo scenario) is added to its path when its
# Python has the same minor version.
CONTAINER_PYTHON = "/usr/bin/python3"


def container_pythonpath() -> str:
    paths = [str(REPO_ROOT)]
    try:
        out = subprocess.run([CONTAINER_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        out = ""
    site = REPO_ROOT / ".venv" / "lib" / f"python{out}" / "site-packages"
    if out and site.is_dir():
        paths.append(str(site))
    return ":".join(paths)


class EngineError(RuntimeError):
    pass


class Engine:
    """A Docker engine the tests may use: ``env`` points the docker CLI at it."""

    def __init__(self, env: dict[str, str], started: Optional[subprocess.Popen[bytes]] = None):
        self.env = env
        self.started = started
        self.containers: list[str] = []

    def docker(self, *args: str, check: bool = True, timeout_s: float = CMD_TIMEOUT_S,
               input_bytes: Optional[bytes] = None) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run(["docker", *args], env=self.env, capture_output=True,
                              timeout=timeout_s, input=input_bytes)
        if check and proc.returncode != 0:
            raise EngineError(f"docker {' '.join(args[:3])}: {proc.stderr.decode()[-2000:]}")
        return proc

    def ensure_image(self) -> str:
        if self.docker("image", "inspect", IMAGE, check=False).returncode == 0:
            return IMAGE
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("tmp")
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
        self.docker("import", "-", IMAGE, input_bytes=buf.getvalue())
        return IMAGE

    def run(self, argv: list[str], *, name: Optional[str] = None, workdir: Optional[str] = None,
            shm_size: Optional[str] = None, user: Optional[str] = None, network: str = "none",
            cap_add: tuple[str, ...] = (), memory: Optional[str] = None,
            env: Optional[dict[str, str]] = None, mounts: tuple[str, ...] = ()) -> str:
        """Start a detached container running ``argv``; returns its name."""
        name = name or f"hd-test-{uuid.uuid4().hex[:8]}"
        args = ["run", "-d", "--name", name, "--network", network, "-w", str(REPO_ROOT),
                "-e", f"PYTHONPATH={container_pythonpath()}", "-e", "PYTHONDONTWRITEBYTECODE=1"]
        for m in HOST_MOUNTS:
            if os.path.isdir(m):  # a merged-/usr symlink is mounted as its target
                args += ["-v", f"{m}:{m}:ro"]
        args += ["-v", f"{REPO_ROOT}:{REPO_ROOT}:ro"]
        if workdir:
            args += ["-v", f"{workdir}:{workdir}"]
        for m in mounts:  # SRC:DST[:ro]
            args += ["-v", m]
        if shm_size:
            args += ["--shm-size", shm_size]
        if user:
            args += ["--user", user]
        if memory:
            args += ["--memory", memory]
        for cap in cap_add:
            args += ["--cap-add", cap]
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        self.containers.append(name)
        self.docker(*args, self.ensure_image(), *argv)
        return name

    def inspect(self, name: str) -> dict[str, Any]:
        return json.loads(self.docker("inspect", name).stdout)[0]

    def remove_all(self) -> None:
        for name in self.containers:
            self.docker("rm", "-f", name, check=False)
        self.containers.clear()

    def stop(self) -> None:
        """Remove the containers started here; stop the engine if it was started here."""
        self.remove_all()
        if self.started is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.started.send_signal(signal.SIGTERM)
        try:
            self.started.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.started.pid, signal.SIGKILL)
            self.started.wait(timeout=10)
        self.started = None


def _answers(env: dict[str, str]) -> bool:
    try:
        proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], env=env,
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def engine_available() -> bool:
    return shutil.which("docker") is not None and (
        shutil.which("dockerd") is not None or _answers(dict(os.environ)))


def start_engine() -> Engine:
    """The engine already running, or one started here (root only)."""
    env = dict(os.environ)
    if shutil.which("docker") and _answers(env):
        return Engine(env)
    own_sock = OWN_ENGINE_DIR / "docker.sock"
    own_env = dict(env, DOCKER_HOST=f"unix://{own_sock}")
    if _answers(own_env):  # left by an earlier run that could not stop it: reuse it
        return Engine(own_env)
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        raise EngineError("no Docker engine answers and dockerd cannot be started here (root)")
    OWN_ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    log = open(OWN_ENGINE_DIR / "dockerd.log", "ab")  # noqa: SIM115 - the daemon writes it
    proc = subprocess.Popen(
        [dockerd, "--data-root", str(OWN_ENGINE_DIR / "root"),
         "--exec-root", str(OWN_ENGINE_DIR / "exec"), "--host", f"unix://{own_sock}",
         "--pidfile", str(OWN_ENGINE_DIR / "dockerd.pid"), "--iptables=false",
         "--bridge=none", "--storage-driver", "overlay2"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (OWN_ENGINE_DIR / "dockerd.log").read_text(errors="replace")[-1500:]
            raise EngineError(f"dockerd exited with {proc.returncode}: {tail}")
        if _answers(own_env):
            return Engine(own_env, proc)
        time.sleep(0.2)
    proc.kill()
    raise EngineError(f"dockerd did not answer within {ENGINE_START_TIMEOUT_S:.0f} s")


def wait_file(path: Path, timeout_s: float, engine: Engine, name: str) -> dict[str, Any]:
    """Wait for a scenario's ready file written from inside a container."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            with contextlib.suppress(ValueError):
                return json.loads(path.read_text())
        state = engine.inspect(name).get("State") or {}
        if not state.get("Running"):
            logs = engine.docker("logs", name, check=False)
            raise EngineError(f"container {name} exited ({state.get('ExitCode')}): "
                              f"{(logs.stdout + logs.stderr).decode()[-2000:]}")
        time.sleep(0.1)
    raise EngineError(f"{path} not written within {timeout_s:.0f} s")


# ------------------------------------------------------------------ pytest fixtures

READY_TIMEOUT_S = {"gloo_desync": 120.0}


@dataclass
class Ctr:
    name: str
    raw: dict[str, Any]  # the scenario's ready file: pids as the container sees them
    host_pid: int  # the container's init (the scenario's launcher) as the host sees it
    workdir: Path
    diff_at_start: str  # `docker diff`: the mount points Docker made


@pytest.fixture(scope="session", name="docker_engine")
def docker_engine_fixture() -> Iterator[Engine]:
    need(engine_available(), "a Docker engine (apt-get install docker.io)")
    try:
        engine = start_engine()
    except EngineError as exc:
        need(False, f"a Docker engine ({exc})")
        raise
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(name="in_container")
def in_container_fixture(docker_engine: Engine, tmp_path: Path) -> Iterator[Callable[..., Ctr]]:
    """``in_container("postload", workers=4, shm_size="16m", ...)``: a scenario as a
    container's init, logging to its stdout (as servers in containers do)."""

    def start(scenario: str, *, shm_size: str | None = None, network: str = "none",
              cap_add: tuple[str, ...] = (), as_uid: int | None = None,
              env: dict[str, str] | None = None, **options: Any) -> Ctr:
        if scenario == "gloo_desync":
            need(torch_available(), "torch")
        workdir = tmp_path / f"ctr-{scenario}-{len(docker_engine.containers)}"
        workdir.mkdir()
        workdir.chmod(0o777)  # a server of another uid writes its ready file here
        ready = workdir / "ready.json"
        # another uid cannot open the container's stdout (a pipe of root's): a log file then
        log = "/dev/stdout" if as_uid is None else str(workdir / "server.log")
        argv = scenario_argv(scenario, str(ready), log=log, max_lifetime_s=180,
                             python=CONTAINER_PYTHON, **options)
        if as_uid is not None:
            # root in the container starts the server as another uid (as images with a
            # USER line do), so that root's ptrace of it needs CAP_SYS_PTRACE
            argv = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"] + argv
        name = docker_engine.run(argv, workdir=str(workdir), shm_size=shm_size, network=network,
                                 cap_add=cap_add, env=env)
        raw = wait_file(ready, READY_TIMEOUT_S.get(scenario, 60.0), docker_engine, name)
        host_pid = int(docker_engine.inspect(name)["State"]["Pid"])
        diff = docker_engine.docker("diff", name).stdout.decode()
        return Ctr(name, raw, host_pid, workdir, diff)

    try:
        yield start
    finally:
        docker_engine.remove_all()


