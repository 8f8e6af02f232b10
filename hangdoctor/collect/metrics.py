"""The engine's own Prometheus counters, read at both ends of the window.

One ``GET /metrics`` on the API port (read-only, like the ``/health`` probe), kept only for
the families of inference engines (``vllm:``, ``sglang:``, ``tgi_``, Triton's
``nv_inference_``) and summed over their labels. Engines update them once per engine step, so
counters that do not move while requests wait are a step that does not finish.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import re
import time

from hangdoctor.collect import http_exchange

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

PREFIXES = ("vllm:", "sglang:", "tgi_", "nv_inference_", "trtllm_")
MAX_BYTES = 2 << 20
MAX_NAMES = 80
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")
# Histogram buckets say nothing a counter does not; keep _sum and _count.
_SKIP_SUFFIX = ("_bucket", "_created")


def parse(text: str) -> Dict[str, float]:
    """Prometheus text -> {metric name: value summed over its label sets}, engine families only."""
    out = {}  # type: Dict[str, float]
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(PREFIXES):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name = m.group(1)
        if name.endswith(_SKIP_SUFFIX):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if value != value:  # NaN
            continue
        if name not in out and len(out) >= MAX_NAMES:
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def fetch(port: int, ip: str, timeout_s: float) -> Dict[str, Any]:
    """``GET /metrics`` -> {"ok", "code", "latency_s", "values", "error"}."""
    host = "127.0.0.1" if ip in ("0.0.0.0", "::", "127.0.0.1", "") else ip
    res = {"port": port, "ok": False, "code": None, "values": {}, "error": None, "at": time.time()}  # type: Dict[str, Any]
    t0 = time.monotonic()
    data, err, connected = http_exchange.exchange(
        host, port, http_exchange.request("GET", "/metrics", host), timeout_s, MAX_BYTES)
    if connected:
        res["latency_s"] = round(time.monotonic() - t0, 4)
    if err:
        res["error"] = err
        return res
    code, _head, body = http_exchange.status(data)
    if code is None:
        res["error"] = "not an HTTP answer"
        return res
    res["code"] = code
    if code != 200:
        res["error"] = "HTTP %d" % code
        return res
    res["values"] = parse(body.decode("utf-8", "replace"))
    res["ok"] = True
    return res


def pair(start: Optional[Dict[str, Any]], end: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The two reads of one port as one snapshot entry, with each metric's change."""
    out = {"start": start, "end": end}  # type: Dict[str, Any]
    if start and end and start.get("ok") and end.get("ok"):
        a, b = start["values"], end["values"]
        out["delta"] = {k: round(b[k] - a[k], 6) for k in b if k in a}
    return out
