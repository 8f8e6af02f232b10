"""The API front end stuck while the engine is fine.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.engines import spec as eb
from hangdoctor.evidence.model import Evidence

_TOKENIZER = ("tokenizer", "tokenization", "transformers/", "sentencepiece", "tiktoken", "detokenizer")


@check("frontend.stack", "API server stack while its port does not answer", needs=["stacks", "http"],
       causes=["frontend-hang"])
def frontend_stack(ev: Evidence):
    """When a port listens but its health endpoint does not answer, looks at the process that
    owns the port: a stack in a tokenizer, in synchronous work on the event-loop thread, or on
    a lock, while the engine workers sit idle waiting for input, is a front-end hang. For a
    known engine the engine model says what the API server's idle event loop looks like (vLLM:
    ``asyncio.Runner.run`` innermost, uvloop runs the loop in C): any other innermost frame in
    a silent server is synchronous work blocking the loop.

    Confirm by hand: py-spy dump --pid API_SERVER_PID; curl -m 5 http://127.0.0.1:PORT/health
    """
    if not ev.http:
        return cleared("no listening port")
    silent_ports = {h["port"] for h in ev.http if not h.get("ok") and h.get("port") is not None}
    if not silent_ports:
        return cleared("every listening port answers", against("frontend-hang", 0.3, "the port answers"))
    owners = [p for p in ev.processes if any(s.get("port") in silent_ports for s in p.listen or [])]
    signals = []
    view = ev.engine
    for p in owners:
        ps = ev.stacks.get((p.host, p.pid))
        if not ps or not ps.ok or not ps.main:
            continue
        m = ps.main
        files = " ".join(f.file for f in m.frames)
        ep = view.find(p.host, p.pid) if view.model else None
        if any(k in files for k in _TOKENIZER):
            signals.append(support("frontend-hang", 0.5, f"the API server {p.label} is in a tokenizer: {m.detail}", [f"pid:{p.pid}"]))
        elif ep is not None and ep.stack_ok:
            # the engine model knows what this API server's idle event loop looks like
            if ep.phase != eb.SERVING:
                how = "in both samples" if ep.same_phase else "at the end of the window"
                signals.append(support(
                    "frontend-hang", 0.5,
                    f"the API server {ep.label}'s event loop is blocked {how}: its main thread "
                    f"is at {ep.innermost}, not in the loop", [f"pid:{p.pid}"]))
        elif m.wait_kind in ("running", "lock", "unknown") and m.wait_kind != "serving-idle":
            signals.append(support("frontend-hang", 0.35, f"the API server {p.label} event loop is not idle: {m.detail}", [f"pid:{p.pid}"]))
    engine_procs = [e for e in view.engine_cores + view.workers if e.stack_ok] if view.model else []
    if engine_procs:
        if signals and all(e.phase == eb.IDLE for e in engine_procs):
            signals.append(support("frontend-hang", 0.25, f"the engine is idle: all {len(engine_procs)} "
                                   "engine core / worker processes wait for requests"))
        return fired(signals[0].text, *signals) if signals else \
            cleared("the silent port's owner shows no front-end problem in its stack")
    engine_idle = [r for r in ev.ranks if r.wait_kind in ("ipc-wait", "serving-idle")]
    if signals and engine_idle and len(engine_idle) == len(ev.ranks):
        signals.append(support("frontend-hang", 0.2, f"all {len(engine_idle)} worker ranks idle, waiting for input (no engine model names them)"))
    if signals:
        return fired(signals[0].text, *signals)
    return cleared("the silent port's owner shows no front-end problem in its stack")
