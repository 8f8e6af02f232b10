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
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

SOURCE = "nvml"

# NVML return codes (nvml.h; stable across driver releases). pynvml's exception classes are
# matched by these values so the adapter works with old and new pynvml alike.
_NOT_SUPPORTED = 3
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_UNKNOWN = 999

# nvmlClocksEventReason* bits (called throttle reasons before driver 535); names as in
# `nvidia-smi -q -d PERFORMANCE`.
_THROTTLE_BITS = [
    (0x1, "idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock"),
]

_MIB = 1048576
_PID_MAX = 4194304  # kernel upper bound for pid_max; larger "pids" are struct garbage
_NO_DRIVER_DETAIL = "no NVIDIA driver (libnvidia-ml.so.1 not found)"
_WATCH_POLL_S = 0.05
_TIMEOUT_REMEDY = (
    "the driver is not answering: check `dmesg | grep -i xid`; if `nvidia-smi` hangs too, "
    "drain the node and reset the GPU"
)


class _GpuLost(Exception):
    """The device answered "GPU is lost" / "Unknown Error": stop querying it."""


class _Abandoned(Exception):
    """The watcher gave up on this worker; stop touching shared state."""


class _CallTimeout(Exception):
    """A subprocess call exceeded its timeout (it enforces its own, unlike NVML calls)."""


def throttle_names(mask: int) -> List[str]:
    """Names of the set clock-event (throttle) reason bits; unknown bits as hex.

    Confirm by hand: ``nvidia-smi -q -d PERFORMANCE``.
    """
    names = [name for bit, name in _THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in _THROTTLE_BITS)
    if rest:
        names.append(hex(rest))
    return names


def _text(value: Any) -> str:
    """pynvml returns bytes before 11.x and str after."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _nvml_code(exc: BaseException) -> Optional[int]:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _is_function_missing(exc: BaseException) -> bool:
    # pynvml >= 11.5 wraps FunctionNotFound of unversioned calls in NVMLLibraryMismatchError
    return (
        _nvml_code(exc) == _FUNCTION_NOT_FOUND or type(exc).__name__ == "NVMLLibraryMismatchError"
    )


def _cuda_version_text(version: int) -> str:
    """13000 -> "13.0" (NVML encodes major * 1000 + minor * 10)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _pid_visible(pid: int) -> bool:
    # /proc lookup, never a signal: signalling is off limits even with signal 0
    return os.path.exists(f"/proc/{pid}")


def _driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


