"""The probe's threads: a call in its own daemon thread, a pool that gates how many run at
once, and a join that gives up at a deadline.

Layer: collect; may import: the standard library only (it ships in the probe).
"""

from __future__ import annotations

import threading
import time

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


class Task:
    """One call in its own daemon thread, at most ``gate``'s count of them running at once."""

    def __init__(self, fn: Any, args: Any, kwargs: Any, gate: threading.BoundedSemaphore) -> None:
        self._finished = threading.Event()
        self._value = None  # type: Any
        self._error = None  # type: Optional[BaseException]

        def run() -> None:
            with gate:
                try:
                    self._value = fn(*args, **kwargs)
                except BaseException as exc:  # handed to whoever asks for the result
                    self._error = exc
                finally:
                    self._finished.set()

        threading.Thread(target=run, name="hd-task", daemon=True).start()

    def done(self) -> bool:
        return self._finished.is_set()

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self._finished.wait(timeout):
            raise TimeoutError("not finished in time")
        if self._error is not None:
            raise self._error
        return self._value


class Pool:
    """What the probe needs of a thread pool, without concurrent.futures (and the logging it
    imports: ~10 ms before the first sample on a remote host). Its threads are daemons: a
    source wedged past the deadline never holds the probe's exit."""

    def __init__(self, workers: int) -> None:
        self._gate = threading.BoundedSemaphore(workers)

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Task:
        return Task(fn, args, kwargs, self._gate)


def join(thread: Optional[threading.Thread], until: float) -> None:
    if thread is not None:
        thread.join(timeout=max(0.0, until - time.monotonic()))
