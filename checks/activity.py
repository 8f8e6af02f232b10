"""Is anything moving over the window? Slow is not hung: CPU with changing stacks, a growing
log, read bytes, busy GPUs, compiler children.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re
from typing import Any

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.engines import spec as eb
from hangdoctor.evidence.model import MIB, Evidence
from hangdoctor.evidence.stacks import pick_main

from . import _window

# Access-log lines of the requests a probe sends (ours, a load balancer's health checks): the
# log grows by them while the engine is stuck, so they are no sign of progress.
_IO_RATE = 256 * 1024  # bytes per second through read()/write() that count as progress
_PROBE_LINE = re.compile(r'"(GET|HEAD) /(health|metrics|v1/models|ping|ready|live)?[^ "]* HTTP/[\d.]+"')


def _only_probe_lines(log: dict, engine: Any = None) -> bool:
    """True when every line the log gained over the window is an access line of a probe, or
    the engine's periodic stats line (vLLM writes it every 10 s, stuck or not: a stuck step
    was seen to log "Running: 0 reqs" with the last interval's throughput)."""
    grew = int(log.get("grew_bytes") or 0)
    tail = log.get("tail") or []
    new: list[str] = []
    size = 0
    for line in reversed(tail):
        if size >= grew:
            break
        size += len(line.encode("utf-8", "replace")) + 1
        new.append(line)
    periodic = engine.is_stats_line if engine is not None else (lambda _line: False)
    return bool(new) and size >= grew and all(
        _PROBE_LINE.search(x) or periodic(x) for x in new if x.strip())


# Where a server's own loop runs: a thread that moves only here was answering our probes
# (/health, /metrics), which is no sign that the server progresses.
_SERVING_FILES = ("socketserver.py", "selectors.py", "http/server.py", "/socket.py", "asyncio/",
                  "uvloop", "uvicorn/", "threading.py")


def _moved(pid: int, ps: Any, spin_tids: set, idle_cpu: bool = False) -> bool | None:
    """Like ``ProcStack.moved``, leaving out a spinning thread (its lines alternate within
    one loop), a thread whose every sample is in the server loop's own machinery, and, in a
    process that used next to no CPU, a thread waiting on a socket in every sample but one
    (it woke for one connection: ours, most likely, a /health probe)."""
    if not ps.ok or len(ps.samples) < 2:
        return None
    seen: dict[Any, list[Any]] = {}
    for sample in ps.samples:
        for t in sample:
            seen.setdefault(t.tid, []).append(t)
    for tid, ts in seen.items():
        if (pid, tid) in spin_tids or len({t.signature for t in ts}) < 2:
            continue
        if all(t.top is not None and any(f in t.top.file for f in _SERVING_FILES) for t in ts):
            continue
        waiting = sum(1 for t in ts if _window.input_frame(t))
        if idle_cpu and waiting and len(ts) - waiting <= 1:
            continue
        return True
    return False


def _active_throughout(ps: Any) -> bool:
    """True when some thread was on the CPU in every sample (a spin is; a loop that sleeps
    between bursts of work is caught asleep)."""
    tids = None
    for sample in ps.samples:
        active = {t.tid for t in sample if t.active}
        tids = active if tids is None else tids & active
    return bool(tids)


def _exchanges(p: Any) -> bool:
    """Bytes read and written between every two samples of the window (ranks trading small
    messages over a pipe or a socket): a deadlocked process reads and writes nothing, and our
    own probes fall at the window's edges, not in every part of it."""
    ws = [x for x in p.window_samples or [] if isinstance(x, dict) and "rchar" in x]
    if len(ws) < 3:
        return False
    return all(b["rchar"] > a["rchar"] and b["wchar"] > a["wchar"] for a, b in zip(ws, ws[1:]))


