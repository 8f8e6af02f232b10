"""Reading the evidence given to analyze and report: snapshot bundles (a folder or a tar
archive, read in memory), folders of files, saved snapshots and pasted text.

Layer: cli; may import: the standard library, hangdoctor and hangdoctor.cli.options.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hangdoctor import bounded
from hangdoctor.errors import HangdoctorError, InputError

MAX_BUNDLE_MEMBER_BYTES = bounded.MAX_JSON_BYTES
MAX_DIR_FILES = 500


def _bundle_documents(path: str) -> dict[str, str] | None:
    """The snapshot.json / analysis.json of a snapshot bundle (a folder, or a tar archive
    read in memory: nothing is extracted), keyed by name; None when ``path`` is no bundle."""
    import tarfile

    names = ("snapshot.json", "analysis.json")
    if os.path.isdir(path):
        found = {n: os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))
                 and _inside(os.path.join(path, n), path)}
        if not found:
            return None
        out = {}
        for n, full in found.items():
            try:
                out[n] = Path(full).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise InputError(f"{full}: {exc.strerror or exc}", "check its permissions") from None
        return out
    if not os.path.isfile(path):
        return None
    try:
        if not tarfile.is_tarfile(path):
            return None
        out = {}
        with tarfile.open(path, mode="r:*") as tar:
            for member in tar:
                parts = member.name.strip("/").split("/")
                # the bundle's files sit at the top or in its one top-level folder
                if not member.isfile() or len(parts) > 2 or parts[-1] not in names:
                    continue
                if parts[-1] in out:
                    continue  # the first member of a name is the bundle's; the rest is not read
                if member.size > MAX_BUNDLE_MEMBER_BYTES:
                    raise InputError(f"{path}: {member.name} is {member.size >> 20} MiB", "too large to read")
                handle = tar.extractfile(member)
                if handle is not None:
                    data = handle.read(MAX_BUNDLE_MEMBER_BYTES + 1)
                    # the value count before any decoding (a 48 KB .tar.gz held 2.4 GB of it)
                    bounded.check_json_text(data, f"{path}:{member.name}")
                    out[parts[-1]] = data.decode("utf-8", "replace")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable archive ({exc})", "give the bundle hangdoctor snapshot wrote") from None
    if not out:
        raise InputError(f"{path} is an archive without snapshot.json or analysis.json",
                         "give a bundle written by hangdoctor snapshot")
    return out


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` (a file found in ``folder``) stays in it once its links are resolved: a
    ticket archive's ``vllm.log -> ~/.netrc`` must not pull the analyst's own file in."""
    top = os.path.realpath(folder)
    real = os.path.realpath(path)
    return real == top or real.startswith(top.rstrip("/") + "/")


# What a folder walk leaves out: a folder given to analyze is evidence someone gathered, but
# it may also be a checkout or a home directory (24 k files: .git, a venv, caches). Files
# named one by one are always read.
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".bzr", "CVS",  # version control
    "node_modules", "__pycache__", "site-packages", "dist-packages", ".tox", ".nox", ".eggs",
    ".venv", "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
})
# source code, images, archives of code, model weights: never a dump or a log
SKIP_SUFFIXES = frozenset({
    ".py", ".pyc", ".pyo", ".pyi", ".pyx", ".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh",
    ".rs", ".go", ".java", ".js", ".ts", ".css", ".scss", ".toml", ".cfg", ".ini", ".lock",
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".webp", ".pdf", ".woff", ".woff2",
    ".so", ".o", ".a", ".dylib", ".whl", ".egg", ".zip", ".jar", ".pt", ".pth", ".bin",
    ".safetensors", ".onnx", ".npy", ".npz", ".h5", ".gguf",
})
MAX_WALK_FILE_BYTES = 32 << 20  # a log over this in a folder is named on its own, or cut first
BINARY_MAGIC = (b"\x7fELF", b"PK\x03\x04", b"\x1f\x8b", b"\x89PNG", b"BZh", b"\xfd7zXZ", b"%PDF")


class Walked:
    """The files a folder stands for, and what was left out of it (said in one line)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.skipped_dirs: list[str] = []
        self.skipped = {"hidden": 0, "linked out of the folder": 0, "source or media": 0, "binary": 0,
                        "over 32 MiB": 0, "over the cap": 0}

    def summary(self, folder: str) -> str | None:
        parts = []
        if self.skipped_dirs:
            shown = sorted(set(self.skipped_dirs))
            parts.append(f"{len(self.skipped_dirs)} folder(s) ({', '.join(shown[:6])}{', …' if len(shown) > 6 else ''})")
        parts += [f"{n} {what} file(s)" for what, n in self.skipped.items() if n]
        if not parts:
            return None
        return f"{folder}: read {len(self.files)} file(s); skipped {', '.join(parts)}"


def _is_env_dir(path: str, name: str) -> bool:
    """A Python or conda environment, a package's build metadata: someone's tools, not evidence."""
    return (name in SKIP_DIRS or name.endswith((".egg-info", ".dist-info"))
            or os.path.isfile(os.path.join(path, "pyvenv.cfg"))
            or os.path.isdir(os.path.join(path, "conda-meta")))


def _file_is_binary(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError:
        return False  # read_input says why, on its turn
    return head.startswith(BINARY_MAGIC) or b"\0" in head


def _is_bundle_archive(path: str) -> bool:
    """A snapshot bundle's archive among other files: read; any other archive is left out."""
    if not path.endswith((".tar.gz", ".tgz", ".tar")):
        return False
    try:
        return _bundle_documents(path) is not None
    except InputError:
        return False


