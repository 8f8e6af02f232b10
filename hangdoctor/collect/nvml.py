"""GPU evidence: the one adapter through which every NVML call goes.

Ships to target hosts as source and runs with whatever Python is there (3.8+): stdlib only at
import time. ``pynvml`` (the nvidia-ml-py package) is imported lazily; when it is missing or
``nvmlInit`` fails, ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` stands in.

A wedged driver makes NVML calls (and ``nvidia-smi``) block for minutes or forever, so the
calls run in a worker thread; ``GpuSampler.run`` watches the call in progress and gives up on
one that exceeds ``call_timeout_s``, and ``GpuSampler.result`` returns whatever was gathered so
far from any thread at any time. A call that does not return is itself evidence (``gpu-fault``).

Field names follow SCHEMA.md (``gpus`` section). A field the driver does not give is named in
the device's ``unsupported`` list and left out of the samples (absent means unknown, never 0).

The pieces: nvml_watch.py (the watchdog, the shared state, the result), nvml_pynvml.py and
nvml_smi.py (the two backends), nvml_records.py (the device records both fill).

Layer: collect; may import: the standard library, pynvml (optional, imported when used) and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

from hangdoctor.collect.nvml_pynvml import PynvmlBackend
from hangdoctor.collect.nvml_smi import SmiBackend
from hangdoctor.collect.nvml_watch import Abandoned


class GpuSampler(PynvmlBackend, SmiBackend):
    """Sample every GPU of this host over a window, through pynvml or nvidia-smi.

    ``run()`` blocks for about ``window_s`` (plus NVML init and static reads) and is meant to run
    in a daemon thread; ``result()`` may be called from any thread at any time and never blocks
    on NVML. ``t0_monotonic`` sets the origin of sample times (the probe's window start);
    ``backend`` forces ``"pynvml"`` or ``"nvidia-smi"`` instead of ``"auto"``.
    ``before_pynvml`` runs just before pynvml is imported, when the driver library is there
    (the probe uses it to wait until site-packages are on ``sys.path``).
    """

    def _work(self) -> None:
        try:
            used_pynvml, why = False, ""
            if self.backend in ("auto", "pynvml"):
                used_pynvml, why = self._run_pynvml()
            if not used_pynvml and self.backend in ("auto", "nvidia-smi"):
                self._run_nvidia_smi(why)
            with self._lock:
                unfinished = self._status is None and not self._abandoned
            if unfinished:
                self._finish("failed", why or f"no GPU backend ran (backend={self.backend!r})")
        except Abandoned:
            pass
        except Exception as exc:  # a bug or an unexpected pynvml quirk: evidence, not a crash
            self._finish("failed", f"GPU sampling failed: {type(exc).__name__}: {exc}")
        finally:
            self._done.set()
