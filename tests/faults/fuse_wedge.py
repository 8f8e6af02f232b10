"""A real hung file system for the tests: a FUSE mount whose daemon never answers.

The mount is made with the raw ``mount(2)`` call on an open ``/dev/fuse`` whose other end nobody
reads: the kernel's INIT request is never answered, so every ``stat``, ``open`` or ``read``
under the mount point waits in uninterruptible sleep (state D), exactly as on an NFS or FUSE
mount whose server went away. Unmounting (lazily) and closing ``/dev/fuse`` aborts the
connection and releases every waiter with ENOTCONN.

Mounting over a folder that already holds an open file is how a *running* server's log ends up
behind the wedge: the server keeps its descriptor (to the file underneath), while
``/proc/PID/fd/1`` names a path that now resolves through the hung mount.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

MNT_DETACH = 2


def why_unavailable() -> str | None:
    """None when a wedged mount can be made here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if os.geteuid() != 0:
        return "mounting a raw FUSE file system needs root"
    return None


@contextmanager
def wedged_mount(mount_point: str) -> Iterator[str]:
    """Mount a FUSE file system that never answers on ``mount_point`` (a folder)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"hd-wedge", mount_point.encode(), b"fuse.hd-wedge", 0, opts) != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, f"mount on {mount_point}: {os.strerror(err)}")
    try:
        yield mount_point
    finally:
        libc.umount2(mount_point.encode(), MNT_DETACH)
        os.close(fd)  # aborts the connection: every waiter gets ENOTCONN
