"""Redaction of a whole snapshot before it leaves the probe: command lines, environments,
process and thread names, py-spy locals and errors, log and kernel log lines, HTTP bodies,
the discovery's command lines (the patterns are hangdoctor.redact's).

Layer: collect; may import: the standard library and hangdoctor.redact (it ships in the probe).
"""

from __future__ import annotations

from hangdoctor import redact

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List

def _redact_locals(frames: List[Dict[str, Any]]) -> None:
    for f in frames:
        loc = f.get("locals")
        if not loc:
            continue
        for item in loc:
            if not isinstance(item, dict):
                continue
            name = str(item.get("name") or "")
            if redact.is_secret_key(name):
                item["repr"] = redact.MASK
            elif isinstance(item.get("repr"), str):
                item["repr"] = redact.redact_text(item["repr"])


def redact_snapshot(snap: Dict[str, Any]) -> None:
    for p in snap.get("processes", []):
        if p.get("cmdline"):
            p["cmdline"] = redact.redact_argv(p["cmdline"])
        if p.get("env"):
            p["env"] = redact.redact_env(p["env"])
        for key in ("name", "exe"):
            if isinstance(p.get(key), str):
                p[key] = redact.redact_text(p[key])
        for t in p.get("threads", []):
            if isinstance(t.get("name"), str):
                t["name"] = redact.redact_text(t["name"])
    for entry in snap.get("stacks", {}).values():
        for s in entry.get("samples", []):
            for t in s.get("threads", []):
                if isinstance(t.get("name"), str):
                    t["name"] = redact.redact_text(t["name"])
                _redact_locals(t.get("frames", []))
        if isinstance(entry.get("error"), str):
            entry["error"] = redact.redact_text(entry["error"])
    if "log" in snap:
        snap["log"]["tail"] = redact.redact_lines(snap["log"]["tail"])
    if "kernel_log" in snap:
        snap["kernel_log"]["lines"] = redact.redact_lines(snap["kernel_log"]["lines"])
    for h in snap.get("http", []):
        if isinstance(h.get("body"), str):
            h["body"] = redact.redact_text(h["body"])
    for d in snap.get("targets", {}).get("discovery", []):
        d["cmdline"] = redact.redact_text(d.get("cmdline") or "")
    # the one pass over every other string (manifest details, NCCL answers, containers, notes,
    # errors): field by field above for the forms that need context, every string here, with
    # the values learnt above scrubbed wherever they recur
    redact.redact_deep(snap)
