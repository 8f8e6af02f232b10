"""Does the server answer? The port is what tells an idle healthy server from a deadlock.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

_NOT_HANG = ("post-load-deadlock", 0.95), ("rendezvous-stall", 0.9), ("nccl-transport", 0.9), \
    ("io-stall", 0.9), ("cuda-graph-capture", 0.9), ("lock-contention", 0.8), ("gpu-kernel-spin", 0.6), \
    ("compile-in-progress", 0.8), ("nccl-desync", 0.5), ("rank-died", 0.4), ("gpu-oom", 0.6), \
    ("host-oom-or-swap", 0.4), ("shm-exhausted", 0.6), ("request-deadlock", 0.5)
# Causes that strike inside a step, after start-up: a health endpoint that does not run a step
# (vLLM's, TensorRT-LLM's: the engine model says) cannot speak against them.
_IN_STEP = frozenset({"nccl-desync", "rank-died", "gpu-kernel-spin", "request-deadlock"})


@check("port.health", "Listening port and health endpoint", needs=["http"],
       causes=["frontend-hang", "post-load-deadlock", "rendezvous-stall", "nccl-transport"])
def port_health(ev: Evidence):
    """Probes every TCP port the server's processes listen on with ``GET /health`` (then
    ``/v1/models``, ``/``). An answering port means the server is up: an idle healthy server
    looks like a deadlock from inside (workers parked on queues, CPU and GPU idle), and the
    answer is what tells them apart. A port that listens but does not answer in time points
    at the front end. What an answer proves depends on the engine (its model says): vLLM's
    ``/health`` only says the engine is not known dead, so it speaks against start-up causes
    but not against a step stuck in a worker or a collective.

    Confirm by hand: ss -ltnp | grep PID; curl -m 5 -sv http://127.0.0.1:PORT/health
    """
    probes = ev.http
    if not probes:
        return cleared("no port open: the server never started listening",
                       facts={"answering": False, "still": ["no port open"]})
    ok = [h for h in probes if h.get("ok")]
    if ok:
        h = ok[0]
        text = f"{h.get('url')} answered {h.get('code')} in {h.get('latency_s') or 0:.3f} s"
        model = ev.engine.model
        blind = model is not None and not model.health.proves_generation
        signals = [against(c, w, f"the server answers: {text}") for c, w in _NOT_HANG
                   if not (blind and c in _IN_STEP)]
        signals.append(against("frontend-hang", 0.9, f"the front end answers: {text}"))
        if blind:
            text += f" ({model.title}'s health endpoint does not run a step)"
        return cleared(text, *signals, facts={"answering": True, "answering_reason": f"the server answers: {text}"})
    timeouts = [h for h in probes if h.get("error") and ("no answer" in h["error"] or "timed out" in h["error"])]
    codes = [h for h in probes if h.get("code") is not None]
    if timeouts:
        h = timeouts[0]
        text = f"port {h['port']} listens but {h.get('url')} gave {h['error']}"
        return fired(text, support("frontend-hang", 0.45, text),
                     facts={"answering": False, "still": [f"port {h['port']} not answering"]})
    if codes:
        h = codes[0]
        text = f"port {h['port']} answers {h['code']} on {h.get('url')}: not ready"
        return fired(text, support("frontend-hang", 0.2, text), facts={"answering": False})
    h = probes[0]
    return cleared(f"port {h['port']}: {h.get('error')}", facts={"answering": False})