class GpuSampler:
    """Sample every GPU of this host over a window, through pynvml or nvidia-smi.

    ``run()`` blocks for about ``window_s`` (plus NVML init and static reads) and is meant to run
    in a daemon thread; ``result()`` may be called from any thread at any time and never blocks
    on NVML. ``t0_monotonic`` sets the origin of sample times (the probe's window start);
    ``backend`` forces ``"pynvml"`` or ``"nvidia-smi"`` instead of ``"auto"``.
    ``before_pynvml`` runs just before pynvml is imported, when the driver library is there
    (the probe uses it to wait until site-packages are on ``sys.path``).
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
                section = _copy(self._section)
                section["status"] = status
                section["devices"] = [_ordered(d) for d in section["devices"]]
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
            raise _Abandoned()

    def _begin(self, what: str, gpu: Optional[int]) -> None:
        with self._lock:
            if self._abandoned:
                raise _Abandoned()
            self._call = (what, gpu, time.monotonic())

    def _end(self) -> None:
        with self._lock:
            self._call = None
            if self._abandoned:
                raise _Abandoned()

    def _update(self, fn: Callable[[], None]) -> None:
        """Apply a mutation of the shared section under the lock, unless abandoned."""
        with self._lock:
            if self._abandoned:
                raise _Abandoned()
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
        except _Abandoned:
            pass
        except Exception as exc:  # a bug or an unexpected pynvml quirk: evidence, not a crash
            self._finish("failed", f"GPU sampling failed: {type(exc).__name__}: {exc}")
        finally:
            self._done.set()

    # ---- pynvml ------------------------------------------------------------------------

    def _nv(self, fn_name: str, gpu: Optional[int], *args: Any) -> Any:
        fn = self._extra.get(fn_name) or getattr(self._pynvml, fn_name, None)
        if fn is None:
            # this pynvml is older than the function: same as a driver that lacks it
            raise _MissingInPynvml(fn_name)
        self._begin(fn_name, gpu)
        try:
            return fn(*args)
        finally:
            self._end()

    def _run_pynvml(self) -> Tuple[bool, str]:
        """Sample through pynvml. Returns (handled, why not) — not handled means fall back."""
        if not self._driver_library_loads():
            # What nvmlInit would say, without importing pynvml (~70 ms of CPU that a host
            # without GPUs would spend during the window, against the probe's other threads).
            return self._init_failed_no_driver(_NO_DRIVER_DETAIL)
        if self.before_pynvml is not None:
            self.before_pynvml()
        self._begin("import pynvml", None)
        try:
            import pynvml  # nvidia-ml-py
        except Exception as exc:
            self._end()
            return False, f"pynvml not importable ({exc})"
        self._end()
        self._pynvml = pynvml
        self._extra = _pynvml_extras(pynvml)
        try:
            self._nv("nvmlInit", None)
        except _Abandoned:
            raise
        except Exception as exc:
            code = _nvml_code(exc)
            if code == _LIBRARY_NOT_FOUND:
                return self._init_failed_no_driver(_NO_DRIVER_DETAIL)
            if code == _DRIVER_NOT_LOADED:
                return self._init_failed_no_driver(f"no NVIDIA driver loaded (nvmlInit: {exc})")
            return False, f"nvmlInit failed: {exc}"

        section: Dict[str, Any] = {"status": "ok", "backend": "pynvml", "devices": None}
        for key, fn_name, convert in (
            ("driver_version", "nvmlSystemGetDriverVersion", _text),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion", _cuda_version_text),
            ("nvml_version", "nvmlSystemGetNVMLVersion", _text),
        ):
            try:
                section[key] = convert(self._nv(fn_name, None))
            except _Abandoned:
                raise
            except Exception as exc:
                self._note(f"{fn_name} failed: {exc}")
        self._update(lambda: setattr(self, "_section", section))

        try:
            count = self._nv("nvmlDeviceGetCount", None)
        except _Abandoned:
            raise
        except Exception as exc:
            self._finish("failed", f"nvmlDeviceGetCount failed: {exc}", _init_remedy(str(exc)))
            return True, ""
        devices: List[Dict[str, Any]] = []
        handles: Dict[int, Any] = {}
        for index in range(count):
            dev = _new_device(index)
            devices.append(dev)
            try:
                handles[index] = self._nv("nvmlDeviceGetHandleByIndex", index, index)
            except _Abandoned:
                raise
            except Exception as exc:
                if _nvml_code(exc) in (_GPU_IS_LOST, _UNKNOWN):
                    self._mark_lost(dev, "nvmlDeviceGetHandleByIndex", exc)
                else:  # e.g. no permission for this device: say so, sample the others
                    dev["field_errors"] = {"handle": f"nvmlDeviceGetHandleByIndex: {exc}"}
                    self._note(f"GPU {index}: nvmlDeviceGetHandleByIndex: {exc}")
        self._update(lambda: section.__setitem__("devices", devices))

        for dev in devices:
            if dev["index"] in handles:
                self._static(dev, handles[dev["index"]])

        def take(edge: bool) -> None:
            t = self._elapsed()
            for dev in devices:
                handle = handles.get(dev["index"])
                if handle is None or dev.get("lost"):
                    continue
                try:
                    sample = self._sample(dev, handle, t)
                    self._update(lambda d=dev, s=sample: d["samples"].append(s))
                    if edge:
                        procs = self._processes(dev, handle)
                        if procs is not None:
                            self._update(lambda d=dev, p=procs: _set_processes(d, p))
                except _GpuLost:
                    continue

        n = self._schedule(self.interval_s, take)
        try:
            self._nv("nvmlShutdown", None)
        except _Abandoned:
            raise
        except Exception:
            pass  # shutting down is a courtesy; the samples are already taken
        self._finish_sampled(section, devices, n, "pynvml")
        return True, ""

    def _driver_library_loads(self) -> bool:
        """Whether ``libnvidia-ml.so.1`` can be loaded, the way pynvml loads it on Linux.

        Loading the library does not talk to the driver (``nvmlInit`` does), so this cannot
        block. Anything but a clean "not found" (no ctypes, another OS) answers True and lets
        pynvml decide.
        """
        if not sys.platform.startswith("linux"):
            return True
        try:
            import ctypes
        except Exception:
            return True
        self._begin("load libnvidia-ml.so.1", None)
        try:
            ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return False
        finally:
            self._end()
        return True

    def _init_failed_no_driver(self, detail: str) -> Tuple[bool, str]:
        import shutil

        if shutil.which(self.nvidia_smi) and self.backend == "auto":
            # nvidia-smi may know a library path pynvml did not search (some containers)
            return False, detail
        self._finish("unavailable", detail)
        return True, ""

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

    def _mark_lost(self, dev: Dict[str, Any], fn_name: str, exc: BaseException) -> None:
        def apply() -> None:
            dev["lost"] = True
            dev["lost_detail"] = f"{fn_name}: {exc}"

        self._update(apply)
        self._note(f"GPU {dev['index']} lost: {fn_name}: {exc}")

    def _field(self, dev: Dict[str, Any], field: str, fn_names: List[str], *args: Any) -> Any:
        """Call the first of ``fn_names`` that exists; None when unsupported or failing.

        Raises _GpuLost when the device answers "GPU is lost" or "Unknown Error".
        """
        index = dev["index"]
        if field in dev["unsupported"] or field in dev.get("field_errors", {}):
            return None
        chosen = self._chosen.get((index, field))
        candidates = [chosen] if chosen else fn_names
        for fn_name in candidates:
            try:
                value = self._nv(fn_name, index, *args)
            except _Abandoned:
                raise
            except _MissingInPynvml:
                continue
            except Exception as exc:
                code = _nvml_code(exc)
                if _is_function_missing(exc):
                    continue  # the driver lacks this one; an older name may exist
                if code == _NOT_SUPPORTED:
                    break
                if code in (_GPU_IS_LOST, _UNKNOWN):
                    self._mark_lost(dev, fn_name, exc)
                    raise _GpuLost() from exc
                msg = f"{fn_name}: {exc or type(exc).__name__}"
                self._update(lambda m=msg: dev.setdefault("field_errors", {}).__setitem__(field, m))
                self._note(f"GPU {index}: {msg}")
                return None
            self._chosen[(index, field)] = fn_name
            return value
        self._update(lambda: _add_unsupported(dev, field))
        return None

    def _static(self, dev: Dict[str, Any], handle: Any) -> None:
        """Name, UUID, PCI bus id, memory total, power limit, ECC / retired pages / remapped rows.

        Confirm by hand: ``nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,
        enforced.power.limit,ecc.errors.uncorrected.volatile.total --format=csv`` and
        ``nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER``.
        """
        try:
            info: Dict[str, Any] = {}
            errors: Dict[str, Any] = {}
            name = self._field(dev, "name", ["nvmlDeviceGetName"], handle)
            if name is not None:
                info["name"] = _text(name)
            uuid = self._field(dev, "uuid", ["nvmlDeviceGetUUID"], handle)
            if uuid is not None:
                info["uuid"] = _text(uuid)
            pci = self._field(dev, "pci_bus_id", ["nvmlDeviceGetPciInfo"], handle)
            if pci is not None:
                info["pci_bus_id"] = _text(getattr(pci, "busId", b"") or pci.busIdLegacy)
            mem = self._field(dev, "mem_total_mib", _MEMORY_FNS, handle)
            if mem is not None:
                info["mem_total_mib"] = int(mem.total // _MIB)
                reserved = getattr(mem, "reserved", None)  # v2 only
                if isinstance(reserved, int):
                    info["mem_reserved_mib"] = int(reserved // _MIB)
            limit_mw = self._field(
                dev, "power_limit_w", ["nvmlDeviceGetEnforcedPowerLimit"], handle
            )
            if limit_mw is not None:
                info["power_limit_w"] = round(limit_mw / 1000.0, 1)
            # uncorrected (1), volatile = since the last driver load (0)
            ecc = self._field(
                dev, "ecc_uncorrected_volatile", ["nvmlDeviceGetTotalEccErrors"], handle, 1, 0
            )
            if ecc is not None:
                errors["ecc_uncorrected_volatile"] = int(ecc)
            pages = None
            for cause in (0, 1):  # multiple single-bit, double-bit
                got = self._field(
                    dev, "retired_pages", ["nvmlDeviceGetRetiredPages"], handle, cause
                )
                if got is None:
                    pages = None
                    break
                pages = (pages or 0) + len(got)
            if pages is not None:
                errors["retired_pages"] = pages
            rows = self._field(dev, "remapped_rows", ["nvmlDeviceGetRemappedRows"], handle)
            if rows is not None:
                corr, unc, pending, failure = rows
                errors["remapped_rows_correctable"] = int(corr)
                errors["remapped_rows_uncorrectable"] = int(unc)
                errors["remapped_rows_pending"] = bool(pending)
                errors["remapped_rows_failure"] = bool(failure)
        except _GpuLost:
            pass
        self._update(lambda: (dev.update(info), dev["errors"].update(errors)))

    def _sample(self, dev: Dict[str, Any], handle: Any, t: float) -> Dict[str, Any]:
        """One sample of one GPU.

        Confirm by hand: ``nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,
        memory.used,power.draw,clocks.sm,pstate,clocks_event_reasons.active --format=csv -lms 250``;
        PCIe throughput: ``nvidia-smi dmon -s t``.
        """
        s: Dict[str, Any] = {"t": t}
        util = self._field(dev, "util_pct", ["nvmlDeviceGetUtilizationRates"], handle)
        if util is not None:
            s["util_pct"] = int(util.gpu)
            s["mem_util_pct"] = int(util.memory)
        mem = self._field(dev, "mem_used_mib", _MEMORY_FNS, handle)
        if mem is not None:
            s["mem_used_mib"] = int(mem.used // _MIB)
        power_mw = self._field(dev, "power_w", ["nvmlDeviceGetPowerUsage"], handle)
        if power_mw is not None:
            s["power_w"] = round(power_mw / 1000.0, 1)
        clock = self._field(dev, "sm_clock_mhz", ["nvmlDeviceGetClockInfo"], handle, 1)  # SM
        if clock is not None:
            s["sm_clock_mhz"] = int(clock)
        pstate = self._field(dev, "pstate", ["nvmlDeviceGetPerformanceState"], handle)
        if pstate is not None and pstate != 32:  # 32: NVML_PSTATE_UNKNOWN
            s["pstate"] = int(pstate)
        reasons = self._field(
            dev,
            "throttle",
            ["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"],
            handle,
        )
        if reasons is not None:
            s["throttle"] = throttle_names(int(reasons))
        for field, counter in (("pcie_tx_kbps", 0), ("pcie_rx_kbps", 1)):
            kbps = self._field(dev, field, ["nvmlDeviceGetPcieThroughput"], handle, counter)
            if kbps is not None:
                s[field] = int(kbps)
        return s

    def _processes(self, dev: Dict[str, Any], handle: Any) -> Optional[List[Dict[str, Any]]]:
        """Compute and graphics processes on one GPU with their memory.

        Confirm by hand: ``nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv``.
        """
        used: Dict[int, Optional[int]] = {}
        any_ok = False
        for field, names in (
            (
                "compute_processes",
                [
                    "nvmlDeviceGetComputeRunningProcesses",
                    "nvmlDeviceGetComputeRunningProcesses_v3",
                    "nvmlDeviceGetComputeRunningProcesses_v2",
                ],
            ),
            (
                "graphics_processes",
                [
                    "nvmlDeviceGetGraphicsRunningProcesses",
                    "nvmlDeviceGetGraphicsRunningProcesses_v3",
                    "nvmlDeviceGetGraphicsRunningProcesses_v2",
                ],
            ),
        ):
            procs = self._field(dev, field, names, handle)
            if procs is None:
                continue
            any_ok = True
            for p in procs:
                pid = getattr(p, "pid", None)
                if not isinstance(pid, int) or not 0 < pid <= _PID_MAX:
                    continue  # a struct-version mismatch yields garbage; skip it
                mem = getattr(p, "usedGpuMemory", None)
                mib = int(mem // _MIB) if isinstance(mem, int) and mem < (1 << 62) else None
                if pid not in used or (mib or 0) > (used[pid] or 0):
                    used[pid] = mib
        if not any_ok:
            return None
        return [{"pid": pid, "used_mib": mib} for pid, mib in sorted(used.items())]

    # ---- nvidia-smi --------------------------------------------------------------------

    def _smi(self, args: List[str], what: str) -> Tuple[int, str]:
        """Run nvidia-smi with a hard timeout; never waits on a process that ignores SIGKILL."""
        self._begin(what, None)
        try:
            try:
                proc = subprocess.Popen(
                    [self.nvidia_smi] + args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise _SmiMissing(str(exc)) from exc
            try:
                out, _ = proc.communicate(timeout=self.call_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.communicate(timeout=1.0)
                except subprocess.TimeoutExpired:
                    pass  # stuck in the driver (D state): leave it, never wait forever
                raise _CallTimeout(
                    f"{what} did not return within {self.call_timeout_s:.1f} s"
                ) from None
            return proc.returncode, out.decode("utf-8", "replace")
        finally:
            self._end()

    def _run_nvidia_smi(self, why_not_pynvml: str) -> None:
        import shutil

        if shutil.which(self.nvidia_smi) is None:
            why = why_not_pynvml
            if why.startswith("nvmlInit failed"):
                self._finish("failed", why + "; nvidia-smi not found", _init_remedy(why))
            elif why.startswith("no NVIDIA"):
                self._finish("unavailable", why)
            elif not _driver_present():
                self._finish("unavailable", _NO_DRIVER_DETAIL)
            else:
                self._finish(
                    "unavailable",
                    f"NVIDIA driver present but {why + ' and ' if why else ''}nvidia-smi not found",
                    "install nvidia-ml-py (`pip install nvidia-ml-py`) for the Python on the host",
                )
            return
        if why_not_pynvml:
            self._note(f"used nvidia-smi: {why_not_pynvml}")
        section: Dict[str, Any] = {"status": "ok", "backend": "nvidia-smi", "devices": None}
        devices: List[Dict[str, Any]] = []
        by_uuid: Dict[str, Dict[str, Any]] = {}
        state: Dict[str, Any] = {"fields": None}  # the field set this nvidia-smi accepts

        def take(edge: bool) -> None:
            t = self._elapsed()
            rows, problems = self._smi_query_gpus(state)
            if rows is None:
                raise _SmiFailed(problems[0] if problems else "no output")
            for problem in problems:
                self._note(f"nvidia-smi: {problem}")
            for row in rows:
                uuid = row.get("uuid") or f"index:{row.get('index')}"
                dev = by_uuid.get(uuid)
                if dev is None:
                    dev = _smi_new_device(row)
                    by_uuid[uuid] = dev
                    self._update(lambda d=dev: devices.append(d))
                # parsing marks fields unsupported on the published device: under the lock
                self._update(lambda d=dev, r=row: d["samples"].append(_smi_sample(r, d, t)))
                if not section.get("driver_version") and row.get("driver_version"):
                    self._update(
                        lambda r=row: section.__setitem__("driver_version", r["driver_version"])
                    )
            for problem in problems:
                lost_bus = _smi_lost_bus_id(problem)
                if lost_bus and not any(d.get("pci_bus_id") == lost_bus for d in devices):
                    dev = _new_device(len(devices))
                    dev.update({"pci_bus_id": lost_bus, "lost": True, "lost_detail": problem})
                    by_uuid["bus:" + lost_bus] = dev
                    self._update(lambda d=dev: devices.append(d))
            if edge:
                apps = self._smi_apps()
                if apps is not None:
                    for dev in devices:
                        procs = apps.get(dev.get("uuid", ""), [])
                        self._update(lambda d=dev, p=procs: _set_processes(d, p))

        self._update(lambda: (setattr(self, "_section", section), section.update(devices=devices)))
        try:
            n = self._schedule(max(self.interval_s, 0.5), take)
        except _CallTimeout as exc:
            with self._lock:
                if not self._abandoned:
                    self._give_up(f"{exc}")
            return
        except _SmiFailed as exc:
            if not devices:
                with self._lock:
                    self._section = None
            status = "partial" if devices else "failed"
            detail = f"nvidia-smi failed: {exc}"
            if why_not_pynvml:
                detail = f"{why_not_pynvml}; {detail}"
            remedy = _init_remedy(detail)
            if not devices and "couldn't communicate with the NVIDIA driver" in str(exc):
                status, detail, remedy = (
                    "unavailable",
                    f"{_NO_DRIVER_DETAIL} (nvidia-smi: {exc})",
                    None,
                )
            self._finish(status, detail, remedy)
            return
        for dev in devices:
            for field in ("pcie_tx_kbps", "pcie_rx_kbps"):
                self._update(lambda d=dev, f=field: _add_unsupported(d, f))
        self._finish_sampled(section, devices, n, "nvidia-smi")

    def _smi_query_gpus(
        self, state: Dict[str, Any]
    ) -> Tuple[Optional[List[Dict[str, str]]], List[str]]:
        """One ``nvidia-smi --query-gpu`` call; tries older field sets when a name is refused."""
        ladders = [state["fields"]] if state["fields"] else _SMI_FIELD_SETS
        last: List[str] = []
        for fields in ladders:
            rc, out = self._smi(
                ["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
                "nvidia-smi --query-gpu",
            )
            rows, problems = _parse_csv(out, fields)
            if rows or rc == 0:
                state["fields"] = fields
                return rows, problems
            last = problems or [f"exit code {rc}"]
            if not any("not a valid field" in p.lower() for p in problems):
                break
        return None, last

    def _smi_apps(self) -> Optional[Dict[str, List[Dict[str, Any]]]]:
        fields = ["pid", "gpu_uuid", "used_memory"]
        rc, out = self._smi(
            ["--query-compute-apps=" + ",".join(fields), "--format=csv,noheader,nounits"],
            "nvidia-smi --query-compute-apps",
        )
        rows, problems = _parse_csv(out, fields)
        if rc != 0 and not rows:
            self._note(f"nvidia-smi --query-compute-apps failed: {(problems or [rc])[0]}")
            return None
        apps: Dict[str, List[Dict[str, Any]]] = {}
        for row in rows:
            try:
                pid = int(row["pid"])
            except ValueError:
                continue
            apps.setdefault(row["gpu_uuid"], []).append(
                {"pid": pid, "used_mib": _smi_int(row["used_memory"])}
            )
        return apps


# Memory v2 first: its "used" leaves out the driver's reservation (~0.6 GiB on an H200), as
# nvidia-smi does; v1 (drivers before 510) counts the reservation as used.
_MEMORY_FNS = ["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"]


def _parameter_names(fn: Any) -> Tuple[str, ...]:
    """The names ``fn`` takes, from its code object (behind any functools.wraps): what
    ``inspect.signature`` gives for a plain function, without inspect's ~20 ms import."""
    for _ in range(8):
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            break
        fn = inner
    code = getattr(fn, "__code__", None)
    if code is None:  # a builtin or C function: ask inspect
        try:
            import inspect

            return tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            return ()
    return tuple(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])


