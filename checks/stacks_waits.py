"""Every worker parked in a receive or wait, nothing moving: the post-load deadlock picture.
Also: a thread blocked acquiring a ``threading.Lock`` that another thread holds.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from collections import defaultdict

from hangdoctor.checkapi import Signal, against, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence, Proc, Rank
from hangdoctor.evidence.stacks import ProcStack, ThreadStack

from ._common import describe_kind, rank_label, ranks_with_stacks

_PARKED = ("ipc-wait",)
# CPython's lock acquire, as py-spy --native names it (3.8-3.13).
_LOCK_NATIVE = ("PyThread_acquire_lock_timed", "lock_PyThread_acquire_lock", "acquire_timed",
                "rlock_acquire", "_PyMutex_LockTimed", "PyMutex_Lock", "_PySemaphore_Wait",
                "lock_acquire_parse_args", "PyThread_acquire_lock")


def _in_mp_queue(t: ThreadStack | None) -> bool:
    """A wait on the semaphore inside a multiprocessing Queue/Pipe (``SemLock.__enter__`` in
    ``Queue.get``): the reader lock of a queue that another worker is reading, part of the
    same IPC wait, not a lock held by another thread of this process."""
    top = t.top if t is not None else None
    return bool(top and "multiprocessing/" in top.file and top.bare in ("__enter__", "acquire", "_acquire"))


def _parked(r: Rank) -> bool:
    main = r.stack.main if r.stack else None
    if main is not None and main.active:
        return False
    return r.wait_kind in _PARKED or (r.wait_kind == "unknown" and _in_mp_queue(main))


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _trees(ev: Evidence, ranks: list[Rank]) -> list[list[Rank]]:
    """The workers of each --pid tree apart: one tree's deadlock is not diluted by another's
    busy or idle workers."""
    groups: dict[tuple[str, object], list[Rank]] = defaultdict(list)
    for r in ranks:
        groups[(r.host, r.proc.root_pid)].append(r)
    return list(groups.values())


def _tree_result(ev: Evidence, ranks: list[Rank], several: bool) -> tuple[list[Signal], list[Signal], str]:
    """(signals for, signals against, summary) for the workers of one tree."""
    where = ""
    if several and ranks and ranks[0].proc.root_pid is not None:
        where = f" of the tree of pid {ranks[0].proc.root_pid}"
    parked = [r for r in ranks if _parked(r)]
    busy = [r for r in ranks if r.wait_kind in ("running",) or (r.stack.main and r.stack.main.active)]
    if len(parked) == len(ranks):
        frames = sorted({r.stack.main.top.short for r in parked if r.stack.main.top})
        who = ("the one worker's main thread" if len(parked) == 1
               else f"all {len(parked)} workers' main threads")
        verb = "waits" if len(parked) == 1 else "wait"
        text = f"{who}{where} {verb} in {describe_kind('ipc-wait')}: " + "; ".join(frames[:3])
        signals = [support("post-load-deadlock", 0.5, text, [f"pid:{r.pid}" for r in parked])]
        if ev.has_timing:
            cpu = sum((r.proc.cpu_delta_s or 0.0) for r in parked)
            moved = [r for r in parked if r.stack.moved]
            if cpu <= 0.05 * max(1, len(parked)) * (ev.window_s or 1) and not moved:
                their = "its" if len(parked) == 1 else "their"
                signals.append(support("post-load-deadlock", 0.3,
                                       f"{their} CPU over {ev.window_s:.1f} s totals {cpu:.2f} s and {their} "
                                       f"{'stack' if len(parked) == 1 else 'stacks'} did not change"))
            elif moved:
                signals.append(against("post-load-deadlock", 0.5,
                                       f"stacks of {_plural(len(moved), 'worker')}{where} changed during the window"))
        return signals, [], text
    if busy:
        what = ", ".join(f"{rank_label(r)} in {describe_kind(r.wait_kind)}" for r in busy[:4])
        return [], [against("post-load-deadlock", 0.5, f"worker(s){where} active, not parked in a wait: {what}")], \
            f"{_plural(len(busy), 'worker')}{where} active, not parked in a wait"
    kinds = sorted({describe_kind(r.wait_kind) for r in ranks})
    return [], [against("post-load-deadlock", 0.3, f"not every worker{where} waits on IPC ({', '.join(kinds)})")], \
        f"{len(parked)} of {_plural(len(ranks), 'worker')}{where} parked in a wait; others in {', '.join(kinds)}"


def _thread_wchan(proc: Proc | None, tid: int | None) -> str:
    for t in (proc.threads if proc is not None else None) or []:
        if isinstance(t, dict) and t.get("tid") == tid:
            return str(t.get("wchan") or "")
    return ""


def _lock_wait(ev: Evidence, proc: Proc | None, ps: ProcStack, t: ThreadStack) -> tuple[float, str] | None:
    """(weight, how it is known) when ``t`` is blocked acquiring a lock, else None.

    A ``with lock:`` or ``lock.acquire()`` has no Python frame of its own: the thread's top
    frame is the caller's line. --native names the acquire; without it, a thread parked in the
    kernel's futex wait at a line that is no known wait is most likely a lock. Condition, Event
    and Queue waits have threading.py frames and are ``ipc-wait``, not this.
    """
    if t.active or t.wait_kind not in ("unknown",) or _in_mp_queue(t):
        return None
    natives = [f.name for f in t.frames if f.native]
    if any(n in _LOCK_NATIVE for n in natives):
        return 0.7, "py-spy --native shows " + next(n for n in natives if n in _LOCK_NATIVE)
    if natives:
        return None  # native frames, and none is a lock acquire: some other C wait
    wchan = _thread_wchan(proc, t.tid)
    if wchan.startswith("futex"):
        return 0.5, f"it sleeps in the kernel's {wchan} at a line that is no known wait"
    return None


def _silent_ports(ev: Evidence, proc: Proc | None) -> list[int]:
    """The ports ``proc`` listens on that were probed and did not answer."""
    if proc is None:
        return []
    mine = {lst.get("port") for lst in proc.listen or [] if isinstance(lst, dict)}
    return sorted({h.get("port") for h in ev.http if h.get("host") == proc.host
                   and h.get("port") in mine and not h.get("ok")})


def _lock_signals(ev: Evidence) -> list[Signal]:
    out = []
    for (host, pid), ps in ev.stacks.items():
        if not ps.ok or ps.moved:
            continue
        proc = ev.proc(host, pid)
        if proc is not None and not proc.alive:
            continue
        waiting = [(t, w) for t in ps.threads if (w := _lock_wait(ev, proc, ps, t)) is not None]
        if not waiting:
            continue
        # a thread joining another (threading.py join) waits for it to end: it is no holder
        others = [t for t in ps.threads if all(t is not x for x, _ in waiting)
                  and not (t.top is not None and t.top.bare in ("join", "_wait_for_tstate_lock")
                           and "threading.py" in t.top.file)]
        t, (weight, how) = max(waiting, key=lambda x: x[1][0])
        label = proc.label if proc is not None else f"pid {pid}"
        at = t.top.short if t.top else "?"
        text = (f"{label} thread {t.name or t.tid!s} is blocked acquiring a lock at {at} ({how})")
        if len(waiting) > 1 and not others:
            # nobody else could hold them: the waiters hold each other's locks (lock order)
            where = "; ".join(f"{x.name or x.tid} at {x.top.short if x.top else '?'}" for x, _ in waiting[:4])
            out.append(support("lock-contention", 0.7,
                               f"{label}: {len(waiting)} threads blocked acquiring locks and no other "
                               f"thread that could hold them: a lock-order deadlock (ABBA) between "
                               f"{where}. Which thread holds which lock is not known without "
                               "`py-spy dump --locals` (off by default)", [f"pid:{pid}"]))
            out.append(against("post-load-deadlock", 0.5, f"{label}'s threads wait on locks of their own "
                               "process, not on a handshake with another process", [f"pid:{pid}"]))
            continue
        if others:
            held = "; ".join(f"{o.name or o.tid} at {o.top.short if o.top else '?'}" for o in others[:2])
            holder = ("the one other thread, which holds it" if len(others) == 1
                      else f"{len(others)} other threads, one of which holds it")
            text += f"; {holder}: {held}"
        if len(waiting) > 1:
            text += f"; {_plural(len(waiting) - 1, 'more thread')} wait the same way"
        out.append(support("lock-contention", weight, text, [f"pid:{pid}"]))
        silent = _silent_ports(ev, proc)
        if silent:
            # the blocked thread is the reason its port does not answer: the lock is the cause
            # to act on, the silent front end its symptom
            ports = ", ".join(map(str, silent))
            out.append(support("lock-contention", 0.3, f"{label} listens on port {ports}, which does "
                               "not answer: the lock wait explains it", [f"pid:{pid}"]))
            out.append(against("frontend-hang", 0.3, f"the front end on port {ports} waits on a lock "
                               "(lock-contention)", [f"pid:{pid}"]))
        if ev.has_timing and ps.moved is False:
            out.append(support("lock-contention", 0.15,
                               f"{label}'s stacks did not change over {ev.window_s:.1f} s", [f"pid:{pid}"]))
    return out


@check("stacks.waits", "Workers parked in a receive or wait; threads blocked on a lock",
       needs=["stacks"], causes=["post-load-deadlock", "lock-contention", "frontend-hang"])
def stacks_waits(ev: Evidence):
    """Fires when the main thread of every worker of a process tree is parked in a receive or
    wait (multiprocessing ``Connection.recv``, ``Queue.get``, zmq ``recv``, socket ``recv``,
    ``Event.wait``...) and, where the window shows it, their CPU stays near zero and their
    stacks do not change. Each side waits for a message the other never sends. Each --pid tree
    is judged on its own workers.

    Also fires for ``lock-contention`` when a thread is blocked acquiring a ``threading.Lock``:
    --native shows ``PyThread_acquire_lock_timed``; without it the thread sleeps in a futex at a
    line that is no known wait, and its stack does not change.

    Confirm by hand: py-spy dump --pid PID on each worker; cat /proc/PID/wchan (anon_pipe_read,
    unix_stream_read_generic, futex_wait); py-spy dump --native --pid PID (a lock acquire)
    """
    lock = _lock_signals(ev)
    ranks = ranks_with_stacks(ev)
    if not ranks:
        if lock:
            return fired(lock[0].text, *lock)
        return cleared("no worker stacks")
    trees = _trees(ev, ranks)
    results = [_tree_result(ev, tree, len(trees) > 1) for tree in trees]
    fired_for = [sig for pro, _con, _txt in results for sig in pro]
    if fired_for or lock:
        summary = next((txt for pro, _c, txt in results if pro), None) or lock[0].text
        # a tree that is not parked speaks only for itself: no against from it here
        return fired(summary, *(fired_for + lock))
    return cleared("; ".join(txt for _p, _c, txt in results), *[s for _p, con, _t in results for s in con])
