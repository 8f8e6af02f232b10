"""A defensive view over the analysis model (MODEL.md) shared by every rendering.

The analysis may come from an older or newer hangdoctor, from a hand-edited file, or carry
hostile text. The view fills missing keys with empty values, coerces every number that a
rendering puts into markup (CSS widths, SVG coordinates) to a finite float, and precomputes the
joins the templates need (odd ranks, power limits per GPU, log lines that carry events). Strings
stay strings: escaping is the renderer's job.

Layer: report; may import: the standard library, jinja2, hangdoctor.report and the foundation
(it reads the analysis model only).
"""

from __future__ import annotations

import math
import re
from typing import Any

VERDICTS = ("hung", "progressing", "healthy", "dead", "inconclusive")
CHECK_VERDICTS = ("fired", "cleared", "skipped", "errored")
_CLASS = re.compile(r"[a-z][a-z_-]{0,30}")


def num(value: Any) -> float | None:
    """Return ``value`` as a finite float, or None when it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def nums(values: Any) -> list[float]:
    """Return the finite numbers of a series; anything else in it is dropped."""
    if not isinstance(values, (list, tuple)):
        return []
    return [n for n in (num(v) for v in values) if n is not None]


# what a next step that is a command starts with: a program the steps name, a path, or an
# environment assignment; anything else ("read the dead worker's log") is advice, shown
# without a shell prompt
_SHELL_START = re.compile(
    r"(?:[A-Z_][A-Z0-9_]*=\S*|\S*/\S+|hangdoctor|py-spy|nvidia-smi|cat|df|free|grep|curl|python3?|top|"
    r"dmesg|journalctl|kubectl|docker|ss|ls|lsof|sudo|gdb|strace|env|watch|tail)(?:\s|$)"
)


def is_shell_command(step: str) -> bool:
    return bool(_SHELL_START.match(step.strip()))


def text(value: Any, limit: int = 4000) -> str:
    """Return ``value`` as a string ("" for None), clipped to ``limit`` characters."""
    if value is None:
        return ""
    out = value if isinstance(value, str) else str(value)
    if len(out) > limit:
        out = out[: limit - 1] + "…"
    return out


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in _list(value) if isinstance(item, dict)]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Any) -> int | None:
    number = num(value)
    return int(number) if number is not None and number.is_integer() else None


def fmt_num(value: Any, digits: int = 1, unit: str = "") -> str:
    """Format a number for a table cell; "–" when there is none."""
    number = num(value)
    if number is None:
        return "–"
    return f"{number:.{digits}f}{unit}"


def _evidence(items: Any) -> list[dict[str, Any]]:
    out = []
    for item in _dicts(items):
        out.append(
            {
                "text": text(item.get("text")),
                "check": text(item.get("check"), 200),
                "weight": num(item.get("weight")),
                "refs": [text(r, 200) for r in _list(item.get("refs"))][:50],
            }
        )
    return out


def _cause(raw: dict[str, Any]) -> dict[str, Any]:
    score = num(raw.get("score")) or 0.0
    score = min(max(score, 0.0), 1.0)
    confidence = text(raw.get("confidence"), 20)
    if confidence not in ("high", "medium", "low"):
        confidence = "high" if score >= 0.7 else "medium" if score >= 0.4 else "low"
    odd = []
    for item in _dicts(raw.get("odd_ones_out")):
        odd.append(
            {
                "pid": _int_or_none(item.get("pid")),
                "rank": _int_or_none(item.get("rank")),
                "host": text(item.get("host"), 200),
                "why": text(item.get("why")),
            }
        )
    return {
        "id": text(raw.get("id"), 200),
        "title": text(raw.get("title"), 400),
        "score": score,
        "score_pct": round(score * 100, 1),
        "confidence": confidence,
        "summary": text(raw.get("summary")),
        "evidence": _evidence(raw.get("evidence")),
        "against": _evidence(raw.get("against")),
        "next_steps": [text(s) for s in _list(raw.get("next_steps"))],
        "odd_ones_out": odd,
    }


def _frames(value: Any) -> list[dict[str, Any]]:
    out = []
    for frame in _dicts(value):
        out.append(
            {
                "name": text(frame.get("name"), 400),
                "file": text(frame.get("file"), 600),
                "line": _int_or_none(frame.get("line")),
                "native": bool(frame.get("native")),
            }
        )
    return out


def frame_line(frame: dict[str, Any]) -> str:
    """One frame as ``name (file:line)``, the way py-spy prints it."""
    where = frame.get("file") or "?"
    if frame.get("line") is not None:
        where = f"{where}:{frame['line']}"
    return f"{frame.get('name') or '?'} ({where})"


def _series_max(values: list[float], floor: float) -> float:
    return max([floor, *values]) if values else floor


def _experiment(e: Any) -> dict[str, str] | None:
    """The A/B toggle triage proposes (MODEL.md: next_experiment), as display strings."""
    if not isinstance(e, dict) or not e.get("toggle"):
        return None
    return {"toggle": text(e.get("toggle"), 500), "if_fixed": text(e.get("if_fixed"), 500),
            "if_not": text(e.get("if_not"), 500),
            "between": ", ".join(text(x, 40) for x in _list(e.get("between")))}


def build_view(analysis: dict[str, Any]) -> dict[str, Any]:
    """Return the normalised view of an analysis document that the renderings read."""
    a = _dict(analysis)
    verdict = text(a.get("verdict"), 40)
    tool = _dict(a.get("tool"))

    causes = sorted(
        (_cause(c) for c in _dicts(a.get("causes"))), key=lambda c: c["score"], reverse=True
    )

    gpus = []
    power_limits: dict[tuple[str, int], float] = {}
    for g in _dicts(a.get("gpus")):
        host = text(g.get("host"), 200)
        index = _int_or_none(g.get("index"))
        limit = num(g.get("power_limit_w"))
        power = nums(g.get("power_w"))
        mem_used = nums(g.get("mem_used_mib"))
        if index is not None and limit:
            power_limits[(host, index)] = limit
        gpus.append(
            {
                "host": host,
                "index": index,
                "name": text(g.get("name"), 200),
                "mem_total_mib": num(g.get("mem_total_mib")),
                "mem_used_mib": mem_used,
                "mem_used_last_mib": mem_used[-1] if mem_used else None,
                "util_pct": nums(g.get("util_pct")),
                "power_w": power,
                "power_limit_w": limit,
                "power_max_w": limit or _series_max(power, 1.0),
                "pids": [_int_or_none(p) for p in _list(g.get("pids"))],
                "reading": text(g.get("reading")),
            }
        )

    stack_groups = []
    odd_pids: dict[int, list[str]] = {}
    for group in _dicts(a.get("stack_groups")):
        pids = [p for p in (_int_or_none(p) for p in _list(group.get("pids"))) if p is not None]
        odd = bool(group.get("odd"))
        entry = {
            "signature": text(group.get("signature"), 80),
            "count": _int_or_none(group.get("count")) or len(pids),
            "pids": pids,
            "ranks": [_int_or_none(r) for r in _list(group.get("ranks"))],
            "wait_kind": text(group.get("wait_kind"), 200),
            "odd": odd,
            "frames": _frames(group.get("frames")),
        }
        stack_groups.append(entry)
        if odd:
            for pid in pids:
                odd_pids.setdefault(pid, []).append(
                    f"stack differs from the other ranks ({entry['wait_kind'] or 'other stack'})"
                )
    for cause in causes:
        for item in cause["odd_ones_out"]:
            if item["pid"] is not None:
                odd_pids.setdefault(item["pid"], []).insert(0, f"{cause['id']}: {item['why']}")

    ranks = []
    for r in _dicts(a.get("ranks")):
        host = text(r.get("host"), 200)
        pid = _int_or_none(r.get("pid"))
        gpu = _int_or_none(r.get("gpu"))
        power = nums(r.get("gpu_power_w"))
        limit = power_limits.get((host, gpu)) if gpu is not None else None
        ranks.append(
            {
                "host": host,
                "pid": pid,
                "ppid": _int_or_none(r.get("ppid")),
                "rank": _int_or_none(r.get("rank")),
                "role": text(r.get("role"), 80),
                "name": text(r.get("name"), 200),
                "cmdline": text(r.get("cmdline"), 2000),
                "gpu": gpu,
                "state": text(r.get("state"), 20),
                "wchan": text(r.get("wchan"), 200),
                "cpu_pct": num(r.get("cpu_pct")),
                "cpu_delta_s": num(r.get("cpu_delta_s")),
                "rss_mib": num(r.get("rss_mib")),
                "threads": _int_or_none(r.get("threads")),
                "gpu_util_pct": nums(r.get("gpu_util_pct")),
                "gpu_power_w": power,
                "gpu_power_max_w": limit or _series_max(power, 1.0),
                "gpu_mem_mib": num(r.get("gpu_mem_mib")),
                "top_frame": text(r.get("top_frame"), 600),
                "wait_kind": text(r.get("wait_kind"), 200),
                "signature": text(r.get("signature"), 80),
                "alive": r.get("alive") is not False,
                "odd": pid in odd_pids,
                "odd_why": odd_pids.get(pid, []),
            }
        )

    stacks = []
    for key, threads in _dict(a.get("stacks")).items():
        entries = []
        for t in _dicts(threads):
            entries.append(
                {
                    "thread": text(t.get("thread"), 200),
                    "tid": _int_or_none(t.get("tid")),
                    "active": bool(t.get("active")),
                    "frames": _frames(t.get("frames")),
                }
            )
        # Keys are pids ("4243"); a multi-host analysis may prefix the host ("node-b:4243").
        tail = str(key).rsplit(":", 1)[-1]
        pid = int(tail) if tail.isdigit() else None
        stacks.append(
            {"key": text(key, 200), "pid": pid, "odd": pid in odd_pids, "threads": entries}
        )

    log_raw = _dict(a.get("log"))
    events = []
    for e in _dicts(log_raw.get("events")):
        events.append(
            {
                "kind": text(e.get("kind"), 80),
                "text": text(e.get("text")),
                "line": _int_or_none(e.get("line")),
            }
        )
    tail_lines = [text(line, 2000) for line in _list(log_raw.get("tail"))]
    log_lines = []
    for i, line in enumerate(tail_lines):
        # MODEL.md gives an event's `line` without saying whether it counts in the tail or the
        # file, so an event marks a tail line by its text (and by position when that agrees).
        kinds = [
            e["kind"]
            for e in events
            if e["text"] and (e["text"] in line or line in e["text"]) and line
        ]
        log_lines.append({"n": i + 1, "text": line, "event": kinds[0] if kinds else ""})

    checks = []
    for c in _dicts(a.get("checks")):
        verdict_c = text(c.get("verdict"), 20)
        checks.append(
            {
                "id": text(c.get("id"), 200),
                "title": text(c.get("title"), 400),
                "verdict": verdict_c if verdict_c in CHECK_VERDICTS else "unknown",
                "verdict_text": verdict_c,
                "summary": text(c.get("summary")),
                "missing": [text(m, 200) for m in _list(c.get("missing"))],
                "error": text(c.get("error"), 20000),
                "signals": [
                    {
                        "cause": text(s.get("cause"), 200),
                        "weight": num(s.get("weight")),
                        "text": text(s.get("text")),
                    }
                    for s in _dicts(c.get("signals"))
                ],
            }
        )
    check_counts = {v: sum(1 for c in checks if c["verdict"] == v) for v in CHECK_VERDICTS}

    hosts = []
    for h in _dicts(a.get("hosts")):
        status = text(h.get("status"), 20)
        hosts.append(
            {
                "name": text(h.get("name"), 200),
                "hostname": text(h.get("hostname"), 200),
                "kernel": text(h.get("kernel"), 400),
                "root_pids": [_int_or_none(p) for p in _list(h.get("root_pids"))],
                "collected_at": text(h.get("collected_at"), 80),
                "duration_s": num(h.get("duration_s")),
                "status": status if status in ("ok", "partial", "failed") else "unknown",
                "status_text": status,
                "error": text(h.get("error")),
            }
        )

    collection = []
    for m in _dicts(a.get("collection")):
        status = text(m.get("status"), 40)
        collection.append(
            {
                "host": text(m.get("host"), 200),
                "source": text(m.get("source"), 200),
                "status": status,
                # A CSS class name: "timed_out" -> "timed-out"; anything odd -> "other".
                "status_class": status.replace("_", "-") if _CLASS.fullmatch(status) else "other",
                "duration_s": num(m.get("duration_s")),
                "detail": text(m.get("detail")),
                "remedy": text(m.get("remedy")),
            }
        )

    env_diff = []
    for d in _dicts(a.get("env_diff")):
        values = _dict(d.get("values"))
        env_diff.append(
            {
                "key": text(d.get("key"), 200),
                "pairs": [(text(k, 200), text(v, 1000)) for k, v in values.items()],
            }
        )

    host_facts = []
    for f in _dicts(a.get("host_facts")):
        host_facts.append(
            {
                "host": text(f.get("host"), 200),
                "mem_available_mib": num(f.get("mem_available_mib")),
                "swap_used_mib": num(f.get("swap_used_mib")),
                "shm_free_mib": num(f.get("shm_free_mib")),
                "shm_total_mib": num(f.get("shm_total_mib")),
            }
        )

    return {
        "analysis_version": text(a.get("analysis_version"), 20),
        "tool_name": text(tool.get("name"), 80) or "hangdoctor",
        "tool_version": text(tool.get("version"), 80),
        "generated_at": text(a.get("generated_at"), 80),
        "command": text(a.get("command")),
        "origin": text(a.get("origin"), 40),
        "window_s": num(a.get("window_s")),
        "verdict": verdict,
        "verdict_class": verdict if verdict in VERDICTS else "unknown",
        "verdict_reason": text(a.get("verdict_reason")),
        "headline": text(a.get("headline")),
        "causes": causes,
        "ruled_out": [
            {
                "id": text(r.get("id"), 200),
                "title": text(r.get("title"), 400),
                "by": [text(b) for b in _list(r.get("by"))],
            }
            for r in _dicts(a.get("ruled_out"))
        ],
        "not_checked": [
            {
                "id": text(r.get("id"), 200),
                "title": text(r.get("title"), 400),
                "missing": [text(m, 200) for m in _list(r.get("missing"))],
            }
            for r in _dicts(a.get("not_checked"))
        ],
        "checks": checks,
        "check_counts": check_counts,
        "ranks": ranks,
        "odd_pids": sorted(odd_pids),
        "stack_groups": stack_groups,
        "stacks": stacks,
        "gpus": gpus,
        "env_diff": env_diff,
        "host_facts": host_facts,
        "log": {
            "path": text(log_raw.get("path"), 1000),
            "grew_bytes": num(log_raw.get("grew_bytes")),
            "age_s": num(log_raw.get("age_s")),
            "lines": log_lines,
            "events": events,
            "present": bool(log_raw),
        },
        "collection": collection,
        "weakened": [text(w) for w in _list(a.get("weakened"))],
        "next_command": text(a.get("next_command")),
        "next_is_shell": is_shell_command(text(a.get("next_command"))),
        "known_issues": [{"text": text(k.get("text")), "url": text(k.get("url"), 500)}
                         for k in _list(a.get("known_issues")) if isinstance(k, dict)],
        "next_experiment": _experiment(a.get("next_experiment")),
        "risks": [{"id": text(r.get("id"), 60), "text": text(r.get("text"), 500)}
                  for r in _list(a.get("risks")) if isinstance(r, dict)],
        "split": ({"between": [text(x, 60) for x in _list((a.get("split") or {}).get("between"))],
                   "observe": text((a.get("split") or {}).get("observe"), 500)}
                  if isinstance(a.get("split"), dict) else None),
        "intrusion": text(a.get("intrusion")),
        "hosts": hosts,
    }