def _pynvml_extras(pynvml: Any) -> Dict[str, Callable[..., Any]]:
    """NVML entry points that pynvml reaches only through a versioned argument."""
    extras: Dict[str, Callable[..., Any]] = {}
    version = getattr(pynvml, "nvmlMemory_v2", None)
    get_memory = getattr(pynvml, "nvmlDeviceGetMemoryInfo", None)
    takes_version = get_memory is not None and "version" in _parameter_names(get_memory)
    if version is not None and takes_version:
        extras["nvmlDeviceGetMemoryInfo_v2"] = lambda handle: get_memory(handle, version=version)
    return extras


class _MissingInPynvml(Exception):
    """The installed pynvml has no such function."""


class _SmiFailed(Exception):
    """nvidia-smi answered with an error and no usable rows."""


class _SmiMissing(_SmiFailed):
    """nvidia-smi could not be started."""


def _copy(value: Any) -> Any:
    # the section is plain JSON data: a structural copy suffices and is cheap
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_DEVICE_KEY_ORDER = [
    "index",
    "uuid",
    "name",
    "pci_bus_id",
    "mem_total_mib",
    "mem_reserved_mib",
    "power_limit_w",
    "lost",
]


def _ordered(dev: Dict[str, Any]) -> Dict[str, Any]:
    """Identity first, then the rest as gathered: easier to read in a saved snapshot."""
    out = {k: dev[k] for k in _DEVICE_KEY_ORDER if k in dev}
    out.update((k, v) for k, v in dev.items() if k not in out)
    return out


