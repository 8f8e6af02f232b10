"""GPU sampling through pynvml (the nvidia-ml-py package): static facts, samples and the
processes on each GPU, one NVML call at a time under the watchdog (nvml_watch.py).

``pynvml`` is imported lazily, and only when ``libnvidia-ml.so.1`` loads; when it is missing or
``nvmlInit`` fails, ``_run_pynvml`` says why and GpuSampler (nvml.py) falls back to nvidia-smi
(nvml_smi.py). Old and new pynvml alike: exceptions are matched by their NVML return code, a
function missing in pynvml or in the driver is tried under its older name.

Layer: collect; may import: the standard library, pynvml (optional, imported when used) and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import sys

from hangdoctor.collect.nvml_records import (
    MIB,
    NO_DRIVER_DETAIL,
    PID_MAX,
    add_unsupported,
    init_remedy,
    new_device,
    set_processes,
    throttle_names,
)
from hangdoctor.collect.nvml_watch import Abandoned, SamplerCore

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

# NVML return codes (nvml.h; stable across driver releases). pynvml's exception classes are
# matched by these values so the adapter works with old and new pynvml alike.
_NOT_SUPPORTED = 3
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_UNKNOWN = 999


class _GpuLost(Exception):
    """The device answered "GPU is lost" / "Unknown Error": stop querying it."""


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


class PynvmlBackend(SamplerCore):
    """The pynvml half of GpuSampler: ``_run_pynvml`` samples every GPU over the window."""

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
            return self._init_failed_no_driver(NO_DRIVER_DETAIL)
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
        except Abandoned:
            raise
        except Exception as exc:
            code = _nvml_code(exc)
            if code == _LIBRARY_NOT_FOUND:
                return self._init_failed_no_driver(NO_DRIVER_DETAIL)
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
            except Abandoned:
                raise
            except Exception as exc:
                self._note(f"{fn_name} failed: {exc}")
        self._update(lambda: setattr(self, "_section", section))

        try:
            count = self._nv("nvmlDeviceGetCount", None)
        except Abandoned:
            raise
        except Exception as exc:
            self._finish("failed", f"nvmlDeviceGetCount failed: {exc}", init_remedy(str(exc)))
            return True, ""
        devices: List[Dict[str, Any]] = []
        handles: Dict[int, Any] = {}
        for index in range(count):
            dev = new_device(index)
            devices.append(dev)
            try:
                handles[index] = self._nv("nvmlDeviceGetHandleByIndex", index, index)
            except Abandoned:
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
                            self._update(lambda d=dev, p=procs: set_processes(d, p))
                except _GpuLost:
                    continue

        n = self._schedule(self.interval_s, take)
        try:
            self._nv("nvmlShutdown", None)
        except Abandoned:
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
            except Abandoned:
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
        self._update(lambda: add_unsupported(dev, field))
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
                info["mem_total_mib"] = int(mem.total // MIB)
                reserved = getattr(mem, "reserved", None)  # v2 only
                if isinstance(reserved, int):
                    info["mem_reserved_mib"] = int(reserved // MIB)
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
            s["mem_used_mib"] = int(mem.used // MIB)
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
                if not isinstance(pid, int) or not 0 < pid <= PID_MAX:
                    continue  # a struct-version mismatch yields garbage; skip it
                mem = getattr(p, "usedGpuMemory", None)
                mib = int(mem // MIB) if isinstance(mem, int) and mem < (1 << 62) else None
                if pid not in used or (mib or 0) > (used[pid] or 0):
                    used[pid] = mib
        if not any_ok:
            return None
        return [{"pid": pid, "used_mib": mib} for pid, mib in sorted(used.items())]


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
