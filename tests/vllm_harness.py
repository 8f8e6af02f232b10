"""Real vLLM servers for the tests: start, wait, load, break, find their processes, stop.

The server runs from its own environment (``.venv-vllm``, made by tests/run-all.sh), as in
real deployments; hangdoctor runs from the test's. Servers listen on 127.0.0.1 only and serve
the tiny random model of tests/vllm_model.py (made once, cached under tests/.vllm-model).
Every wait is bounded; every server is started in its own session and killed as a process
group, by the fixture that started it and again at interpreter exit.

Ways to break a server, all of them things real deployments meet:
- ``server.block_steps()``: the test logits processor (tests/vllm_plugins) stops returning, so
  the step is stuck in a worker, in user code; ``server.release_steps()`` lets it go on;
- ``server.block_loop()`` + ``GET /hd-block``: the test middleware blocks the API server's
  event loop synchronously; ``release_loop()`` ends it;
- SIGSTOP / SIGKILL of a worker or of the engine core, sent by the test (``server.signal``);
- a model folder whose weights file is a FIFO nobody writes (``fifo_model_dir``): loading
  stalls in the read.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
VLLM_VENV = REPO_ROOT / ".venv-vllm"
MODEL_CACHE = REPO_ROOT / "tests" / ".vllm-model"
PLUGINS_DIR = REPO_ROOT / "tests" / "vllm_plugins"
MODEL_NAME = "tiny-llama"

MODEL_BUILD_TIMEOUT_S = 300.0
# Measured 40-60 s to serve on 2 idle cores; CI shares them with the rest of the suite.
READY_TIMEOUT_S = float(os.environ.get("HD_VLLM_READY_TIMEOUT_S", "420"))
STOP_TIMEOUT_S = 20.0
HTTP_TIMEOUT_S = 10.0

_live: list[VllmServer] = []


def vllm_python() -> Path | None:
    """The server environment's interpreter when vLLM is installed there, else None."""
    py = VLLM_VENV / "bin" / "python"
    if not py.exists():
        return None
    stamp = VLLM_VENV / ".hangdoctor-vllm-stamp"
    return py if stamp.exists() else None


def ensure_model() -> Path:
    """The tiny model's folder, made with the server's Python the first time."""
    out = MODEL_CACHE / MODEL_NAME
    if (out / ".complete").exists():
        return out
    py = vllm_python()
    if py is None:
        raise RuntimeError("no .venv-vllm: run bash tests/run-all.sh once")
    MODEL_CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(py), str(REPO_ROOT / "tests" / "vllm_model.py"), str(out)],
        check=True,
        timeout=MODEL_BUILD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    return out


