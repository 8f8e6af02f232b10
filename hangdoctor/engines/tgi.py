"""Text Generation Inference (from its source, its docs and the field corpus).

Processes: ``text-generation-launcher`` (Rust; starts the rest and watches them), the router
``text-generation-router`` (Rust; the HTTP API, batching and the queue), and one Python shard
per rank (``text-generation-server serve MODEL ...``; ``RANK`` / ``WORLD_SIZE`` in its
environment) that the router drives over gRPC on a Unix socket.

``/health`` is the router's: 200 when the last batch it ran succeeded, else it sends the
shards a one-token prefill first; so it proves the shards answered recently, not that the batch
now running will finish.

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
    name="tgi",
    title="Text Generation Inference",
    detect=rx(r"text-generation-(launcher|router|server)"),
    roles=(
        RoleRule(b.LAUNCHER, rx(r"text-generation-launcher")),
        RoleRule(b.API_SERVER, rx(r"text-generation-router")),
        RoleRule(b.WORKER, rx(r"text-generation-server\s+serve"), "tp"),
    ),
    frames=(
        FrameRule(
            b.IN_COLLECTIVE, rx(r"all_reduce|all_gather|barrier|broadcast"), "torch/distributed/"
        ),
        FrameRule(
            b.LOADING,
            rx(r"get_tensor|get_sharded|get_multi_weights|load|__init__"),
            "text_generation_server/utils/weights.py",
        ),
        FrameRule(b.WARMING_UP, rx(r"[Ww]armup"), "text_generation_server/"),
        FrameRule(
            b.CAPTURING_GRAPHS, rx(r"cuda_graph_warmup|capture"), "text_generation_server/models/"
        ),
        FrameRule(b.STEP, rx(r"Prefill|Decode|generate_token|forward"), "text_generation_server/"),
        FrameRule(
            b.IDLE,
            rx(r"serve_inner|wait_for_termination|_run_once|run_forever|select"),
            "",
            roles=(b.WORKER,),
        ),
    ),
    logs=(
        LogRule(b.LOADING, rx(r"Starting shard|Waiting for shard to be ready|Downloading")),
        LogRule(b.WARMING_UP, rx(r"Shard ready in|Warming up model")),
        LogRule(b.IDLE, rx(r"Connected|Setting max batch total tokens")),
        LogRule(b.STEP, rx(r"generate\{.*\}|Success")),
    ),
    health=Health(
        path="/health",
        proves_generation=True,
        text=(
            "TGI's /health is its router's: 200 when the last batch succeeded, otherwise it "
            "first runs a one-token prefill through the shards; it does not prove that the "
            "batch running now will finish"
        ),
    ),
    metrics=Metrics(
        running=("tgi_batch_current_size",),
        waiting=("tgi_queue_size",),
        progress=(
            "tgi_request_success",
            "tgi_batch_inference_count",
            "tgi_request_generated_tokens_sum",
        ),
        prefix="tgi_",
    ),
    stats_line=None,
    log_events=(
        LogEventRule("load-done", rx(r"Shard ready in (?P<seconds>[\d.]+) ?s"), ("Shard ready",)),
        # "Connected" or "Ready" ends the line; one that starts the HTTP server or falls back
        # to another address first is not the ready line.
        LogEventRule(
            "server-ready", rx(r"(?:^|\s)(?:Connected|Ready)\s*$"), ("Connected", "Ready")
        ),
        LogEventRule(
            "server-ready", rx(r"Starting HTTP server|Invalid hostname, defaulting"), veto=True
        ),
        LogEventRule("request", rx(r"router::server.*Success"), ("Success",)),
        LogEventRule("shard-exit", rx(r"Shard (?P<rank>\d+) failed to start"), ("Shard",)),
        LogEventRule(
            "shard-exit",
            rx(r"Shard process was signaled to shutdown with signal (?P<signal>\d+)"),
            ("Shard",),
        ),
        LogEventRule("shard-exit", rx(r"Shard (?P<rank>\d+) (?:crashed|terminated)"), ("Shard",)),
        LogEventRule(
            "waiting-for-shard",
            rx(r"Waiting for shard(?: (?P<rank>\d+))? to be ready"),
            ("Waiting for shard",),
        ),
    ),
)
