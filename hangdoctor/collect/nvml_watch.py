"""The wedge watchdog of GPU sampling: the sampler's state, its calls timed, and its result.

A wedged driver makes NVML calls (and ``nvidia-smi``) block for minutes or forever, so the
calls run in a worker thread; ``SamplerCore.run`` watches the call in progress and gives up on
one that exceeds ``call_timeout_s``, and ``SamplerCore.result`` returns whatever was gathered so
far from any thread at any time. A call that does not return is itself evidence (``gpu-fault``).
The backends (nvml_pynvml.py, nvml_smi.py) wrap every call in ``_begin`` / ``_end`` and change
the shared section only through ``_update``; GpuSampler (nvml.py) joins them.

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import threading
import time

from hangdoctor.collect.nvml_records import json_copy, ordered_device

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

SOURCE = "nvml"

_WATCH_POLL_S = 0.05
_TIMEOUT_REMEDY = (
    "the driver is not answering: check `dmesg | grep -i xid`; if `nvidia-smi` hangs too, "
    "drain the node and reset the GPU"
)


class Abandoned(Exception):
    """The watcher gave up on this worker; stop touching shared state."""


class SamplerCore:
    """What every GPU backend samples under: the state shared with the watcher, and the watcher.

    Subclasses provide ``_work`` (run in the worker thread; it must set ``_done`` at its end).
    """

    def __init__(
        self,
        window_s: float,
        interval_s: float = 0.25,
        call_timeout_s: float = 5.0,
        *,
        t0_monotonic: Optional[float] = None,
        backend: str = "auto",
        nvidia_smi: str = "nvidia-smi",
        before_pynvml: Optional[Callable[[], None]] = None,
    ) -> None:
        self.window_s = max(0.0, float(window_s))
        self.interval_s = max(0.01, float(interval_s))
        self.call_timeout_s = float(call_timeout_s)
        self.backend = backend
        self.nvidia_smi = nvidia_smi
        self.before_pynvml = before_pynvml
        self._t0 = t0_monotonic
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._abandoned = False
        self._call: Optional[Tuple[str, Optional[int], float]] = None  # (what, gpu, started)
        self._t_run: Optional[float] = None
        self._t_end: Optional[float] = None
        self._section: Optional[Dict[str, Any]] = None  # the "gpus" section being filled
        self._status: Optional[str] = None
        self._detail = ""
        self._remedy: Optional[str] = None
        self._notes: List[str] = []  # extra detail lines: lost GPUs, fallbacks, field errors
        self._pynvml: Any = None
        self._extra: Dict[str, Callable[..., Any]] = {}  # calls pynvml has no plain name for
        self._chosen: Dict[Tuple[int, str], str] = {}  # (gpu, field) -> function that works

    # ---- public ------------------------------------------------------------------------

    def run(self) -> None:
        """Init NVML, read static info, sample until the window ends, shut down.

        Gives up (status ``timeout``) on a call that does not return within ``call_timeout_s``,
        leaving the worker thread blocked in it: nothing can interrupt a call into the driver.
        """
        self._t_run = time.monotonic()
        if self._t0 is None:
            self._t0 = self._t_run
        worker = threading.Thread(target=self._work, name="hangdoctor-nvml", daemon=True)
        worker.start()
        # a run that is merely slow (many GPUs, slow calls) also ends within this budget
        budget_end = self._t_run + self.window_s + 2 * self.call_timeout_s + 2.0
        while not self._done.wait(_WATCH_POLL_S):
            now = time.monotonic()
            with self._lock:
                call = self._call
                if call is not None and now - call[2] > self.call_timeout_s + 0.5:
                    self._give_up(self._stuck_detail(call, now))
                    break
                if now > budget_end:
                    ran_s = now - self._t_run
                    self._give_up(
                        f"GPU sampling ran {ran_s:.1f} s, past its window of {self.window_s:.1f} s"
                    )
                    break
        with self._lock:
            self._t_end = time.monotonic()

    def result(self) -> Tuple[Optional[Dict[str, Any]], Dict[str, Any]]:
        """Return (the ``gpus`` snapshot section or None, the manifest entry for ``nvml``).

        Safe from any thread; when ``run()`` has not finished, reports what was gathered so far
        with status ``timeout`` and names the NVML call in progress.
        """
        with self._lock:
            now = time.monotonic()
            if self._t_run is None:
                status, detail, remedy = "failed", "GPU sampling never started", None
                duration_s = 0.0
            else:
                if self._status is None:
                    # still running: the probe's deadline came first. Report without stopping
                    # the worker, so a later result() still sees a run that finished.
                    call = self._call
                    if call is not None:
                        detail = self._stuck_detail(call, now)
                    else:
                        detail = f"GPU sampling had not finished after {now - self._t_run:.1f} s"
                    status, remedy = "timeout", _TIMEOUT_REMEDY
                else:
                    status, detail, remedy = self._status, self._detail, self._remedy
                duration_s = (self._t_end or now) - self._t_run
            notes = [n for n in self._notes if n not in detail]
            if notes:
                detail = "; ".join([detail] + notes) if detail else "; ".join(notes)
            section = None
            devices = self._section.get("devices") if self._section is not None else None
            # nothing gathered and not a clean "no GPUs here": the manifest entry says it all
            if devices is not None and (devices or status == "ok"):
                section = json_copy(self._section)
                section["status"] = status
                section["devices"] = [ordered_device(d) for d in section["devices"]]
        entry: Dict[str, Any] = {
            "source": SOURCE,
            "status": status,
            "duration_s": round(duration_s, 3),
            "detail": detail,
        }
        if remedy:
            entry["remedy"] = remedy
        return section, entry

    # ---- bookkeeping -------------------------------------------------------------------

    def _stuck_detail(self, call: Tuple[str, Optional[int], float], now: float) -> str:
        what, gpu, started = call
        where = f" on GPU {gpu}" if gpu is not None else ""
        if what.startswith("nvml"):
            what = "NVML call " + what
        elapsed = now - started
        if elapsed >= self.call_timeout_s:
            return f"{what}{where} did not return within {self.call_timeout_s:.1f} s"
        return (
            f"{what}{where} had not returned after {elapsed:.1f} s when the probe's deadline came"
        )

    def _give_up(self, detail: str) -> None:
        # caller holds self._lock
        self._abandoned = True
        self._status = "timeout"
        self._detail = detail
        self._remedy = _TIMEOUT_REMEDY

    def _finish(self, status: str, detail: str, remedy: Optional[str] = None) -> None:
        with self._lock:
            if self._abandoned:
                return
            self._status, self._detail, self._remedy = status, detail, remedy

    def _note(self, text: str) -> None:
        with self._lock:
            if text not in self._notes:
                self._notes.append(text)

    def _check_abandoned(self) -> None:
        if self._abandoned:
            raise Abandoned()

    def _begin(self, what: str, gpu: Optional[int]) -> None:
        with self._lock:
            if self._abandoned:
                raise Abandoned()
            self._call = (what, gpu, time.monotonic())

    def _end(self) -> None:
        with self._lock:
            self._call = None
            if self._abandoned:
                raise Abandoned()

    def _update(self, fn: Callable[[], None]) -> None:
        """Apply a mutation of the shared section under the lock, unless abandoned."""
        with self._lock:
            if self._abandoned:
                raise Abandoned()
            fn()

    def _elapsed(self) -> float:
        assert self._t0 is not None
        return round(time.monotonic() - self._t0, 3)

    def _schedule(self, interval_s: float, take: Callable[[bool], None]) -> int:
        """Call ``take(is_edge)`` at the window start, every interval, and at the window end."""
        assert self._t_run is not None
        start = time.monotonic()
        end = self._t_run + self.window_s
        n = 0
        while True:
            last = n >= 1 and time.monotonic() >= end
            take(n == 0 or last)
            n += 1
            if last:
                return n
            wake = min(start + n * interval_s, end)
            delay = wake - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._check_abandoned()

    def _finish_sampled(
        self, section: Dict[str, Any], devices: List[Dict[str, Any]], n: int, backend: str
    ) -> None:
        lost = [d["index"] for d in devices if d.get("lost")]
        errors = sum(1 for d in devices if d.get("field_errors"))
        gpus = "GPU" if len(devices) == 1 else "GPUs"
        samples = "sample" if n == 1 else "samples"
        detail = f"{len(devices)} {gpus}, {n} {samples} over {self.window_s:.1f} s ({backend}"
        if section.get("driver_version"):
            detail += f", driver {section['driver_version']}"
        detail += ")"
        for dev in devices:
            if dev.get("lost"):
                self._note(f"GPU {dev['index']} lost: {dev.get('lost_detail', '')}")
        status = "partial" if lost or errors else "ok"
        remedy = None
        if lost:
            remedy = (
                "check `dmesg | grep -i xid` and `nvidia-smi -q`; a lost GPU needs a reset or "
                "the node draining"
            )
        self._finish(status, detail, remedy)