def fifo_model_dir(workdir: Path) -> Path:
    """A copy of the tiny model whose ``model.safetensors`` is a FIFO that nobody writes:
    the loader's read never returns (weights that never arrive)."""
    src = ensure_model()
    dst = workdir / "fifo-model"
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy2(f, dst / f.name)
    fifo = dst / "model.safetensors"
    if not fifo.exists():
        os.mkfifo(fifo)
    return dst


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@dataclass
class VllmServer:
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log_path: Path
    model_dir: Path
    tp: int
    step_flag: Path
    loop_flag: Path
    started_at: float = field(default_factory=time.monotonic)
    ready_s: float | None = None
    broken: bool = False  # set by a test that leaves it unusable for others

    # ------------------------------------------------------------ processes
    @property
    def api_pid(self) -> int:
        return self.proc.pid

    def tree(self) -> dict[int, str]:
        """Every process of the server (pid -> command line), the API server first."""
        out: dict[int, str] = {}
        todo = [self.api_pid]
        while todo:
            pid = todo.pop(0)
            if pid in out:
                continue
            text = cmdline(pid)
            if not text:
                continue
            out[pid] = text
            todo.extend(_children(pid))
        return out

    def pid_of(self, title: str) -> int | None:
        """The pid whose command line (setproctitle title) starts with ``title``."""
        for pid, text in self.tree().items():
            if text.startswith(title):
                return pid
        return None

    def wait_for_process(self, title: str, timeout_s: float = 120.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid = self.pid_of(title)
            if pid is not None:
                return pid
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}); log:\n{self.log_tail()}")
            time.sleep(0.2)
        raise RuntimeError(f"no {title} process after {timeout_s:.0f} s; log:\n{self.log_tail()}")

    def signal(self, title: str, sig: int) -> int:
        pid = self.pid_of(title)
        if pid is None:
            raise RuntimeError(f"no process titled {title} in {self.tree()}")
        os.kill(pid, sig)
        return pid

    # ------------------------------------------------------------ HTTP
    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout_s: float = HTTP_TIMEOUT_S,
    ) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def health(self, timeout_s: float = 5.0) -> int | None:
        try:
            return self.request("GET", "/health", timeout_s=timeout_s)[0]
        except OSError:
            return None

    def complete(
        self, prompt: str = "hello the server", max_tokens: int = 4, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        code, text = self.request(
            "POST",
            "/v1/completions",
            {
                "model": str(self.model_dir),
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
            },
            timeout_s=timeout_s,
        )
        if code != 200:
            raise RuntimeError(f"completion failed: {code} {text[:300]}")
        return json.loads(text)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Wait until /health is 200 and one completion works; seconds since start."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited ({self.proc.returncode}) while starting; log:\n{self.log_tail()}"
                )
            if self.health(timeout_s=2.0) == 200:
                self.complete(timeout_s=max(5.0, deadline - time.monotonic()))
                self.ready_s = time.monotonic() - self.started_at
                return self.ready_s
            time.sleep(0.5)
        raise RuntimeError(f"vLLM not ready after {timeout_s:.0f} s; log:\n{self.log_tail()}")

    # ------------------------------------------------------------ breaking it
    def block_steps(self) -> None:
        self.step_flag.write_text("stuck\n")

    def release_steps(self) -> None:
        self.step_flag.unlink(missing_ok=True)

    def block_loop(self) -> None:
        self.loop_flag.write_text("blocked\n")

    def release_loop(self) -> None:
        self.loop_flag.unlink(missing_ok=True)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGKILL the whole process group (the server and every child it started)."""
        self.release_steps()
        self.release_loop()
        for pid in self.tree():  # a stopped process takes SIGKILL, but resume it anyway
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        if self in _live:
            _live.remove(self)


def start_server(
    workdir: Path,
    *,
    tp: int = 1,
    model_dir: Path | None = None,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> VllmServer:
    """Start ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (not waiting)."""
    py = vllm_python()
    if py is None:
        raise RuntimeError("no .venv-vllm: run bash tests/run-all.sh once")
    model = model_dir or ensure_model()
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "vllm.log"
    step_flag, loop_flag = workdir / "step.flag", workdir / "loop.flag"
    server_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "PYTHON"))
    }
    server_env.update(
        {
            "PATH": f"{py.parent}:{server_env.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(PLUGINS_DIR),
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HD_STEP_FLAG": str(step_flag),
            "HD_LOOP_FLAG": str(loop_flag),
        }
    )
    if tp > 1:
        server_env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i) for i in range(tp))
    server_env.update(env or {})
    argv = [
        str(py),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "256",
        "--dtype",
        "bfloat16",
        "--max-num-seqs",
        "8",
        "--logits-processors",
        "hd_vllm_plugins:FlagLogitsProcessor",
        "--middleware",
        "hd_vllm_plugins.BlockingMiddleware",
    ]
    if tp > 1:
        argv += ["--tensor-parallel-size", str(tp)]
    argv += extra_args or []
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(
            argv,
            cwd=str(workdir),
            env=server_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()
    server = VllmServer(
        proc=proc,
        port=port,
        workdir=workdir,
        log_path=log_path,
        model_dir=model,
        tp=tp,
        step_flag=step_flag,
        loop_flag=loop_flag,
    )
    _live.append(server)
    return server


@atexit.register
def _kill_all() -> None:
    for server in list(_live):
        server.stop()


class Load:
    """A steady load of concurrent clients: ``clients`` threads, each sending completions one
    after another to 127.0.0.1 (``pause_s`` apart) until stopped, at most ``max_requests``
    each and ``max_s``."""

    def __init__(
        self,
        server: VllmServer,
        clients: int = 3,
        max_tokens: int = 24,
        max_requests: int = 2000,
        max_s: float = 60.0,
        pause_s: float = 0.0,
    ) -> None:
        self.server, self.max_tokens, self.pause_s = server, max_tokens, pause_s
        self.max_requests, self.max_s = max_requests, max_s
        self.done = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        t0 = time.monotonic()
        for _ in range(self.max_requests):
            if self._stop.is_set() or time.monotonic() - t0 > self.max_s:
                return
            try:
                self.server.complete(max_tokens=self.max_tokens, timeout_s=60.0)
                with self._lock:
                    self.done += 1
                if self.pause_s:
                    self._stop.wait(self.pause_s)
            except Exception as exc:  # recorded; the test asserts on it
                with self._lock:
                    self.errors.append(str(exc)[:200])
                return

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=70.0)


class Pending:
    """One completion sent in a thread, left in flight (it returns once the test unblocks the
    server, or times out)."""

    def __init__(self, server: VllmServer, max_tokens: int = 8, timeout_s: float = 240.0) -> None:
        self.result: Any = None
        self.thread = threading.Thread(
            target=self._run, args=(server, max_tokens, timeout_s), daemon=True
        )
        self.thread.start()

    def _run(self, server: VllmServer, max_tokens: int, timeout_s: float) -> None:
        try:
            self.result = server.complete(max_tokens=max_tokens, timeout_s=timeout_s)
        except Exception as exc:
            self.result = exc

    @classmethod
    def get(cls, server: VllmServer, path: str, timeout_s: float = 120.0) -> Pending:
        """A GET of ``path`` left in flight the same way."""
        self = cls.__new__(cls)
        self.result = None

        def run() -> None:
            try:
                self.result = server.request("GET", path, timeout_s=timeout_s)
            except Exception as exc:
                self.result = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout=timeout_s)
