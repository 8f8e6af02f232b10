"""Driver / runtime / library versions known not to work together.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

import re

from hangdoctor.checkapi import check, cleared, fired, skipped, support
from hangdoctor.evidence.model import Evidence

# Minimum Linux driver for each CUDA runtime major version (CUDA Toolkit release notes,
# "CUDA Toolkit and Corresponding Driver Versions"; minor-version compatibility allows any
# runtime of the same major on at least this driver).
MIN_DRIVER_FOR_CUDA_MAJOR = {11: (450, 80), 12: (525, 60), 13: (580, 65)}


def _ver(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text).strip())
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


@check("versions.compat", "CUDA runtime against the driver", causes=["driver-or-runtime-mismatch"])
def versions_compat(ev: Evidence):
    """Compares the CUDA runtime the framework was built with (torch's ``torch.version.cuda``,
    from a pasted collect_env or the probe) with the driver: a runtime newer than the driver
    supports fails or hangs at CUDA init. The table of minimum drivers per CUDA major version
    is data from the CUDA Toolkit release notes.

    Confirm by hand: nvidia-smi | head -4; python -c 'import torch; print(torch.version.cuda)'
    """
    v = ev.versions
    runtime = _ver(v.get("cuda_runtime") or v.get("torch_cuda"))
    driver_cuda = _ver(v.get("cuda_driver_version"))
    driver = _ver(v.get("driver_version"))
    if runtime is None or (driver is None and driver_cuda is None):
        return skipped(["versions"], "needs the CUDA runtime version and the driver version (collect_env output or nvidia-smi)")
    signals = []
    if driver_cuda is not None and runtime[:2] > driver_cuda[:2]:
        signals.append(support("driver-or-runtime-mismatch", 0.7,
                               f"CUDA runtime {'.'.join(map(str, runtime))} is newer than the driver supports "
                               f"(CUDA {'.'.join(map(str, driver_cuda))})"))
    need = MIN_DRIVER_FOR_CUDA_MAJOR.get(runtime[0])
    if driver is not None and need and driver[:2] < need:
        signals.append(support("driver-or-runtime-mismatch", 0.7,
                               f"driver {'.'.join(map(str, driver))} is older than {need[0]}.{need[1]}, the minimum "
                               f"for CUDA {runtime[0]}.x"))
    if signals:
        return fired(signals[0].text, *signals)
    return cleared(f"CUDA runtime {'.'.join(map(str, runtime))} is supported by the driver")
