"""The probe's engine-progress sources, in the order the window needs them.

- ``start``: requests in flight on the API ports (the kernel's socket table), then the first
  ``GET /metrics`` of each port, in the pool, overlapping the window;
- ``window_end``: the connections again, then the second ``GET /metrics``;
- ``finish``: gathers both into ``snap["engine_progress"]``; then, only with
  ``--probe-generate``, the 1-token canary (after the samples: its token is not progress).

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import time

from hangdoctor.collect import canary, inflight, metrics

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict

MAX_PORTS = 4


def start(
    cfg: Any, ports: Dict[int, str], pool: Any, timeout_s: float, window_s: float
) -> Dict[str, Any]:
    chosen = sorted(ports.items())[:MAX_PORTS]
    state = {
        "cfg": cfg,
        "ports": chosen,
        "timeout_s": min(timeout_s, 3.0),
        "futures": {},
        "window_s": window_s,
        "t0": time.monotonic(),
    }  # type: Dict[str, Any]
    if not chosen:
        return state
    t0 = time.monotonic()
    try:
        state["conns_a"] = inflight.connections([p for p, _ in chosen], cfg.proc_root)
    except Exception as exc:  # a socket table we cannot read must not stop the probe
        state["conns_a"] = {"source": "failed", "connections": [], "note": str(exc)}
    state["conns_a"]["duration_s"] = round(time.monotonic() - t0, 4)
    state["t_a"] = time.monotonic()
    if cfg.metrics:
        for port, ip in chosen:
            state["futures"]["a:%d" % port] = pool.submit(
                metrics.fetch, port, ip, state["timeout_s"]
            )
    return state


def window_end(state: Dict[str, Any], pool: Any) -> None:
    chosen = state["ports"]
    if not chosen:
        return
    cfg = state["cfg"]
    try:
        state["conns_b"] = inflight.connections([p for p, _ in chosen], cfg.proc_root)
    except Exception as exc:
        state["conns_b"] = {"source": "failed", "connections": [], "note": str(exc)}
    state["t_b"] = time.monotonic()
    state["conn_window_s"] = round(state["t_b"] - state["t_a"], 3)
    if cfg.metrics and state["window_s"] > 0:
        for port, ip in chosen:
            first = state["futures"].get("a:%d" % port)
            # a port whose first GET is still waiting, or got no answer, is not asked again:
            # a blocked front end would hold the probe for a second timeout
            if first is None or not first.done() or not (_result(first, 0.0) or {}).get("ok"):
                continue
            state["futures"]["b:%d" % port] = pool.submit(
                metrics.fetch, port, ip, state["timeout_s"]
            )


def _result(fut: Any, deadline: float) -> Any:
    if fut is None:
        return None
    try:
        return fut.result(timeout=max(0.0, deadline - time.monotonic()))
    except Exception as exc:
        return {"ok": False, "error": "not finished by the deadline: %s" % (exc,)}


def finish(state: Dict[str, Any], snap: Dict[str, Any], man: Any, deadline: float) -> None:
    cfg = state["cfg"]
    chosen = state["ports"]
    canary_state = {"sent": False, "asked": bool(cfg.probe_generate)}  # type: Dict[str, Any]
    if not chosen:
        snap["engine_progress"] = {"ports": [], "canary": canary_state}
        return
    out = {
        "ports": [p for p, _ in chosen],
        "window_s": state["window_s"],
        "connections_start": state.get("conns_a"),
        "connections_end": state.get("conns_b"),
        # the time between the two socket-table reads (the second overlaps the last dumps)
        "connections_window_s": state.get("conn_window_s"),
        "metrics": {},
    }  # type: Dict[str, Any]
    n_ok = 0
    for port, _ip in chosen:
        a = _result(state["futures"].get("a:%d" % port), deadline)
        b = _result(state["futures"].get("b:%d" % port), deadline)
        entry = metrics.pair(a, b)
        if (a or {}).get("ok"):
            n_ok += 1
        out["metrics"][str(port)] = entry
    if cfg.metrics:
        man.add(
            "metrics",
            "ok" if n_ok else "failed",
            0.0,
            "GET /metrics on %d port(s), %d answered with engine metrics at the start"
            % (len(chosen), n_ok),
        )
    else:
        man.add("metrics", "unavailable", 0.0, "disabled")
    src = (state.get("conns_a") or {}).get("source")
    man.add(
        "connections",
        "ok" if src in ("sock_diag", "proc_net") else "failed",
        float((state.get("conns_a") or {}).get("duration_s") or 0.0),
        "client connections on port(s) %s from %s" % (", ".join(str(p) for p, _ in chosen), src),
    )
    if cfg.probe_generate:
        port, ip = chosen[0]
        left = deadline - time.monotonic() - 0.5
        if left > 0.5:
            canary_state.update(
                canary.generate(port, ip, cfg.api_key, min(cfg.generate_timeout_s, left))
            )
        else:
            canary_state["error"] = "no time left before the deadline"
        man.add(
            "canary",
            "ok" if canary_state.get("ok") else "failed",
            float(canary_state.get("latency_s") or 0.0),
            "1-token completion (--probe-generate): %s"
            % ("answered" if canary_state.get("ok") else canary_state.get("error")),
        )
    out["canary"] = canary_state
    snap["engine_progress"] = out