def _new_device(index: int) -> Dict[str, Any]:
    return {
        "index": index,
        "lost": False,
        "unsupported": [],
        "errors": {},
        "samples": [],
        "processes": [],
    }


def _add_unsupported(dev: Dict[str, Any], field: str) -> None:
    if field not in dev["unsupported"]:
        dev["unsupported"].append(field)


def _set_processes(dev: Dict[str, Any], procs: List[Dict[str, Any]]) -> None:
    """Keep the GPU's latest process list; PIDs gone from /proc are left out."""
    visible = [p for p in procs if _pid_visible(p["pid"])]
    dev["processes"] = visible
    hidden = sorted(p["pid"] for p in procs if p not in visible)
    if hidden:
        # a container's PID namespace hides the host PIDs NVML reports: keep them for the reader
        dev["pids_not_visible"] = hidden
    else:
        dev.pop("pids_not_visible", None)


def _init_remedy(detail: str) -> Optional[str]:
    low = detail.lower()
    if "mismatch" in low:
        return (
            "the loaded kernel module and the user-space driver differ (upgraded without a "
            "reboot?): compare `cat /proc/driver/nvidia/version` with the library version"
        )
    if "permission" in low:
        return "run as a user that may open /dev/nvidia* (the video group, or root)"
    return "run `nvidia-smi` by hand and check `dmesg | grep -i -e nvrm -e xid`"


