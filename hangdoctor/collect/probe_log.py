"""The server's log over the window: its size at the start, its tail and size at the end, each
read by a disposable child (sources.LogRead) within its own timeout, and the manifest entry
that says what was read or why not.

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import time

from hangdoctor.collect import sources

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    from hangdoctor.collect.manifest import Manifest

LOG_TIMEOUT_S = 3.0  # for each read of the log: a hung mount never answers


def read_log(snap: Dict[str, Any], log_a: Optional[sources.LogRead], paths: List[Any],
             given: bool, man: Manifest, hard_deadline: float,
             log_end: Optional[sources.LogRead] = None, as_ids: Optional[Any] = None,
             gone_fds: Any = ()) -> None:
    """The log's size at the window's start (``log_a``), its tail and size at the end."""
    t0 = time.monotonic()

    def budget() -> float:
        return max(0.2, min(LOG_TIMEOUT_S, hard_deadline - time.monotonic() - 0.5))

    def timed_out(res: Dict[str, Any], path: str) -> bool:
        if not res.get("timeout"):
            return False
        man.add("log", "timeout", time.monotonic() - t0,
                "%s: no answer within %.1f s (a hung network or FUSE file system?); not read"
                % (path, res.get("waited_s") or budget()),
                "check the mount (`stat %s` hangs too?); the rest of the evidence was kept" % path)
        return True

    start = log_a.result(budget()) if log_a is not None else None
    where = sources.log_entry(paths[0])["name"] if given or len(paths) == 1 \
        else "the server's stdout/stderr"
    if start is not None and timed_out(start, where):
        return
    if start is not None and not start.get("path"):
        _log_error(start, given, man, time.monotonic() - t0)
        return
    path = start["path"] if start is not None else None
    opened = (start or {}).get("open") or {}
    if opened.get("fd") and any(opened.get("open", "").startswith(g) for g in gone_fds):
        # the server's pid names another process now: its descriptor is not the server's
        man.add("log", "failed", time.monotonic() - t0,
                "%s: the server exited and its pid was reused during the window; its stdout "
                "was not read again" % path)
        return
    if log_end is None:
        # the end reads what the start read, the same way (a descriptor stays a descriptor)
        # (then the other holders of the same file, then its name read as the server's user)
        again = paths
        if start is not None and start.get("open"):
            again = [start["open"]] + [p for p in paths if sources.log_entry(p) != start["open"]
                                       and sources.log_entry(p)["name"] == path]
        log_end = sources.LogRead(again, given, tail=True, as_ids=as_ids)
    end = log_end.result(budget())
    if timed_out(end, path or where):
        return
    if not end.get("path") or end.get("error"):
        _log_error(end, given, man, time.monotonic() - t0)
        return
    path = end["path"]
    size_start = start["size"] if start is not None else end.get("size_start", end["size"])
    tail = end.get("tail") or []
    snap["log"] = {
        "path": path,
        "size_start": size_start,
        "size_end": end["size"],
        "grew_bytes": max(0, end["size"] - size_start),
        "mtime": end["mtime"],
        "age_s": round(max(0.0, time.time() - end["mtime"]), 2),
        "tail": tail,
        "auto_detected": not given,
    }
    man.add("log", "ok", time.monotonic() - t0, "%s, %d lines kept%s" % (
        path, len(tail), "" if given else " (found on the server's stdout)"))


def _log_error(res: Dict[str, Any], given: bool, man: Manifest, duration_s: float) -> None:
    if given:
        detail = res.get("error") or "the log could not be read"
        remedy = "check the path given to --log" if ": " in detail and "not read" not in detail \
            else None
        man.add("log", "failed", duration_s, detail, remedy)
    elif res.get("error"):
        man.add("log", "failed", duration_s, res["error"])
    else:
        man.add("log", "not-given", duration_s,
                "no server log given and none found on the server's stdout"
                + ("; skipped: %s" % "; ".join(res.get("skipped") or [])
                   if res.get("skipped") else ""), "pass --log FILE")
