"""The device records of the ``gpus`` section, as both GPU backends (pynvml and nvidia-smi) fill
them: a new device, unsupported fields, its process list, key order and copies for the
snapshot, clock-event (throttle) reason names, and the remedy for a driver that will not start.

Field names follow SCHEMA.md (``gpus`` section). A field the driver does not give is named in
the device's ``unsupported`` list and left out of the samples (absent means unknown, never 0).

Layer: collect; may import: the standard library only (it ships in the probe).
"""

from __future__ import annotations

import os

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

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

MIB = 1048576
PID_MAX = 4194304  # kernel upper bound for pid_max; larger "pids" are struct garbage
NO_DRIVER_DETAIL = "no NVIDIA driver (libnvidia-ml.so.1 not found)"


def throttle_names(mask: int) -> List[str]:
    """Names of the set clock-event (throttle) reason bits; unknown bits as hex.

    Confirm by hand: ``nvidia-smi -q -d PERFORMANCE``.
    """
    names = [name for bit, name in _THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in _THROTTLE_BITS)
    if rest:
        names.append(hex(rest))
    return names


def _pid_visible(pid: int) -> bool:
    # /proc lookup, never a signal: signalling is off limits even with signal 0
    return os.path.exists(f"/proc/{pid}")


def json_copy(value: Any) -> Any:
    # the section is plain JSON data: a structural copy suffices and is cheap
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
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


def ordered_device(dev: Dict[str, Any]) -> Dict[str, Any]:
    """Identity first, then the rest as gathered: easier to read in a saved snapshot."""
    out = {k: dev[k] for k in _DEVICE_KEY_ORDER if k in dev}
    out.update((k, v) for k, v in dev.items() if k not in out)
    return out


def new_device(index: int) -> Dict[str, Any]:
    return {
        "index": index,
        "lost": False,
        "unsupported": [],
        "errors": {},
        "samples": [],
        "processes": [],
    }


def add_unsupported(dev: Dict[str, Any], field: str) -> None:
    if field not in dev["unsupported"]:
        dev["unsupported"].append(field)


def set_processes(dev: Dict[str, Any], procs: List[Dict[str, Any]]) -> None:
    """Keep the GPU's latest process list; PIDs gone from /proc are left out."""
    visible = [p for p in procs if _pid_visible(p["pid"])]
    dev["processes"] = visible
    hidden = sorted(p["pid"] for p in procs if p not in visible)
    if hidden:
        # a container's PID namespace hides the host PIDs NVML reports: keep them for the reader
        dev["pids_not_visible"] = hidden
    else:
        dev.pop("pids_not_visible", None)


def init_remedy(detail: str) -> Optional[str]:
    low = detail.lower()
    if "mismatch" in low:
        return (
            "the loaded kernel module and the user-space driver differ (upgraded without a "
            "reboot?): compare `cat /proc/driver/nvidia/version` with the library version"
        )
    if "permission" in low:
        return "run as a user that may open /dev/nvidia* (the video group, or root)"
    return "run `nvidia-smi` by hand and check `dmesg | grep -i -e nvrm -e xid`"
