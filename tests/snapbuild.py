"""Small builders for synthetic snapshots shaped like the recorded ones (SCHEMA.md).

Used by the per-check fixture tests where a situation cannot be produced on this machine
(a GPU, an Xid, a full /dev/shm). Recorded snapshots live in tests/fixtures/snapshots/.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"

C10D = "torch/distributed/distributed_c10d.py"
CONN = "multiprocessing/connection.py"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def frames(*spec: tuple[str, str, int]) -> list[dict[str, Any]]:
    return [{"name": n, "filename": f, "short_filename": f, "line": ln, "native": not f.endswith(".py")}
            for n, f, ln in spec]


RECV = frames(("_recv", CONN, 395), ("_recv_bytes", CONN, 430), ("recv", CONN, 250),
              ("worker_main", "vllm/executor/multiproc_worker_utils.py", 240))
BUSY = frames(("matmul_loop", "model_runner.py", 88), ("execute_model", "worker.py", 120))
BUSY2 = frames(("matmul_loop", "model_runner.py", 91), ("execute_model", "worker.py", 120))


def coll(op: str) -> list[dict[str, Any]]:
    return frames((op, C10D, 2500), ("wrapper", "torch/distributed/c10d_logger.py", 83),
                  ("step", "worker.py", 40))


SYNC = frames(("synchronize", "torch/cuda/__init__.py", 985), ("step", "worker.py", 44))
EVENT_WAIT = frames(("wait", "threading.py", 331), ("wait", "threading.py", 629), ("park", "worker.py", 60))
RDZV = frames(("_create_c10d_store", "torch/distributed/rendezvous.py", 189),
              ("_env_rendezvous_handler", "torch/distributed/rendezvous.py", 279),
              ("init_process_group", C10D, 1500), ("main", "worker.py", 20))
LOCK = frames(("acquire", "filelock/_api.py", 330), ("__enter__", "filelock/_api.py", 376),
              ("hf_hub_download", "huggingface_hub/file_download.py", 900))
IO = frames(("safe_open", "safetensors/torch.py", 310), ("load_weights", "model_loader/weight_utils.py", 420))
CAPTURE = frames(("capture", "torch/cuda/graphs.py", 180), ("capture_model", "vllm/worker/model_runner.py", 1500))
COMPILE = frames(("compile_fx", "torch/_inductor/compile_fx.py", 700), ("compile", "torch/_dynamo/eval_frame.py", 400))
TOKENIZER = frames(("encode", "transformers/tokenization_utils_base.py", 2600),
                   ("handle_request", "vllm/entrypoints/openai/serving_chat.py", 200))


def proc(pid: int, rank: int | None = None, role: str = "worker", state: str = "S", cpu: float = 0.0,
         env: dict[str, str] | None = None, cmdline: list[str] | None = None, alive: bool = True,
         threads: list[dict[str, Any]] | None = None, listen: list[dict[str, Any]] | None = None,
         name: str = "python3", ppid: int = 100, **extra: Any) -> dict[str, Any]:
    e = dict(env or {})
    if rank is not None:
        e.setdefault("RANK", str(rank))
    p = {
        "pid": pid, "ppid": ppid, "root_pid": 100, "name": name,
        "cmdline": cmdline or ["python3", "-m", "worker", "--rank", str(rank)] if rank is not None else (cmdline or ["python3", "serve.py"]),
        "status": state, "status_end": state if alive else "X", "wchan": "futex_wait_queue", "alive": alive,
        "zombie": state == "Z", "cpu_delta_s": cpu, "cpu_pct": cpu / 2.0 * 100, "num_threads": 4,
        "threads": threads or [{"tid": pid, "name": name, "status": state, "wchan": "futex_wait_queue", "cpu_delta_s": cpu}],
        "rss_bytes": 200 << 20, "vms_bytes": 2 << 30, "swap_bytes": 0, "listen": listen or [], "env": e,
        "env_status": "ok", "rank": rank, "role": role, "is_python": True,
    }
    p.update(extra)
    return p


def stack(fr: list[dict[str, Any]], second: list[dict[str, Any]] | None = None, active: bool = False,
          thread: str = "MainThread", extra_threads: list[tuple[str, list]] | None = None) -> dict[str, Any]:
    def sample(f: list[dict[str, Any]], t: float) -> dict[str, Any]:
        ths = [{"thread_id": 1, "os_thread_id": 1, "name": thread, "active": active, "owns_gil": False, "frames": f}]
        for i, (n, ff) in enumerate(extra_threads or []):
            ths.append({"thread_id": 2 + i, "os_thread_id": 2 + i, "name": n, "active": False, "owns_gil": False, "frames": ff})
        return {"t": t, "threads": ths}
    return {"status": "ok", "duration_s": 0.01, "samples": [sample(fr, 0.0), sample(second if second is not None else fr, 2.0)]}


def gpu(index: int, util: float, power_w: float, mem_mib: float, pids: list[int], limit_w: float = 700.0,
        total_mib: int = 143771, **extra: Any) -> dict[str, Any]:
    d = {"index": index, "uuid": f"GPU-{index}", "name": "NVIDIA H200", "mem_total_mib": total_mib,
         "power_limit_w": limit_w, "unsupported": [], "errors": {},
         "samples": [{"t": t, "util_pct": util, "mem_used_mib": mem_mib, "power_w": power_w} for t in (0.0, 1.0, 2.0)],
         "processes": [{"pid": p, "used_mib": mem_mib - 500} for p in pids]}
    d.update(extra)
    return d


def snap(processes: list[dict[str, Any]] | None = None, stacks: dict[int, dict[str, Any]] | None = None,
         gpus: list[dict[str, Any]] | None = None, log: list[str] | None = None, log_grew: int = 0,
         http: list[dict[str, Any]] | None = None, kernel: list[str] | None = None,
         host_memory: dict[str, Any] | None = None, shm: dict[str, Any] | None = None,
         manifest: list[dict[str, Any]] | None = None, origin: str = "live", window_s: float | None = 2.0,
         roots: list[int] | None = None, versions: dict[str, str] | None = None, gpu_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "schema_version": 1, "origin": origin, "redacted": True,
        "host": {"name": "localhost", "hostname": "test"},
        "targets": {"root_pids": roots if roots is not None else [100]},
        "manifest": list(manifest or []), "processes": copy.deepcopy(processes or []),
        "stacks": {str(k): v for k, v in (stacks or {}).items()},
    }
    if window_s is not None and origin == "live":
        s["window_s"] = window_s
    if gpus is not None:
        s["gpus"] = {"status": "ok", "backend": "fake", "devices": gpus, **(gpu_meta or {})}
    if log is not None:
        s["log"] = {"path": "/var/log/server.log", "size_start": 1000, "size_end": 1000 + log_grew,
                    "grew_bytes": log_grew, "age_s": 0.5 if log_grew else 300.0, "tail": log}
    if http is not None:
        s["http"] = http
    if kernel is not None:
        s["kernel_log"] = {"lines": kernel}
    if host_memory is not None:
        s["host_memory"] = host_memory
    if shm is not None:
        s["shm"] = shm
    if versions is not None:
        s["versions"] = versions
    return s


LAUNCHER = proc(100, None, role="launcher", ppid=1, cmdline=["python3", "-m", "vllm.entrypoints.openai.api_server", "--tensor-parallel-size", "2"])
