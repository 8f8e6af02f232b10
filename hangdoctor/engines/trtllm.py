"""TensorRT-LLM (``trtllm-serve``, and the Triton TensorRT-LLM backend; from their docs and
the field corpus).

Processes: ``trtllm-serve`` (the OpenAI-compatible API, with the executor's proxy), MPI
workers started through mpi4py (``mpi4py.futures.server`` / ``tensorrt_llm...worker``; rank in
``OMPI_COMM_WORLD_RANK``), or ``tritonserver`` with one ``triton_python_backend_stub`` per
Python model instance.

``trtllm-serve``'s ``/health`` says the HTTP server is up; Triton's ``/v2/health/ready`` says
the models are loaded. Neither runs a request through the executor.

Layer: engines; may import: the standard library and hangdoctor.engines (engine models are
data).
"""

from __future__ import annotations

from hangdoctor.engines import spec as b
from hangdoctor.engines.spec import EngineModel, FrameRule, Health, LogRule, Metrics, RoleRule, rx

MODEL = EngineModel(
    name="trtllm",
    title="TensorRT-LLM",
    detect=rx(r"tensorrt_llm|trtllm-serve|\btrtllm\b|tritonserver|triton_python_backend_stub"),
    roles=(
        RoleRule(b.API_SERVER, rx(r"trtllm-serve|\btritonserver\b")),
        RoleRule(
            b.WORKER,
            rx(
                r"mpi4py\.futures\.server|tensorrt_llm\S*worker"
                r"|triton_python_backend_stub"
            ),
            "tp",
        ),
        RoleRule(b.LAUNCHER, rx(r"\bmpirun\b|\bmpiexec\b")),
    ),
    frames=(
        FrameRule(
            b.IN_COLLECTIVE, rx(r"allreduce|all_reduce|allgather|barrier|bcast"), "tensorrt_llm/"
        ),
        FrameRule(b.LOADING, rx(r"load_weights|load_checkpoint|from_checkpoint"), "tensorrt_llm/"),
        FrameRule(b.WARMING_UP, rx(r"warmup|_run_warmup"), "tensorrt_llm/"),
        FrameRule(b.CAPTURING_GRAPHS, rx(r"capture"), "cuda_graph"),
        FrameRule(
            b.IDLE,
            rx(
                r"_fetch_new_requests|_fetch_and_activate_new_requests|get"
                r"|wait"
            ),
            "pyexecutor/",
            unless=(("forward", "pyexecutor/"),),
        ),
        FrameRule(b.STEP, rx(r"_executor_loop|_forward_step|forward|_sample_async"), "pyexecutor/"),
        b.ASYNCIO_SERVING,
    ),
    logs=(
        LogRule(b.LOADING, rx(r"Loading (weights|checkpoint|engine)|Loading model")),
        LogRule(b.WARMING_UP, rx(r"[Ww]arm(ing)?[ -]?up")),
        LogRule(
            b.IDLE,
            rx(
                r"Application startup complete|Uvicorn running on"
                r"|Started (GRPC|HTTP)Service"
            ),
        ),
    ),
    health=Health(
        path="/health",
        proves_generation=False,
        text=(
            "TensorRT-LLM's trtllm-serve /health says the HTTP server is up, and Triton's "
            "/v2/health/ready that the models are loaded; neither runs a request through the "
            "executor"
        ),
    ),
    metrics=Metrics(
        running=("nv_inference_pending_request_count",),
        waiting=(),
        progress=("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"),
        prefix="nv_inference_",
    ),
    stats_line=None,
    notes=("trtllm-serve's /metrics is JSON iteration statistics, not Prometheus text",),
)