# In a source checkout (a project's root: pyproject.toml, setup.py, package.json, Cargo.toml or
# .git), its tests, fixtures, samples, docs and benchmarks are the project's own material, and a
# folder that is a Python package holds code and its data: none of it is evidence of a hang.
CHECKOUT_MARKS = ("pyproject.toml", "setup.py", "setup.cfg", "package.json", "Cargo.toml", ".git")
CHECKOUT_DIRS = frozenset({"tests", "test", "testing", "fixtures", "samples", "examples", "docs",
                           "benchmarks", "tools", "scripts", "templates"})


def _is_checkout(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, m)) for m in CHECKOUT_MARKS)


def _walk_folder(folder: str) -> Walked:
    walked = Walked()
    checkout = _is_checkout(folder)
    for d, subdirs, names in os.walk(folder):
        keep = []
        for s in sorted(subdirs):
            full = os.path.join(d, s)
            if s.startswith(".") or _is_env_dir(full, s) or (checkout and (
                    s in CHECKOUT_DIRS or os.path.isfile(os.path.join(full, "__init__.py")))):
                walked.skipped_dirs.append(s)
            else:
                keep.append(s)
        subdirs[:] = keep
        for f in sorted(names):
            full = os.path.join(d, f)
            if f.startswith("."):
                walked.skipped["hidden"] += 1
                continue
            if not _inside(full, folder):  # vllm.log -> ~/.netrc: never stat'ed nor opened
                walked.skipped["linked out of the folder"] += 1
                continue
            if os.path.splitext(f)[1].lower() in SKIP_SUFFIXES:
                walked.skipped["source or media"] += 1
                continue
            try:
                size = os.stat(full).st_size
            except OSError:
                size = 0
            if size > MAX_WALK_FILE_BYTES:
                walked.skipped["over 32 MiB"] += 1
                continue
            if _file_is_binary(full) and not _is_bundle_archive(full):
                walked.skipped["binary"] += 1
                continue
            if len(walked.files) >= MAX_DIR_FILES:
                walked.skipped["over the cap"] += 1
                continue
            walked.files.append(full)
    return walked


def _expand_inputs(paths: tuple[str, ...], notes: list[str] | None = None) -> list[tuple[str, bool]]:
    """A folder that is not a bundle stands for the evidence files in it (as `pytest DIR`
    does), without version control, environments, caches, source code, binaries and files over
    32 MiB; what was left out is added to ``notes``, one line per folder. Each path comes
    with whether a folder walk found it (True) or it was named (False)."""
    out: list[tuple[str, bool]] = []
    for p in paths:
        if p != "-" and os.path.isdir(p) and _bundle_documents(p) is None:
            walked = _walk_folder(p)
            if not walked.files:
                what = walked.summary(p)
                raise InputError(f"{p} has no evidence files" + (f" ({what})" if what else ""),
                                 "give the evidence files")
            line = walked.summary(p)
            if line and notes is not None:
                notes.append(line)
            out += [(f, True) for f in walked.files]
        else:
            out.append((p, False))
    return out


def _looks_binary(text: str) -> bool:
    """Bytes that are no text: an ELF, an archive, random data (read_input has already
    dropped NULs and replaced undecodable bytes with U+FFFD)."""
    head = text[:65536]
    if not head or head.startswith(("\x7fELF", "PK\x03\x04", "\x1f\ufffd")):
        return bool(head)
    odd = sum(1 for ch in head if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\f\x1b"))
    return odd > 0.05 * len(head)


def _read_documents(
    paths: tuple[str, ...], redact: bool = True, notes: list[str] | None = None,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[str], dict[str, str]]:
    """Split inputs into saved snapshots, raw text evidence, and inputs with nothing to read;
    and map the name each text got to the path as typed (for messages). What a folder walk
    left out goes to ``notes``."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.snapshot.io import load_snapshot_text, read_snapshot_file

    snapshots: list[dict[str, Any]] = []
    texts: list[tuple[str, str]] = []
    unrecognised: list[str] = []
    typed: dict[str, str] = {}
    analyses_found: list[str] = []
    for p, walked in _expand_inputs(paths, notes):
        bundle = _bundle_documents(p) if p != "-" else None
        if bundle is not None:
            if "snapshot.json" not in bundle:
                raise InputError(f"{p} is a bundle without a snapshot (nothing was collected)",
                                 f"its analysis: hangdoctor report {p}")
            snapshots.extend(load_snapshot_text(bundle["snapshot.json"], f"{p}:snapshot.json", redact=redact))
            continue
        try:
            whole = read_snapshot_file(p) if p != "-" else None  # our own documents: whole
            name, text = (p, whole) if whole is not None else read_input(p)
            typed[name] = p
        except HangdoctorError:
            raise
        except Exception as exc:  # the parser's own InputError may not subclass ours
            raise InputError(f"{p}: {exc}", "give a readable text file, or - for standard input") from None
        kind = sniff_json_document(text, name)
        if kind == "snapshot":
            snapshots.extend(load_snapshot_text(text, name, redact=redact))
        elif kind == "analysis" and walked:
            analyses_found.append(p)  # a report of an earlier run kept beside the evidence
        elif kind == "analysis":
            raise InputError(f"{name} is an analysis, not evidence", f"use: hangdoctor report {p}")
        elif not str(text).strip() or _looks_binary(str(text)):
            unrecognised.append(p if p != "-" else name)
        else:
            texts.append((name, text))
    if analyses_found and notes is not None:
        notes.append(f"left out {len(analyses_found)} analysis file(s), not evidence "
                     f"({', '.join(analyses_found[:3])}{', …' if len(analyses_found) > 3 else ''}; "
                     "hangdoctor report FILE renders one)")
    return snapshots, texts, unrecognised, typed
