"""The opt-in canary (``--probe-generate``): one 1-token completion, with a short timeout.

It is the only thing hangdoctor sends that makes the engine work, so it runs only when asked,
after the window's samples are taken (its token must not read as progress), and the report
says whether it was sent. The model name comes from ``GET /v1/models``; an API key, when
given, goes in the ``Authorization`` header and nowhere else (never in the snapshot).

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import json
import time

from hangdoctor import redact
from hangdoctor.collect import http_exchange

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple


def _http(
    host: str,
    port: int,
    method: str,
    path: str,
    body: Optional[bytes],
    api_key: Optional[str],
    timeout_s: float,
) -> Tuple[Optional[int], bytes, Optional[str]]:
    auth = ["Authorization: Bearer %s" % api_key] if api_key else []
    data, err, _ = http_exchange.exchange(
        host, port, http_exchange.request(method, path, host, auth, body), timeout_s, 1 << 20)
    if err:
        return None, data, err
    code, _head, payload = http_exchange.status(data)
    if code is None:
        return None, payload, "not an HTTP answer"
    return code, payload, None


def generate(port: int, ip: str, api_key: Optional[str], timeout_s: float) -> Dict[str, Any]:
    """{"sent", "ok", "model", "code", "latency_s", "error"}: a 1-token completion."""
    host = "127.0.0.1" if ip in ("0.0.0.0", "::", "127.0.0.1", "") else ip
    res = {
        "port": port,
        "sent": False,
        "ok": False,
        "model": None,
        "code": None,
        "latency_s": None,
        "error": None,
    }  # type: Dict[str, Any]
    t0 = time.monotonic()
    code, payload, err = _http(host, port, "GET", "/v1/models", None, api_key, min(timeout_s, 3.0))
    if code != 200:
        res["error"] = "GET /v1/models: %s" % (err or "HTTP %s" % code)
        res["code"] = code
        return res
    try:
        res["model"] = str(json.loads(payload.decode("utf-8", "replace"))["data"][0]["id"])[:200]
    except (ValueError, KeyError, IndexError, TypeError):
        res["error"] = "GET /v1/models: no model in the answer"
        return res
    body = json.dumps(
        {"model": res["model"], "prompt": "hello", "max_tokens": 1, "temperature": 0}
    ).encode()
    left = max(0.5, timeout_s - (time.monotonic() - t0))
    t1 = time.monotonic()
    res["sent"] = True
    code, payload, err = _http(host, port, "POST", "/v1/completions", body, api_key, left)
    res["latency_s"] = round(time.monotonic() - t1, 4)
    res["code"] = code
    if err:
        res["error"] = err
    elif code != 200:
        res["error"] = "HTTP %d: %s" % (code, payload[:120].decode("utf-8", "replace"))
    else:
        res["ok"] = True
    if res["error"]:
        # the server's error body may echo what we sent (our --api-key): never kept raw
        if api_key:
            redact.learn(api_key, always=True)
        res["error"] = redact.scrub_known(redact.redact_text(res["error"]))
        if api_key and api_key in res["error"]:
            res["error"] = res["error"].replace(api_key, redact.MASK)
    return res
