"""This machine's py-spy binary, and whether it runs on a target: what the SSH and exec-pipe
targets send to a host or container that has no py-spy of its own.

A pyenv shim is a shell script and useless remotely, so only ELF files count; the ELF header's
machine field, in ``uname -m`` spelling, is compared with the target's.

Layer: reach; may import: the standard library and hangdoctor.collect.pyspy (where py-spy is
looked for).
"""

from __future__ import annotations

import os
from typing import Optional

from hangdoctor.collect.pyspy import pyspy_candidates

# ELF e_machine -> `uname -m` spelling, to tell whether our py-spy binary runs over there.
_ELF_MACHINES = {
    3: "i686",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    21: "ppc64le",
    22: "s390x",
    243: "riscv64",
}
_ARCH_ALIASES = {
    "amd64": "x86_64",
    "arm64": "aarch64",
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "armv6l": "arm",
    "armv7l": "arm",
    "armv8l": "arm",
}


def normalise_arch(machine: str) -> str:
    """``uname -m`` spellings folded together (amd64 is x86_64, arm64 is aarch64)."""
    machine = machine.strip().lower()
    return _ARCH_ALIASES.get(machine, machine)


def elf_arch(path: str) -> Optional[str]:
    """The architecture an ELF binary is built for, or None if it is not an ELF file."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    if machine == 21 and order == "big":
        return "ppc64"
    return _ELF_MACHINES.get(machine, f"elf-machine-{machine}")


def find_local_pyspy(explicit: Optional[str] = None) -> Optional[str]:
    """This machine's py-spy *binary* (a pyenv shim is a shell script and useless remotely)."""
    candidates = ([explicit] if explicit else []) + pyspy_candidates()
    for path in candidates:
        if path and os.path.isfile(path) and elf_arch(path):
            return os.path.realpath(path)
    return None