def _answering_probes(ev: Evidence, host: str, pid: int, ps: Any) -> bool:
    """An engine's API server whose main thread (the event loop) did not move: its other
    threads moved answering requests, ours among them (the /metrics GET at the window's end
    runs in its worker thread), which is no sign that the engine progresses."""
    view = ev.engine
    ep = view.find(host, pid) if view.model is not None else None
    if ep is None or ep.role != eb.API_SERVER or len(ps.samples) < 2:
        return False
    first, last = pick_main(ps.samples[0], pid), pick_main(ps.samples[-1], pid)
    return first is not None and last is not None and first.signature == last.signature


@check("activity.window", "Movement over the sampling window", needs=["timing", "processes"],
       causes=["compile-in-progress", "post-load-deadlock", "request-deadlock", "cpu-livelock", "nccl-desync"])
def activity(ev: Evidence):
    """Compares the start and the end of the window: CPU time of each process, whether its
    stacks changed, bytes read, log growth, compiler children (nvcc, ptxas, cicc, inductor
    compile workers) burning CPU. CPU burnt with an unchanged stack in a CUDA synchronize is a
    spin, not progress (FIELD-NOTES), and does not count as movement; so is CPU burnt by a
    rank whose GPU shows high utilisation at idle power (a kernel waiting), stacks or not.

    Confirm by hand: top -H -p PID; cat /proc/PID/io twice; tail -f LOG
    """
    w = ev.window_s or 1.0
    moving, still, signals = [], [], []
    cpu_total = 0.0
    compilers = []
    spins = _window.spinning(ev)
    spin_tids = {(sp["pid"], sp["tid"]) for sp in spins}
    cpu_of = {(p.host, p.pid): p.cpu_delta_s or 0.0 for p in ev.processes}
    moved_of = {(h, pid): _moved(pid, ps, spin_tids, cpu_of.get((h, pid), 0.0) < 0.05 * w)
                for (h, pid), ps in ev.stacks.items()}
    for p in ev.processes:
        cpu = p.cpu_delta_s or 0.0
        cpu_total += cpu
        ps = ev.stacks.get((p.host, p.pid))
        moved = moved_of.get((p.host, p.pid))
        spin = ps is not None and ps.ok and moved is False and ps.main is not None and ps.main.wait_kind == "cuda-sync"
        # FIELD-NOTES: a rank whose GPU shows 100 % at idle power burns 100 % CPU spinning in
        # cudaDeviceSynchronize; that CPU is waiting, not progress (also without its stack).
        g = ev.gpu_of_pid.get((p.host, p.pid))
        if g is not None and g[0].reading() == "waiting" and (ps is None or not ps.ok or moved is not True):
            spin = True
        if any(sp["pid"] == p.pid for sp in spins):
            spin = True  # its CPU is the spinning thread's (cpu-livelock below)
        if p.role == "compiler" and cpu >= 0.1 * w:
            compilers.append(p)
        if cpu >= 0.2 * w and not spin:
            if ps is None or not ps.ok or moved is not False:
                moving.append(f"{p.label} used {cpu:.2f} s CPU")
            elif len(ps.samples) < 3 or not _active_throughout(ps):
                # samples on one line are chance, not a spin, with two of them (the points in
                # between were skipped: a slow dump), or when no thread was on the CPU in every
                # one: the CPU was burnt between the samples, elsewhere (a loop that sleeps)
                moving.append(f"{p.label} used {cpu:.2f} s CPU ({len(ps.samples)} samples on one line, "
                              "none of them spinning)")
        if (p.read_bytes_delta or 0) > 16 * MIB:
            moving.append(f"{p.label} read {p.read_bytes_delta / MIB:.0f} MiB")
        elif _exchanges(p):
            moving.append(f"{p.label} read and wrote bytes in every part of the window "
                          f"({p.rchar_delta or 0} B in, {p.wchar_delta or 0} B out)")
        elif (p.rchar_delta or 0) + (p.wchar_delta or 0) >= _IO_RATE * w:
            # bytes through read()/write(): the page cache, pipes, sockets (read_bytes counts
            # only what came from the disk: a loader reading cached weights shows 0 there)
            moving.append(f"{p.label} read {(p.rchar_delta or 0) / MIB:.1f} MiB and wrote "
                          f"{(p.wchar_delta or 0) / MIB:.1f} MiB")
    moved_stacks = [pid for (h, pid), ps in ev.stacks.items()
                    if ps.ok and moved_of.get((h, pid)) and not _answering_probes(ev, h, pid, ps)]
    if moved_stacks:
        moving.append(f"stacks of {len(moved_stacks)} process(es) changed")
    log = ev.log_meta
    if log and log.get("grew_bytes") and not _only_probe_lines(log, ev.engine.model):
        moving.append(f"the log grew by {log['grew_bytes']} B")
    for g in ev.gpus:
        if g.reading() == "busy":
            moving.append(f"GPU {g.index} busy ({g.mean('util_pct'):.0f} % at {g.mean('power_w'):.0f} W)")
    if not moving:
        still.append(f"CPU {cpu_total:.2f} s in total")
        if log:
            still.append("log +0 B" + (f" (last write {log.get('age_s'):.0f} s ago)" if log.get("age_s") is not None else ""))
        if any(ps.ok and ps.moved is False for ps in ev.stacks.values()):
            still.append("stacks unchanged")
    # a rank seen in a collective in one sample and elsewhere in another: its collectives
    # complete (one sample that catches one rank inside and its peer computing is no desync)
    through = sorted(pid for (_h, pid), ps in ev.stacks.items() if ps.ok and ps.moved and any(
        t.wait_kind.startswith("collective") for sample in ps.samples for t in sample))
    if through:
        signals.append(against("nccl-desync", 0.6, f"pid {', '.join(map(str, through))} went in and out "
                               f"of collectives across the window's {max(len(ps.samples) for ps in ev.stacks.values())} samples"))
    for sp in spins:
        signals.append(support(
            "cpu-livelock", 0.6,
            f"{sp['label']} thread {sp['thread']} used {sp['cpu_s']:.2f} s CPU on one line in all "
            f"{sp['samples']} samples: {sp['frame']} (a spin on a condition that never comes, or "
            "one very long call; `py-spy top --pid PID` tells them apart)",
            [f"pid:{sp['pid']}"]))
    pending = _window.pending(ev)
    is_idle, waits = (None, []) if (moving or pending or spins) else _window.idle(ev)
    stuck, _answered, _src = ev.engine.connections()
    if stuck and ev.engine.model is None and not moving:
        signals.append(support(
            "request-deadlock", 0.6,
            f"{len(stuck)} client connection(s) sent a request and got no byte back over the whole "
            f"window ({', '.join(str(c.get('peer')) for c in stuck[:3])}) while nothing moved"))
    facts = {"moving": moving, "still": still, "pending": pending, "idle": is_idle,
             "idle_waits": waits, "spinning": [f"{sp['label']} at {sp['frame']}" for sp in spins],
             "log_age_s": log.get("age_s") if log else None}
    if compilers:
        names = ", ".join(f"{p.name} (pid {p.pid}, {p.cpu_delta_s:.2f} s CPU)" for p in compilers[:4])
        signals.append(support("compile-in-progress", 0.6, f"compiler processes burn CPU: {names}",
                               [f"pid:{p.pid}" for p in compilers]))
    if moving:
        signals.append(against("post-load-deadlock", 0.5, "something moves: " + "; ".join(moving[:3])))
        signals.append(against("request-deadlock", 0.5, "something moves: " + "; ".join(moving[:3])))
        return fired("moving: " + "; ".join(moving[:3]), *signals, facts=facts)
    signals.append(against("compile-in-progress", 0.7, f"nothing moved over {w:.1f} s: no compile is progressing"))
    lead = next((x for x in signals if x.cause in ("cpu-livelock", "request-deadlock") and x.weight > 0), None)
    if lead is not None:
        return fired(lead.text, *signals, facts=facts)
    return cleared(f"nothing moved over {w:.1f} s: " + "; ".join(still), *signals, facts=facts)
