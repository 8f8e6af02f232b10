"""Import asyncssh without the ~80 ms it spends on optional parts it then goes without.

- At import, asyncssh asks ``ctypes.util.find_library`` for liboqs (post-quantum key
  exchange) and libnettle (UMAC). For a name that is not in the ldconfig cache, find_library
  goes on to run ``gcc`` and ``ld`` to search for it, once per spelling: on a host with a
  compiler and without liboqs that is ~50 ms, paid before every connection. Here every name is
  looked up in the ldconfig cache only, read once (``ldconfig -p``, as find_library runs it). A
  library installed outside that cache stays unused: asyncssh then offers the other key
  exchanges (curve25519, ML-KEM through cryptography) and MACs, which every OpenSSH server
  accepts.
- asyncssh's X.509 certificate support needs pyOpenSSL, which it does not depend on. Without
  pyOpenSSL its ``asyncssh.crypto.x509`` module still imports ``cryptography.x509`` (~25 ms)
  before it fails and asyncssh goes on without X.509. When pyOpenSSL is missing that module is
  not tried at all: the same outcome, sooner. With pyOpenSSL installed nothing changes.

Layer: reach; may import: the standard library, asyncssh, psutil, hangdoctor.reach,
hangdoctor.collect and the foundation (errors, redact, textsafe, outfile).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Optional

_X509_MODULE = "asyncssh.crypto.x509"
# ctypes.util's names for the C library ABI that ldconfig prints beside each entry
_ABI_TYPES = {
    "x86_64-64": "libc6,x86-64",
    "ppc64-64": "libc6,64bit",
    "sparc64-64": "libc6,64bit",
    "s390x-64": "libc6,64bit",
    "ia64-64": "libc6,IA-64",
}


class _LdconfigCache:
    """``ctypes.util.find_library`` answered from one ``ldconfig -p`` (what its own Linux
    lookup reads, with the same pattern), without its gcc and ld fallbacks."""

    def __init__(self) -> None:
        self._listing: Optional[bytes] = None
        self._answers: dict[str, Optional[str]] = {}
        bits = "64" if sys.maxsize > 2**32 else "32"
        self._abi = _ABI_TYPES.get(f"{os.uname().machine}-{bits}", "libc6")

    def _read(self) -> bytes:
        if self._listing is None:
            try:
                self._listing = subprocess.run(
                    ["/sbin/ldconfig", "-p"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env={"LC_ALL": "C", "LANG": "C"},
                    timeout=10,
                    check=False,
                ).stdout
            except (OSError, subprocess.SubprocessError):
                self._listing = b""
        return self._listing

    def find_library(self, name: str) -> Optional[str]:
        if name not in self._answers:
            pattern = os.fsencode(rf"\s+(lib{re.escape(name)}\.[^\s]+)\s+\({self._abi}")
            found = re.search(pattern, self._read())
            self._answers[name] = os.fsdecode(found.group(1)) if found else None
        return self._answers[name]


@contextlib.contextmanager
def _ldconfig_only() -> Iterator[None]:
    try:
        import ctypes.util
    except ImportError:  # no ctypes: asyncssh finds nothing either way
        yield
        return
    if not sys.platform.startswith("linux") or not os.path.exists("/sbin/ldconfig"):
        yield  # find_library works differently there: leave it alone
        return
    original = ctypes.util.find_library
    ctypes.util.find_library = _LdconfigCache().find_library
    try:
        yield
    finally:
        ctypes.util.find_library = original


@contextlib.contextmanager
def _x509_only_with_pyopenssl() -> Iterator[None]:
    if _X509_MODULE in sys.modules or importlib.util.find_spec("OpenSSL") is not None:
        yield
        return
    sys.modules[_X509_MODULE] = None  # type: ignore[assignment]  # an ImportError, as asyncssh expects
    try:
        yield
    finally:
        if sys.modules.get(_X509_MODULE, 0) is None:
            del sys.modules[_X509_MODULE]


def import_asyncssh() -> ModuleType:
    with _ldconfig_only(), _x509_only_with_pyopenssl():
        import asyncssh
    return asyncssh
