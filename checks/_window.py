"""What the window shows beyond "did anything move": work that is pending, threads that wait
for input, and threads that spin on one line (the live verdict's inputs, docs/live-verdict.md).

- **pending**: a client connection that sent a request and got nothing back over the whole
  window; a thread in a collective, a rendezvous or a file lock; a process that cannot run
  (stopped, state T). Work that must finish.
- **waiting for input**: every thread of every live process parked where an idle program
  parks: accepting or selecting on a socket (outside input), getting from a job queue, joining
  or waiting on another idle thread, sleeping on a timer. Internal waits alone (everything
  waits on everything else) are no idle: a deadlock looks the same.
- **spinning**: a thread that used CPU through the window with one and the same stack in
  every sample (three or more): a livelock, or one very long call.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from typing import Any

from hangdoctor.evidence.model import Evidence, Proc
from hangdoctor.evidence.stacks import ProcStack, ThreadStack, frames_signature

# Kernel wait channels (/proc/PID/task/TID/wchan) of a thread parked on outside input or a
# timer. Names vary across kernels (futex_wait_queue_me, futex_do_wait): matched by prefix.
_WCHAN_INPUT = ("inet_csk_accept", "do_epoll_wait", "ep_poll", "do_select", "do_sys_poll",
                "core_sys_select", "sk_wait_data", "wait_woken", "tcp_recvmsg")
_WCHAN_TIMER = ("hrtimer_nanosleep", "do_nanosleep", "clock_nanosleep", "schedule_hrtimeout")
# Frames of a consumer waiting for its next job: a queue's get (also under a pool's read lock)
_CONSUMER = (("queues.py", ("get", "Queue.get", "SimpleQueue.get")), ("queue.py", ("get", "Queue.get")),
             ("multiprocessing/pool.py", ("worker", "_handle_workers", "_handle_tasks", "_handle_results")),
             ("resource_tracker.py", ("main",)), ("forkserver.py", ("main",)))
_SERVER_LOOP = ("serve_forever", "accept", "_accept", "select", "run_forever", "_run_once", "poll")
# Helper processes of the runtime: never ranks, never the stuck one
HELPER_MARKERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver",
                  "from multiprocessing.resource_tracker", "from multiprocessing.forkserver",
                  "torch/_inductor/compile_worker", "compile_worker", "tokenizers_parallel",
                  "multiprocessing.semaphore_tracker")


def is_helper(p: Proc) -> bool:
    """multiprocessing's resource tracker and fork server, compile workers, tokenizer pools."""
    text = p.cmdline_text
    return p.role in ("compiler", "helper") or any(m in text for m in HELPER_MARKERS)


def _thread_wchan(p: Proc, tid: int | None) -> str:
    for t in p.raw.get("threads") or []:
        if t.get("tid") == tid:
            return str(t.get("wchan") or "")
    return str(p.raw.get("wchan") or "") if tid == p.pid else ""


def _consumer(t: ThreadStack) -> bool:
    for f in t.frames:
        for where, names in _CONSUMER:
            if where in f.file and (f.name in names or f.bare in names):
                return True
    return False


def input_frame(t: ThreadStack) -> bool:
    """The thread's stack says it waits for a connection or for a socket to be readable."""
    if t.wait_kind == "serving-idle":
        return True
    top = t.top
    return top is not None and top.bare in _SERVER_LOOP and (
        "socket" in top.file or "selectors" in top.file or "socketserver" in top.file)


def _input_wait(t: ThreadStack, wchan: str) -> bool:
    return input_frame(t) or (wchan.startswith(_WCHAN_INPUT) and not t.active)


def thread_state(p: Proc, t: ThreadStack) -> str:
    """input / consumer / timer / join / busy / blocked for one thread of one sample."""
    wchan = _thread_wchan(p, t.tid)
    if _input_wait(t, wchan):
        return "input"
    if _consumer(t):
        return "consumer"
    if wchan.startswith(_WCHAN_TIMER) and not t.active:
        return "timer"
    top = t.top
    if top is not None and top.bare in ("join", "_wait_for_tstate_lock", "wait") and "threading.py" in top.file:
        return "join"
    if t.active:
        return "busy"
    return "blocked"