# ---- nvidia-smi parsing ---------------------------------------------------------------

# Field sets tried in order: the current names, the pre-535 throttle name, then a minimal set.
_SMI_BASE = [
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "utilization.memory",
    "power.draw",
    "enforced.power.limit",
    "clocks.sm",
    "pstate",
]
_SMI_FIELD_SETS = [
    _SMI_BASE + ["clocks_event_reasons.active", "ecc.errors.uncorrected.volatile.total"],
    _SMI_BASE + ["clocks_throttle_reasons.active", "ecc.errors.uncorrected.volatile.total"],
    _SMI_BASE,
]
_SMI_UNSUPPORTED = {"[n/a]", "n/a", "[not supported]", "not supported", ""}
_SMI_LOST = ("[gpu is lost]", "gpu is lost", "[unknown error]")


def _parse_csv(out: str, fields: List[str]) -> Tuple[List[Dict[str, str]], List[str]]:
    """Rows of ``--format=csv,noheader,nounits`` output; other lines come back as problems."""
    import csv  # only here: nvidia-smi is the fallback, and the probe starts faster without it

    rows: List[Dict[str, str]] = []
    problems: List[str] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        cells = next(csv.reader([line], skipinitialspace=True))
        if len(cells) == len(fields):
            rows.append({f: c.strip() for f, c in zip(fields, cells)})
        else:
            problems.append(line.strip())
    return rows, problems


