"""Is the server alive? Root gone, zombie or stopped processes, threads in D state; blocked
opening or reading a FIFO; waiting for a file lock that another process holds; not Python.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import Signal, check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

from ._common import ref

_FS_WCHAN = ("nfs", "fuse", "io_schedule", "wait_on_page", "folio_wait", "rpc_wait", "ceph",
             "lustre", "xfs", "ext4", "blk", "bit_wait_io", "jbd2", "read_pages", "filemap")


# open() of a FIFO with no writer yet; a read of a FIFO (these two also serve anonymous pipes:
# the FIFO's path among the open files tells them apart, collect/locks.py).
_FIFO_OPEN_WCHAN = ("wait_for_partner", "fifo_open")
_PIPE_READ_WCHAN = ("pipe_read", "anon_pipe_read", "pipe_wait")


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _fifo_signals(ev: Evidence) -> list[Signal]:
    """A process blocked opening or reading a FIFO: like a read from a wedged mount, it waits
    for a writer that may never come."""
    out = []
    for p in ev.processes:
        if not p.alive or p.state in ("T", "t"):
            continue
        threads = [t for t in p.threads or [] if isinstance(t, dict)] or [{"tid": p.pid, "wchan": p.wchan}]
        opening = [t for t in threads if (t.get("wchan") or "") in _FIFO_OPEN_WCHAN]
        fifos = [f for f in (p.fifos or []) if isinstance(f, str)]
        reading = [t for t in threads if (t.get("wchan") or "") in _PIPE_READ_WCHAN] if fifos else []
        native = _native_open(ev, p)
        if opening:
            t = opening[0]
            text = (f"{p.label} is blocked opening a FIFO with no writer (thread {t.get('tid')}, "
                    f"wchan {t.get('wchan')}{native}): it waits until something opens the other end, "
                    "as a read from a wedged mount waits")
            out.append(support("io-stall", 0.6, text, [ref(p)]))
        elif reading:
            t = reading[0]
            text = (f"{p.label} is blocked reading the FIFO {fifos[0]} (thread {t.get('tid')}, wchan "
                    f"{t.get('wchan')}{native}): nothing writes to it")
            out.append(support("io-stall", 0.5, text, [ref(p)]))
        else:
            continue
        if ev.has_timing and (p.cpu_delta_s or 0.0) <= 0.01 * (ev.window_s or 1.0):
            out.append(support("io-stall", 0.2, f"{p.label} used no CPU over {ev.window_s:.1f} s", [ref(p)]))
    return out


def _native_open(ev: Evidence, p) -> str:
    """`, native frame open64` when a --native dump shows the call the thread is in."""
    ps = ev.stacks.get((p.host, p.pid))
    main = ps.main if ps is not None and ps.ok else None
    for f in (main.frames if main else [])[:4]:
        if f.native and f.name.lstrip("_") in ("open64", "open", "openat", "openat64", "read",
                                               "__libc_open64", "libc_read"):
            return f", native frame {f.name}"
    return ""


def _lock_signals(ev: Evidence) -> list[Signal]:
    """Waiters in /proc/locks: which file, and who holds it (alive or not, in the tree or not)."""
    out = []
    tree = {(p.host, p.pid): p for p in ev.processes}
    for snap in ev.snapshots:
        host = (snap.get("host") or {}).get("name", "?")
        locks = [x for x in ((snap.get("file_locks") or {}).get("locks") or []) if isinstance(x, dict)]
        for w in locks:
            proc = tree.get((host, w.get("pid")))
            if not w.get("waiting") or proc is None:
                continue
            holders = [x for x in locks if not x.get("waiting") and x.get("id") == w.get("id")
                       and x.get("inode") == w.get("inode")]
            path = w.get("path") or next((h.get("path") for h in holders if h.get("path")), None)
            what = f"{w.get('kind')} {w.get('access')} lock on {path or 'inode ' + str(w.get('inode'))}"
            if holders:
                h = holders[0]
                inside = (host, h.get("pid")) in tree
                who = (f"held by pid {h.get('pid')} [{h.get('name') or '?'}]"
                       + ("" if inside else ", outside the server's process tree")
                       + ("" if h.get("alive", True) else ", which is gone"))
            else:
                who = "held by an OFD lock (no pid)" if w.get("kind") == "OFDLCK" else "holder not named"
            text = f"{proc.label} waits for a {what}, {who} (/proc/locks)"
            out.append(support("lock-contention", 0.7, text, [ref(proc)]))
    return out


def _not_python(ev: Evidence) -> list[Signal]:
    """No Python in the tree: py-spy has nothing to read, so say why there are no stacks."""
    alive = [p for p in ev.processes if p.alive]
    if not alive or any(p.is_python for p in alive) or ev.stacks:
        return []
    p = ev.roots[0] if ev.roots and ev.roots[0].alive else alive[0]
    where = f"; it waits in {p.wchan}" if p.wchan else ""
    text = (f"no Python stacks: {p.label} is not a Python process ({p.exe or p.name}), and py-spy "
            f"reads only Python{where}" + (f"; {_plural(len(alive) - 1, 'other process', 'other processes')}"
                                          " in the tree, none Python" if len(alive) > 1 else ""))
    return [Signal(None, 0.0, text, [ref(p)])]


@check("process.alive", "Server processes alive, zombie, stopped or blocked in D state",
       needs=["processes"], causes=["rank-died", "io-stall", "lock-contention"])
def process_alive(ev: Evidence):
    """Reads the state letter of every process of the tree (start and end of the window).

    Fires when the root is gone or a zombie (verdict ``dead``), when a worker exited or is a
    zombie (``rank-died``), when a process is stopped (state T: SIGSTOP or a debugger), when
    threads sit in uninterruptible sleep on a file-system wait channel, or block opening
    (``wait_for_partner``) or reading (``pipe_read`` with a FIFO open) a FIFO (``io-stall``),
    when a process waits in /proc/locks for a lock another process holds (``lock-contention``),
    and says so when no process of the tree is Python (no stacks to read).

    Confirm by hand: ps -o pid,stat,wchan:32,cmd --ppid ROOT_PID; cat /proc/PID/task/*/wchan;
    ls -l /proc/PID/fd; cat /proc/locks
    """
    signals = []
    facts: dict = {}
    roots = ev.roots
    if roots and all(not r.alive for r in roots):
        gone = ", ".join(f"pid {r.pid} ({'zombie' if r.zombie else r.exit_info or 'gone'})" for r in roots)
        facts["dead"] = True
        facts["dead_reason"] = f"the server's root process is not alive: {gone}"
        left = [p for p in ev.processes if p not in roots and p.alive]
        signals = [Signal(None, 0.0, facts["dead_reason"], [ref(r) for r in roots])]
        if not left:
            # the whole tree exited: a process died (which one and of what, its log, its exit code
            # and the kernel log say; an engine that dies takes vLLM's and SGLang's servers down)
            signals.append(support("rank-died", 0.45, f"the server exited and no process of its tree is left ({gone}): "
                                   "its log's last lines and the kernel log say which process died first and why",
                                   [ref(r) for r in roots]))
        return fired(facts["dead_reason"], *signals, facts=facts)
    if roots:
        facts["dead"] = False
    for p in ev.processes:
        if p in roots:
            continue
        if p.zombie or p.raw.get("alive") is False:
            what = "is a zombie (exited, not reaped)" if p.zombie else (p.exit_info or "exited")
            root_pids = {r.pid for r in roots}
            workerish = p.role not in ("helper", "compiler") and (
                p.role in ("worker", "engine") or p.rank is not None
                or (p.ppid in root_pids and str(p.name or "").startswith("python")))
            if workerish:
                signals.append(support("rank-died", 0.7, f"worker {p.label} {what}", [ref(p)]))
            else:
                signals.append(Signal(None, 0.0, f"{p.label} {what}", [ref(p)]))
    for p in ev.processes:
        if p.state in ("T", "t"):
            signals.append(Signal(None, 0.0, f"{p.label} is stopped (state {p.state}: SIGSTOP or a "
                                  "debugger); it cannot make progress until continued", [ref(p)]))
            facts.setdefault("still", []).append(f"{p.label} stopped")
            facts.setdefault("stopped", []).append(p.pid)
    d_threads = []
    for p in ev.processes:
        for t in p.threads or []:
            if t.get("status") == "D" and (t.get("status_end") in (None, "D")):
                d_threads.append((p, t))
        if p.state == "D" and not any(x[0] is p for x in d_threads):
            d_threads.append((p, {"tid": p.pid, "name": p.name, "wchan": p.wchan}))
    if d_threads:
        fs = [(p, t) for p, t in d_threads if any(k in (t.get("wchan") or "") for k in _FS_WCHAN)]
        chosen = fs or d_threads
        p, t = chosen[0]
        text = (f"{_plural(len(d_threads), 'thread')} in uninterruptible sleep (D), e.g. {p.label} thread "
                f"{t.get('name')} on {t.get('wchan') or 'an unknown wait channel'}")
        signals.append(support("io-stall", 0.55 if fs else 0.3, text, [ref(p)]))
    signals += _fifo_signals(ev) + _lock_signals(ev) + _not_python(ev)
    if any(s.weight > 0 for s in signals) or any(s.cause is None for s in signals):
        return fired(signals[0].text, *signals, facts=facts)
    n = len(ev.processes)
    alive = "alive" if n != 1 else "is alive"
    return cleared(f"{'the one process' if n == 1 else f'all {n} processes'} {alive}; none zombie, stopped, "
                   "in D state, on a FIFO or waiting for a file lock", facts=facts)
