"""Where the server log stops: loading done then silence, loading stuck, compiling, capturing
CUDA graphs, serving then silence.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re
from typing import Any

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

# Frames of an engine's step loop (vLLM, SGLang, TGI): a wait inside one serves a request.
_STEP_LOOP = frozenset({"run_batch", "event_loop_normal", "event_loop_overlap", "execute_model",
                        "step", "engine_step", "run_engine_core", "forward_batch_generation",
                        "_process_engine_step", "generate_token", "Decode", "Prefill"})

# graph preparation lines the event parser does not name (memory profiling, address registration)
_GRAPH_PREP = re.compile(r"(?i)\bcuda ?graphs?\b|\bcudagraphs?\b")


def _graph_after(lv: Any, last: Any) -> str:
    """A CUDA-graph line after the event ``last`` (the log went on into graph preparation)."""
    start = getattr(last, "line_no", None)
    if not isinstance(start, int):
        return ""
    for line in lv.lines[start:]:  # line_no is 1-based: this is the next line
        if _GRAPH_PREP.search(line) and "compilation_config" not in line:
            return line.strip()
    return ""


_PHASE_KINDS = ("load-progress", "load-done", "compile", "graph-capture", "server-ready", "request",
                "nccl-init", "rendezvous")


@check("log.phase", "What the server log says it was doing last", needs=["log"],
       causes=["post-load-deadlock", "io-stall", "compile-in-progress", "cuda-graph-capture",
               "request-deadlock"])
def log_phase(ev: Evidence):
    """Reads the log tail's recognised events (loading progress bars, "Loading weights took",
    compile timing lines, CUDA graph capture, requests served, server ready) and asks what the
    last phase was. Loading at 100 % then nothing is the post-load deadlock's log; a progress
    bar stuck below 100 % with no growth is a loading stall; compile lines still being written
    are progress; requests then silence is a request that wedged the scheduler.

    Confirm by hand: tail -n 50 LOG; ls -l --time-style=full-iso LOG (when was it last written?)
    """
    lv = ev.log
    # an idle server's stats line (zero throughput, nothing running) is a heartbeat: it says the
    # engine has no work, not where the server got to (vLLM logs it every 10 s regardless)
    last = next((e for e in reversed(lv.of(*_PHASE_KINDS))
                 if not (e.kind == "request" and e.data.get("idle"))), None)
    if last is None:
        return cleared("no loading, compile, capture or request lines in the log")
    meta = ev.log_meta
    grew = meta.get("grew_bytes") if ev.has_timing else None
    silent = grew == 0 if grew is not None else None
    age = meta.get("age_s")
    silence = (f"; the log has not grown for {age:.0f} s" if silent and age is not None
               else "; the log did not grow during the window" if silent else "")
    signals = []
    progress = lv.of("load-progress")
    loaded = lv.last("load-done") is not None or (progress and (progress[-1].data.get("pct") or 0) >= 100)
    if last.kind in ("load-done",) or (last.kind == "load-progress" and (last.data.get("pct") or 0) >= 100):
        text = f"loading finished ({last.text.strip()[:120]}) and nothing came after it{silence}"
        w = 0.35 if silent or not ev.has_timing else 0.15
        signals.append(support("post-load-deadlock", w, text))
        signals.append(against("io-stall", 0.4, "loading finished"))
    elif last.kind == "load-progress":
        pct = last.data.get("pct")
        if silent:
            signals.append(support("io-stall", 0.4, f"loading stopped at {pct} %{silence}: {last.text.strip()[:120]}"))
        elif grew:
            signals.append(against("io-stall", 0.3, f"loading progresses ({pct} %)"))
        else:
            signals.append(support("io-stall", 0.2, f"the log ends in loading at {pct} %"))
    elif last.kind == "compile" and _graph_after(lv, last):
        line = _graph_after(lv, last)
        signals.append(support("cuda-graph-capture", 0.45,
                               f"after the last compile line the log is in CUDA graph preparation{silence}: {line[:120]}"))
        signals.append(against("compile-in-progress", 0.3, "compilation finished; CUDA graph preparation came after it"))
    elif last.kind == "compile" and last.data.get("seconds") is not None and not grew:
        # "torch.compile took 3.28 s in total" reports a compile that is over
        signals.append(support("compile-in-progress", 0.15, f"the last compile line reports a finished compile: {last.text.strip()[:120]}"))
    elif last.kind == "compile":
        if grew:
            signals.append(support("compile-in-progress", 0.55, f"the log keeps growing with compile lines: {last.text.strip()[:120]}"))
        elif silent:
            signals.append(support("compile-in-progress", 0.15, f"the log ends in a compile line{silence}"))
        else:
            signals.append(support("compile-in-progress", 0.45, f"the log ends in compile lines: {last.text.strip()[:120]}"))
    elif last.kind == "graph-capture" and (last.data.get("pct") or 0) >= 100:
        # a capture bar at its end: capture is over, the engine went on to serve (or did not)
        signals.append(support("post-load-deadlock", 0.25 if silent or not ev.has_timing else 0.1,
                               f"CUDA graph capture finished ({last.text.strip()[:120]}) and no line of the "
                               f"engine's came after it{silence}"))
        signals.append(against("cuda-graph-capture", 0.3, "graph capture finished"))
    elif last.kind == "graph-capture":
        if grew:
            signals.append(against("cuda-graph-capture", 0.3, "graph capture progresses"))
        else:
            signals.append(support("cuda-graph-capture", 0.5, f"the log ends in CUDA graph capture{silence}: {last.text.strip()[:120]}"))
    elif last.kind == "request":
        n = len(lv.of("request"))
        if silent or not ev.has_timing:
            signals.append(support("request-deadlock", 0.45 if silent else 0.3,
                                   f"{n} request/throughput line(s), then silence{silence}: {last.text.strip()[:120]}"))
            for (_host, pid), ps in ev.stacks.items():
                main = ps.main if ps.ok else None
                if main is None or main.wait_kind in ("serving-idle", "ipc-wait"):
                    continue
                loop = next((f for f in main.frames if f.bare in _STEP_LOOP), None)
                if loop is not None:
                    signals.append(support("request-deadlock", 0.35,
                                           f"pid {pid} is inside the scheduler's step loop ({loop.short}) "
                                           f"in {main.detail or main.wait_kind}", [f"pid:{pid}"]))
                    break
    if loaded and last.kind not in ("load-done", "load-progress"):
        signals.append(against("io-stall", 0.3, "loading finished earlier in the log"))
    compile_lines = lv.of("compile")
    if compile_lines and last.kind != "compile" and not grew:
        signals.append(against("compile-in-progress", 0.3, "compilation is not the last thing in the log"))
    if any(s.weight > 0 for s in signals):
        return fired(next(s.text for s in signals if s.weight > 0), *signals)
    return cleared(f"last phase in the log: {last.kind}", *signals)