def _smi_lost_bus_id(line: str) -> Optional[str]:
    # "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost. Reboot ..."
    marker = "device handle for GPU"
    if marker not in line:
        return None
    rest = line.split(marker, 1)[1].strip()
    bus = rest.split(": ", 1)[0].strip().rstrip(":").upper()
    if not bus:
        return None
    domain, _, tail = bus.partition(":")
    if tail and len(domain) < 8:  # 0000:3B:00.0 -> 00000000:3B:00.0, NVML's form
        bus = domain.rjust(8, "0") + ":" + tail
    return bus


def _smi_int(value: str) -> Optional[int]:
    try:
        return int(float(value))
    except ValueError:
        return None


def _smi_value(row: Dict[str, str], key: str, dev: Dict[str, Any], field: str) -> Optional[str]:
    if key not in row:
        _add_unsupported(dev, field)
        return None
    value = row[key]
    if value.lower() in _SMI_LOST:
        dev["lost"] = True
        dev["lost_detail"] = f"nvidia-smi {key}: {value}"
        return None
    if value.lower() in _SMI_UNSUPPORTED:
        _add_unsupported(dev, field)
        return None
    return value


def _smi_new_device(row: Dict[str, str]) -> Dict[str, Any]:
    """Static fields from a ``--query-gpu`` row."""
    index = _smi_int(row.get("index", "")) or 0
    dev = _new_device(index)
    for key, field in (("uuid", "uuid"), ("name", "name"), ("pci.bus_id", "pci_bus_id")):
        value = _smi_value(row, key, dev, field)
        if value is not None:
            dev[field] = value
    total = _smi_value(row, "memory.total", dev, "mem_total_mib")
    if total is not None and _smi_int(total) is not None:
        dev["mem_total_mib"] = _smi_int(total)
    limit = _smi_value(row, "enforced.power.limit", dev, "power_limit_w")
    if limit is not None:
        try:
            dev["power_limit_w"] = round(float(limit), 1)
        except ValueError:
            pass
    ecc = _smi_value(row, "ecc.errors.uncorrected.volatile.total", dev, "ecc_uncorrected_volatile")
    if ecc is not None and _smi_int(ecc) is not None:
        dev["errors"]["ecc_uncorrected_volatile"] = _smi_int(ecc)
    return dev


