"""User code loaded into the real vLLM server by the tests, the way deployments load theirs.

Both block only while a flag file exists (its path in the server's environment), and never for
longer than ``HD_MAX_BLOCK_S``: a test that is killed leaves no server wedged for ever.

- ``FlagLogitsProcessor`` (``--logits-processors hd_vllm_plugins:FlagLogitsProcessor``): a
  custom logits processor, run by every worker in every step. While ``HD_STEP_FLAG`` exists its
  ``apply`` does not return: the step is stuck in a worker, in user code, and ``/health`` stays
  200.
- ``BlockingMiddleware`` (``--middleware hd_vllm_plugins.BlockingMiddleware``): an ASGI
  middleware that, on ``GET /hd-block``, waits synchronously for ``HD_LOOP_FLAG`` to go away:
  the API server's event loop is blocked while the engine is idle and fine.
"""

from __future__ import annotations

import os
import time

MAX_BLOCK_S = float(os.environ.get("HD_MAX_BLOCK_S", "240"))


def _wait_while(flag: str | None) -> None:
    if not flag:
        return
    t0 = time.monotonic()
    while os.path.exists(flag) and time.monotonic() - t0 < MAX_BLOCK_S:
        time.sleep(0.05)


try:
    from vllm.v1.sample.logits_processor import LogitsProcessor as _Base
except ImportError:  # imported outside the server (lint, collection): no vLLM there
    _Base = object  # type: ignore[assignment,misc]


class FlagLogitsProcessor(_Base):  # type: ignore[misc,valid-type]
    def __init__(self, vllm_config, device, is_pin_memory) -> None:  # noqa: ANN001
        self.flag = os.environ.get("HD_STEP_FLAG")

    def is_argmax_invariant(self) -> bool:
        return False  # applied in every step, greedy or not

    def update_state(self, batch_update) -> None:  # noqa: ANN001
        return None

    def apply(self, logits):  # noqa: ANN001, ANN201
        _wait_while(self.flag)
        return logits


class BlockingMiddleware:
    def __init__(self, app) -> None:  # noqa: ANN001
        self.app = app
        self.flag = os.environ.get("HD_LOOP_FLAG")

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope.get("type") == "http" and scope.get("path") == "/hd-block":
            _wait_while(self.flag)  # synchronous on purpose: the event loop stops here
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/plain")],
                }
            )
            await send({"type": "http.response.body", "body": b"unblocked\n"})
            return
        await self.app(scope, receive, send)
