"""Build the fake ``libnvidia-ml.so.1`` (fake_nvml.c) with gcc, cached by source hash.

``build(dest_dir)`` returns the directory to put on ``LD_LIBRARY_PATH``; pynvml then loads the
fake with ``CDLL("libnvidia-ml.so.1")``. The ``missing-function`` variant is compiled without
the entry points newer drivers added (clock event reasons, remapped rows, v3 process lists,
memory info v2),
like an old driver, so pynvml raises ``NVMLError_FunctionNotFound`` for them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIB_NAME = "libnvidia-ml.so.1"
VARIANTS = {"full": [], "missing-function": ["-DFAKE_NVML_OLD_DRIVER"]}
COMPILE_TIMEOUT_S = 60.0


def gcc_available() -> bool:
    """True when a C compiler named ``gcc`` is on PATH."""
    return shutil.which("gcc") is not None


def build(dest_dir: str | os.PathLike[str], variant: str = "full") -> Path:
    """Compile the fake library for ``variant`` under ``dest_dir``; return the folder holding it.

    The folder name carries a hash of the source and flags, so a rebuild happens only when the
    C source changes; the library is written under a temporary name and renamed into place, so
    concurrent builders never see a half-written file.
    """
    flags = VARIANTS[variant]
    digest = hashlib.sha256(SOURCE.read_bytes() + repr(flags).encode()).hexdigest()[:16]
    out_dir = Path(dest_dir) / (f"{variant}-{digest}")
    lib = out_dir / LIB_NAME
    if lib.is_file():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{LIB_NAME}.{os.getpid()}.tmp"
    cmd = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Werror",
        *flags,
        "-o",
        str(tmp),
        str(SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc failed ({proc.returncode}): {proc.stderr.strip()}")
    os.replace(tmp, lib)
    return out_dir


if __name__ == "__main__":
    import sys

    print(build(sys.argv[1] if len(sys.argv) > 1 else ".", *sys.argv[2:3]))
