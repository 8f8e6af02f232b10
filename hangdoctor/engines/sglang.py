"""SGLang (the SRT runtime; from its source, its docs and the field corpus).

Processes: the main process (``python -m sglang.launch_server``; it runs the HTTP server and
the tokenizer manager), one scheduler per rank (titles ``sglang::scheduler_TP0``,
``sglang::scheduler_DP1_TP0``, ``..._PP1_...``: each does both scheduling and the model's
forward), ``sglang::detokenizer`` and, with data parallel, ``sglang::data_parallel_controller``.

``/health`` generates one token through the scheduler unless
``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`` (then it answers from the process alone);
``/health_generate`` always generates. Its watchdog (``--watchdog-timeout``, 300 s) dumps and
kills a scheduler whose loop stops.

Layer: engines; may import: the standard library and hangdoctor.engines.spec.
"""

from __future__ import annotations

from hangdoctor.engines import spec as b
from hangdoctor.engines.spec import (
    EngineModel,
    FrameRule,
    Health,
    LogEventRule,
    LogRule,
    Metrics,
    RoleRule,
    rx,
)

MODEL = EngineModel(
    name="sglang",
    title="SGLang",
    detect=rx(r"\bsglang\b|sglang\.launch_server|sglang::"),
    roles=(
        RoleRule(
            b.WORKER, rx(r"sglang::scheduler(?:_DP\d+)?(?:_PP\d+)?(?:_TP(?P<rank>\d+))?"), "tp"
        ),
        RoleRule(b.DETOKENIZER, rx(r"sglang::detokenizer")),
        RoleRule(b.DP_CONTROLLER, rx(r"sglang::data_parallel_controller")),
        RoleRule(b.API_SERVER, rx(r"sglang\.launch_server|\bsglang\s+serve\b|sglang_router")),
        RoleRule(b.RESOURCE_TRACKER, rx(r"multiprocessing\.resource_tracker")),
        RoleRule(b.COMPILE_WORKER, rx(r"torch/_inductor/compile_worker")),
    ),
    frames=(
        FrameRule(
            b.IN_COLLECTIVE,
            rx(
                r"broadcast_pyobj|_broadcast_reqs_across_ranks"
                r"|all_reduce|all_gather|barrier"
            ),
            "srt/",
            roles=(b.WORKER,),
        ),
        FrameRule(b.CAPTURING_GRAPHS, rx(r"capture|CudaGraphRunner"), "cuda_graph_runner.py"),
        FrameRule(
            b.LOADING, rx(r"load_model|load_weights|safetensors_weights_iterator"), "model_loader/"
        ),
        FrameRule(
            b.COMPILING,
            rx(r"."),
            "torch/_inductor/",
            unless=(("__call__", "_inductor/output_code.py"),),
        ),
        FrameRule(b.COMPILING, rx(r"."), "flashinfer/jit"),
        FrameRule(
            b.WARMING_UP, rx(r"_warmup|warmup|_execute_server_warmup"), "entrypoints/http_server.py"
        ),
        FrameRule(
            b.IDLE,
            rx(r"recv_requests|recv_pyobj|on_idle|self_check_during_idle"),
            "managers/scheduler",
            roles=(b.WORKER,),
        ),
        FrameRule(
            b.STEP, rx(r"run_batch|forward_batch_generation|forward|process_batch_result"), "srt/"
        ),
        FrameRule(b.IDLE, rx(r"event_loop"), "managers/detokenizer_manager.py"),
        b.ASYNCIO_SERVING,
    ),
    logs=(
        LogRule(b.LOADING, rx(r"Load weight begin|Loading safetensors checkpoint")),
        LogRule(b.WARMING_UP, rx(r"Load weight end|KV Cache is allocated|Memory pool end")),
        LogRule(b.CAPTURING_GRAPHS, rx(r"Capture (cuda|CUDA) graph begin")),
        LogRule(b.WARMING_UP, rx(r"Capture (cuda|CUDA) graph end")),
        LogRule(b.IDLE, rx(r"The server is fired up and ready to roll")),
        LogRule(b.STEP, rx(r"(Prefill|Decode) batch.*#running-req: [1-9]")),
    ),
    health=Health(
        path="/health",
        proves_generation=True,
        text=(
            "SGLang's /health generates one token through the scheduler (unless "
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0, when it only says the process is up); "
            "/health_generate always does: a 200 means a step finished just now"
        ),
    ),
    metrics=Metrics(
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        progress=(
            "sglang:generation_tokens_total",
            "sglang:prompt_tokens_total",
            "sglang:num_requests_total",
        ),
        prefix="sglang:",
    ),
    stats_line=rx(r"(Decode|Prefill) batch\. #running-req"),
    log_events=(
        LogEventRule(
            "load-done",
            rx(r"Load weight end\.(?:.*?avail mem=(?P<avail_gb>[\d.]+) ?GB)?"),
            ("Load weight end",),
        ),
        LogEventRule(
            "server-ready", rx(r"The server is fired up and ready to roll"), ("fired up",)
        ),
        LogEventRule(
            "request",
            rx(r"(?P<phase>Decode|Prefill) batch\..*?#running-req: (?P<running>\d+)"),
            ("batch.",),
        ),
        # The scheduler's own watchdog, and the py-spy dump it writes of a stuck scheduler.
        LogEventRule(
            "sglang-watchdog",
            rx(
                r"Scheduler watchdog timeout|watchdog timeout \(self\.watchdog_timeout"
                r"|Pyspy dump for PID (?P<dump_pid>\d+)"
            ),
            ("atchdog", "Pyspy"),
        ),
    ),
    notes=("metrics need --enable-metrics",),
)
