"""GPU sampling through ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits``: the
fallback when pynvml is missing or ``nvmlInit`` fails, and the parsing of what it prints.

Each call runs as a child with a hard timeout (a wedged driver blocks nvidia-smi too); a
refused field name makes it try the older field sets; a lost GPU is named from its error line.

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import os
import subprocess

from hangdoctor.collect.nvml_records import (
    NO_DRIVER_DETAIL,
    add_unsupported,
    init_remedy,
    new_device,
    set_processes,
    throttle_names,
)
from hangdoctor.collect.nvml_watch import SamplerCore

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple


class _CallTimeout(Exception):
    """A subprocess call exceeded its timeout (it enforces its own, unlike NVML calls)."""


class _SmiFailed(Exception):
    """nvidia-smi answered with an error and no usable rows."""


class _SmiMissing(_SmiFailed):
    """nvidia-smi could not be started."""


def _driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


class SmiBackend(SamplerCore):
    """The nvidia-smi half of GpuSampler: ``_run_nvidia_smi`` samples the GPUs in the window."""

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
                self._finish("failed", why + "; nvidia-smi not found", init_remedy(why))
            elif why.startswith("no NVIDIA"):
                self._finish("unavailable", why)
            elif not _driver_present():
                self._finish("unavailable", NO_DRIVER_DETAIL)
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
                    dev = new_device(len(devices))
                    dev.update({"pci_bus_id": lost_bus, "lost": True, "lost_detail": problem})
                    by_uuid["bus:" + lost_bus] = dev
                    self._update(lambda d=dev: devices.append(d))
            if edge:
                apps = self._smi_apps()
                if apps is not None:
                    for dev in devices:
                        procs = apps.get(dev.get("uuid", ""), [])
                        self._update(lambda d=dev, p=procs: set_processes(d, p))

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
            remedy = init_remedy(detail)
            if not devices and "couldn't communicate with the NVIDIA driver" in str(exc):
                status, detail, remedy = (
                    "unavailable",
                    f"{NO_DRIVER_DETAIL} (nvidia-smi: {exc})",
                    None,
                )
            self._finish(status, detail, remedy)
            return
        for dev in devices:
            for field in ("pcie_tx_kbps", "pcie_rx_kbps"):
                self._update(lambda d=dev, f=field: add_unsupported(d, f))
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
        add_unsupported(dev, field)
        return None
    value = row[key]
    if value.lower() in _SMI_LOST:
        dev["lost"] = True
        dev["lost_detail"] = f"nvidia-smi {key}: {value}"
        return None
    if value.lower() in _SMI_UNSUPPORTED:
        add_unsupported(dev, field)
        return None
    return value


def _smi_new_device(row: Dict[str, str]) -> Dict[str, Any]:
    """Static fields from a ``--query-gpu`` row."""
    index = _smi_int(row.get("index", "")) or 0
    dev = new_device(index)
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
