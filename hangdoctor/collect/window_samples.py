"""Samples inside the window: py-spy dumps of each Python process and its /proc counters at
points between the window's two edges.

Two samples (start, end) that land on the same line make a busy loop look stuck, and one
thread spinning on a flag looks like any other unchanged stack. With samples in between, a
stack that varies across them is moving, and a thread on one line at high CPU in every sample
is spinning (a livelock). The dumps are plain (no ``--native``, no ``--locals``): each pauses
its process for a few milliseconds. Bounded: at most ``MAX_POINTS`` points, and none for a
process whose earlier dump has not finished (never two dumps of one process at once); with
more than ``MANY`` Python processes one point only.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import time

from hangdoctor.collect import procfs, pyspy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

MAX_POINTS = 2
MANY = 16


def counters(pid: int, proc: str) -> Optional[Dict[str, Any]]:
    """CPU seconds, state and I/O characters of one process now."""
    st = procfs.stat(pid, proc)
    if st is None:
        return None
    out = {"t": time.monotonic(), "state": str(st["state"]), "_starttime": st["starttime"],
           "cpu_s": round((int(st["utime"]) + int(st["stime"])) / procfs.CLK_TCK, 3)}  # type: Dict[str, Any]
    io = procfs.io_counters(pid, proc)
    if io:
        out["rchar"] = io.get("rchar", 0)
        out["wchar"] = io.get("wchar", 0)
    return out


def take(cfg: Any, pool: Any, pyspy_bin: Optional[str], readers: List[Any], py_targets: List[Any],
         futures: Dict[str, Any], t_start: float, window_s: float, until: float,
         dump_timeout: float) -> List[Dict[str, Any]]:
    """Sleep to each point in ``(t_start, until)`` and sample there; returns the points taken
    (``{"t": offset, "dumps": {pid: key}}``); the dumps' futures go into ``futures``."""
    points = []  # type: List[Dict[str, Any]]
    if window_s <= 0:
        return points
    n = 1 if len(py_targets) > MANY else MAX_POINTS
    for k in range(1, n + 1):
        # evenly across the window; a point at or after the last round's start is left out
        # (the last round starts early when dumps are slow: up to half the window early)
        at = t_start + window_s * k / (n + 1)
        if at >= until:
            break
        time.sleep(max(0.0, at - time.monotonic()))
        point = {"t": round(time.monotonic() - t_start, 3), "dumps": {}}  # type: Dict[str, Any]
        for r in readers:
            c = _own(r, counters(r.pid, cfg.proc_root))
            if c is not None:
                c["t"] = round(c["t"] - t_start, 3)
                r.record.setdefault("window_samples", []).append(c)
        for r in py_targets if pyspy_bin else []:
            busy = [f for key, f in futures.items()
                    if key.endswith(":%d" % r.pid) and key.startswith("dump") and not f.done()]
            if busy:
                continue  # its earlier dump still runs: never two dumps of one process at once
            st = procfs.stat(r.pid, cfg.proc_root)
            if st is None or st["state"] in ("Z", "X") or not r.same_process(st):
                continue  # gone, or its pid names another process now
            key = "dumpM%d:%d" % (k, r.pid)
            futures[key] = pool.submit(pyspy.dump_with_retry, pyspy_bin, r.pid, dump_timeout,
                                       str(st["state"]), native=False, with_locals=False,
                                       sudo=cfg.sudo)
            point["dumps"][str(r.pid)] = key
        points.append(point)
    return points


def _own(r: Any, c: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``c`` when it was read from the process ``r`` read at the start (pid and start time),
    else None: a reused pid's counters are another process's."""
    if c is None:
        return None
    start = c.pop("_starttime", None)
    a = getattr(r, "a", None)
    if a is not None and start is not None and start != a.get("starttime"):
        return None
    return c


def edges(readers: List[Any], cfg: Any, t_start: float, at_end: bool) -> None:
    """The counters at the window's start or end, beside the points in between."""
    for r in readers:
        c = _own(r, counters(r.pid, cfg.proc_root))
        if c is None:
            continue
        c["t"] = round(c["t"] - t_start, 3)
        samples = r.record.setdefault("window_samples", [])
        if at_end:
            samples.append(c)
        else:
            samples.insert(0, c)


def merge(stacks: Dict[str, Any], results: Dict[str, Any], points: List[Dict[str, Any]],
          t_end: float) -> None:
    """Put the dumps taken in between into each process's samples, in time order."""
    for point in points:
        for pid, key in point["dumps"].items():
            entry = stacks.get(pid)
            res = results.get(key)
            if not isinstance(entry, dict) or not isinstance(res, dict) or res.get("status") != "ok":
                continue
            if entry.get("status") != "ok":
                continue
            new = res.get("samples") or []
            for s in new:
                s["t"] = point["t"]
            samples = entry.setdefault("samples", [])
            # before the end-of-window sample (stamped t_end), after the first
            at = len(samples)
            while at > 1 and samples[at - 1].get("t") == t_end:
                at -= 1
            samples[at:at] = new
            entry.setdefault("durations_s", [entry.get("duration_s") or 0.0]).append(
                res.get("duration_s") or 0.0)
