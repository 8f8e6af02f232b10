"""Import asyncssh without the ~50 ms it spends looking for optional C libraries.

At import, asyncssh asks ``ctypes.util.find_library`` for liboqs (post-quantum key exchange)
and libnettle (UMAC). For a name that is not in the ldconfig cache, find_library goes on to run
``gcc`` and ``ld`` to search for it, once per spelling: on a host with a compiler and without
liboqs that is most of asyncssh's import time, paid before every connection. Here each name is
looked up in the ldconfig cache only, read once. A library installed outside that cache stays
unused: asyncssh then offers the other key exchanges (curve25519, ML-KEM through
cryptography) and MACs, which every OpenSSH server accepts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType


@contextlib.contextmanager
def _ldconfig_only() -> Iterator[None]:
    try:
        import ctypes.util
    except ImportError:  # no ctypes: asyncssh finds nothing either way
        yield
        return
    lookup = getattr(ctypes.util, "_findSoname_ldconfig", None)
    original = ctypes.util.find_library
    if lookup is None:  # not Linux, or a Python that does it differently: leave it alone
        yield
        return
    answers: dict[str, str | None] = {}

    def find_library(name: str) -> str | None:
        if name not in answers:
            try:
                answers[name] = lookup(name)
            except Exception:
                answers[name] = original(name)
        return answers[name]

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        ctypes.util.find_library = original


def import_asyncssh() -> ModuleType:
    with _ldconfig_only():
        import asyncssh
    return asyncssh
