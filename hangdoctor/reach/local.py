"""The local host: the probe runs in this process, in a worker thread, without SSH.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Optional

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.errors import TargetError


class LocalTarget:
    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    async def collect(
        self, config: ProbeConfig, on_started: Optional[Callable[[], None]] = None
    ) -> dict[str, Any]:
        from hangdoctor.collect.probe import collect

        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def work() -> None:
            try:
                snap = collect(config)
                loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(snap))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                err = exc
                loop.call_soon_threadsafe(lambda: fut.done() or fut.set_exception(err))

        # A daemon thread, not the default executor: a probe stuck in a blocked C call (a
        # wedged NVML) must not keep the interpreter alive after the deadline.
        threading.Thread(target=work, name="hd-probe", daemon=True).start()
        if on_started is not None:
            on_started()
        try:
            return await asyncio.wait_for(fut, config.deadline_s + 5.0)
        except asyncio.TimeoutError:
            raise TargetError(
                f"{self.name}: the probe did not finish within {config.deadline_s + 5.0:.0f} s",
                "a source is wedged; see the per-source timeouts, or raise --deadline",
            ) from None