def pending(ev: Evidence) -> list[str]:
    """Work that must finish: a request without an answer, a collective, a rendezvous, a file
    lock, a process that cannot run."""
    out: list[str] = []
    stuck, _answered, _src = ev.engine.connections()
    if stuck and ev.engine.model is None:
        peers = ", ".join(str(c.get("peer")) for c in stuck[:3])
        out.append(f"{len(stuck)} client connection(s) sent a request and got nothing back over the "
                   f"whole window ({peers})")
    for p in ev.processes:
        if p.alive and p.state == "T":
            out.append(f"{p.label}, the {p.role or 'process'}, cannot run: stopped (state T)")
    for (_h, pid), ps in ev.stacks.items():
        if not ps.ok:
            continue
        for t in ps.threads:
            k = t.wait_kind
            if k.startswith("collective") or k in ("rendezvous", "nccl-init", "lock"):
                out.append(f"pid {pid} thread {t.name} in {k} at {t.detail or (t.top.short if t.top else '?')}")
                break
    return out


def idle(ev: Evidence) -> tuple[str | None, list[str]]:
    """("input" or "timer", what each waits on) when every live process's threads wait for
    input in every sample and at least one waits on outside input (a socket) or a timer;
    (None, why not) otherwise."""
    kinds: dict[str, int] = {}
    said: list[str] = []
    for p in ev.processes:
        if not p.alive or is_helper(p):
            continue
        ps: ProcStack | None = ev.stacks.get((p.host, p.pid))
        if ps is None or not ps.ok:
            return None, [f"{p.label}: no stacks"]
        for sample in ps.samples:
            for t in sample:
                st = thread_state(p, t)
                if st in ("busy", "blocked"):
                    return None, [f"{p.label} thread {t.name} {st} at {t.top.short if t.top else '?'}"]
                kinds[st] = kinds.get(st, 0) + 1
        main = ps.main
        if main is not None:
            said.append(f"{p.label} {thread_state(p, main)}"
                        f" at {main.top.short if main.top else '?'}")
    if kinds.get("input"):
        return "input", said
    if kinds.get("timer"):
        return "timer", said
    return None, said


def _one_loop(seen: list[ThreadStack]) -> bool:
    """The same stack in every sample, the innermost line allowed to move within three lines
    of one function (``while not flag: pass`` is caught on either of its lines)."""
    if len({frames_signature(t.frames[1:]) for t in seen}) != 1:
        return False
    inner = {(t.frames[0].name, t.frames[0].file) if t.frames else None for t in seen}
    lines = [t.frames[0].line or 0 for t in seen if t.frames]
    return len(inner) == 1 and (max(lines) - min(lines) <= 3 if lines else True)


def spinning(ev: Evidence) -> list[dict[str, Any]]:
    """Threads at high CPU on one stack in every sample (three or more samples)."""
    w = ev.window_s or 0.0
    out: list[dict[str, Any]] = []
    if w <= 0:
        return out
    for p in ev.processes:
        ps = ev.stacks.get((p.host, p.pid))
        if ps is None or not ps.ok or len(ps.samples) < 3:
            continue
        cpu = {t.get("tid"): t.get("cpu_delta_s") or 0.0 for t in p.raw.get("threads") or []}
        by_tid: dict[Any, list[ThreadStack]] = {}
        for sample in ps.samples:
            for t in sample:
                by_tid.setdefault(t.tid, []).append(t)
        for tid, seen in by_tid.items():
            if len(seen) < len(ps.samples) or cpu.get(tid, 0.0) < 0.15 * w:
                continue
            if not _one_loop(seen) or not all(t.active for t in seen):
                continue
            if seen[0].wait_kind not in ("running", "unknown"):
                continue  # a CUDA synchronize spin or a collective: other checks read those
            top = seen[0].top
            out.append({"pid": p.pid, "tid": tid, "thread": seen[0].name, "label": p.label,
                        "cpu_s": cpu.get(tid, 0.0), "samples": len(seen),
                        "frame": top.short if top else "?"})
    return out
