"""Writing output files safely: reports, snapshots, bundles.

- A path that exists and is not a regular file (``/dev/null``, ``/dev/stdout``, a FIFO) is
  written to, never renamed over: as root, the old ``mkstemp`` + ``os.replace`` turned
  ``/dev/null`` into a regular 0644 file.
- A new file is made under a name nobody can guess or plant (``mkstemp``: O_EXCL, never through
  a symlink) in the target's folder, then renamed onto the path; a companion file whose name is
  derived (``NAME.snapshot.json`` next to ``-o NAME.html``) is refused when a symlink sits there.
- The umask is honoured (reports hold command lines, log tails and locals; a umask of 077
  means 0600), in tar members too.

Layer: foundation; may import: the standard library only.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Optional

from hangdoctor.errors import UsageError


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: the classic read (racy only against other threads)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from ``open()``: 0666 less the umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    return 0o777 & ~current_umask()


def companions_ok(output: str) -> bool:
    """Whether files may be saved next to ``output`` (``NAME.snapshot.json``): only when it
    is, or will be, a regular file; never ``/dev/stdout.snapshot.json``."""
    try:
        return stat.S_ISREG(os.stat(output).st_mode)
    except OSError:
        return not os.path.islink(output)


def check_output_path(path: str, what: str = "output", follow_symlink: bool = True) -> None:
    """Refuse, before any work, a path that could not be written: a dangling symlink, a
    folder, a missing parent folder, or (``follow_symlink=False``) any symlink."""
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        lst = None
    except OSError as exc:
        raise UsageError(f"cannot write the {what} {path}: {exc.strerror or exc}",
                         "choose another path") from None
    if lst is not None and stat.S_ISLNK(lst.st_mode):
        if not follow_symlink:
            raise UsageError(f"{path} is a symbolic link; the {what} is not written through it",
                             "remove the link, or give another path")
        if not os.path.exists(path):
            raise UsageError(f"{path} is a symbolic link to nothing ({os.readlink(path)}); the "
                             f"{what} cannot be written there", "remove the link, or give another path")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a folder", f"give a file name for the {what}")
    parent = os.path.dirname(os.path.realpath(path)) if lst is not None else (
        os.path.dirname(path) or ".")
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write the {what}: folder {parent} does not exist",
                         "create it, or give another path")


def write_bytes(path: str, data: bytes, *, follow_symlink: bool = True,
                what: str = "output") -> None:
    """Write ``data`` to ``path`` safely (see the module docstring). Raises UsageError for a
    path that must not be written, OSError for a failed write."""
    check_output_path(path, what, follow_symlink)
    try:
        st: Optional[os.stat_result] = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_in_place(path, data, st)
        return
    # a regular file or nothing: a new private file, filled, given the umask's mode, renamed
    target = os.path.realpath(path) if st is not None else path
    folder = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=".hangdoctor-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), file_mode())
            os.fsync(handle.fileno())  # a bundle is written just before the server is killed
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_in_place(path: str, data: bytes, st: os.stat_result) -> None:
    """A device, FIFO or socket-like path: write to it as it is (never create, never rename)."""
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} is a folder", "give a file name")
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise UsageError(f"{path} is not a regular file, a character device or a FIFO; not "
                         "written", "give a file name")
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0)
    if stat.S_ISFIFO(st.st_mode):
        flags |= os.O_NONBLOCK  # a FIFO nobody reads must not hang us
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}",
                         "nobody reads that FIFO, or it is not writable") from None
    try:
        if stat.S_ISFIFO(st.st_mode):
            os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def write_text(path: str, text: str, *, follow_symlink: bool = True, what: str = "output") -> None:
    from hangdoctor.redact import scrub_known  # a secret met anywhere is scrubbed in every file

    text = scrub_known(text)
    write_bytes(path, text.encode("utf-8", "backslashreplace"), follow_symlink=follow_symlink,
                what=what)


def private_dir(parent: str, prefix: str) -> str:
    """A new folder only we can enter (``mkdtemp``: 0700, an unpredictable name), for staging."""
    return tempfile.mkdtemp(prefix=prefix, dir=parent)
