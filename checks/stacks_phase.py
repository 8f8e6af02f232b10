"""Which phase the stacks are stuck in: rendezvous, NCCL init, graph capture, file reads,
file locks, compilation.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import against, check, cleared, fired, support
from hangdoctor.engines import spec as eb
from hangdoctor.evidence.model import MIB, Evidence

_PHASES = {
    "rendezvous": ("rendezvous-stall", 0.55, "in process-group rendezvous"),
    "nccl-init": ("nccl-transport", 0.6, "in NCCL communicator init"),
    "graph-capture": ("cuda-graph-capture", 0.5, "in CUDA graph capture"),
    "io": ("io-stall", 0.4, "reading files"),
    "lock": ("lock-contention", 0.55, "waiting on a file lock"),
    "compile": ("compile-in-progress", 0.4, "compiling"),
}


@check("stacks.phase", "Start-up phase seen in the stacks", needs=["stacks"],
       causes=["rendezvous-stall", "nccl-transport", "cuda-graph-capture", "io-stall",
               "lock-contention", "compile-in-progress"])
def stacks_phase(ev: Evidence):
    """Looks at every thread of every process (not only workers) for a start-up phase:
    ``init_process_group`` / TCPStore / store-based barrier (rendezvous), ``ncclCommInitRank``
    native frames (NCCL init), CUDA graph capture, ``safe_open`` / file reads, ``filelock`` /
    ``fcntl.flock`` / the torch extension build baton, torch.compile / inductor / Triton.

    Confirm by hand: py-spy dump --pid PID (--native for NCCL init)
    """
    hits: dict[str, list] = {}
    for (host, pid), ps in ev.stacks.items():
        if not ps.ok:
            continue
        proc = ev.proc(host, pid)
        for t in ps.threads:
            if t.wait_kind in _PHASES:
                hits.setdefault(t.wait_kind, []).append((proc, pid, t))
                break
    signals = []
    for kind, items in hits.items():
        cause, weight, what = _PHASES[kind]
        who = ", ".join((proc.label if proc else f"pid {pid}") for proc, pid, _ in items[:4])
        text = f"{len(items)} process(es) {what}: {who} at {items[0][2].detail}"
        w = weight
        if kind == "rendezvous":
            expected, _src = ev.expected_world_size()
            alive_ranks = [r for r in ev.ranks if r.proc.alive]
            if expected and len(alive_ranks) < expected:
                w = 0.75
                text += f"; only {len(alive_ranks)} of {expected} ranks are running"
            elif expected and len(items) < expected and len(items) < len(alive_ranks):
                text += f"; {len(alive_ranks) - len(items)} other rank(s) are elsewhere"
        if kind == "compile" and ev.has_timing:
            moved = [proc for proc, pid, _ in items if ev.stacks[(proc.host if proc else "?", pid)].moved] if items else []
            if moved:
                w = 0.55
        signals.append(support(cause, w, text, [f"pid:{pid}" for _, pid, _ in items]))
    signals.extend(_engine_phases(ev))
    if signals:
        signals.sort(key=lambda s: -s.weight)
        return fired(signals[0].text, *signals)
    return cleared("no stack is in rendezvous, NCCL init, graph capture, file reads, locks or compilation",
                   against("rendezvous-stall", 0.5, "no process is in process-group rendezvous"),
                   against("lock-contention", 0.3, "no stack waits on a file lock"),
                   against("cuda-graph-capture", 0.3, "no stack is in CUDA graph capture"))


def _engine_phases(ev: Evidence) -> list:
    """Start-up phases as the engine model reads them (vLLM's loader, warm-up, compile, graph
    capture), judged over the window: a process that spent the whole window in its loader,
    unchanged, without CPU or bytes read, waits for weights that do not arrive."""
    view = ev.engine
    if view.model is None or not ev.has_timing:
        return []
    window = ev.window_s or 1.0
    out = []
    for p in view.procs:
        if not p.stack_ok or p.phase not in eb.START_UP_PHASES or not p.same_phase:
            continue
        cpu = p.cpu_delta_s or 0.0
        read = p.proc.read_bytes_delta or 0
        still = p.moved is False and cpu < 0.2 * window and read < MIB
        where = p.innermost or p.phase_detail
        if p.phase == eb.LOADING and still:
            wchan = p.proc.wchan or ""
            how = f", wchan {wchan}" if wchan else ""
            out.append(support(
                "io-stall", 0.6,
                f"weights never arrive: {p.label} spent the whole window loading at {where}, "
                f"{cpu:.2f} s CPU, {read >> 10} KiB read{how}", [f"pid:{p.pid}"]))
        elif p.phase == eb.CAPTURING_GRAPHS and still:
            out.append(support("cuda-graph-capture", 0.5,
                               f"{p.label} stuck in graph capture at {where}", [f"pid:{p.pid}"]))
        elif p.phase == eb.COMPILING and not still:
            out.append(support("compile-in-progress", 0.5,
                               f"{p.label} is compiling at {where} ({cpu:.2f} s CPU)",
                               [f"pid:{p.pid}"]))
    return out