def _smi_sample(row: Dict[str, str], dev: Dict[str, Any], t: float) -> Dict[str, Any]:
    """One sample from a ``--query-gpu`` row; fields nvidia-smi lacks are marked unsupported."""
    s: Dict[str, Any] = {"t": t}
    for key, field in (
        ("utilization.gpu", "util_pct"),
        ("utilization.memory", "mem_util_pct"),
        ("memory.used", "mem_used_mib"),
        ("clocks.sm", "sm_clock_mhz"),
    ):
        value = _smi_value(row, key, dev, field)
        if value is not None and _smi_int(value) is not None:
            s[field] = _smi_int(value)
    power = _smi_value(row, "power.draw", dev, "power_w")
    if power is not None:
        try:
            s["power_w"] = round(float(power), 1)
        except ValueError:
            pass
    pstate = _smi_value(row, "pstate", dev, "pstate")
    if pstate is not None and pstate.upper().startswith("P") and pstate[1:].isdigit():
        s["pstate"] = int(pstate[1:])
    key = next((k for k in row if k.startswith("clocks_")), "clocks_event_reasons.active")
    reasons = _smi_value(row, key, dev, "throttle")
    if reasons is not None:
        try:
            s["throttle"] = throttle_names(int(reasons, 16))
        except ValueError:
            pass
    return s
