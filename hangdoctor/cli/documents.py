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


def _expand_inputs(paths: tuple[str, ...]) -> list[str]:
    """A folder that is not a bundle stands for the files in it (as `pytest DIR` does)."""
    out: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p) and _bundle_documents(p) is None:
            files = sorted(os.path.join(d, f) for d, subdirs, names in os.walk(p)
                           for f in names if not f.startswith(".")
                           and _inside(os.path.join(d, f), p))
            if not files:
                raise InputError(f"{p} is an empty folder", "give the evidence files")
            out += files[:MAX_DIR_FILES]
        else:
            out.append(p)
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
    paths: tuple[str, ...], redact: bool = True,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[str], dict[str, str]]:
    """Split inputs into saved snapshots, raw text evidence, and inputs with nothing to read;
    and map the name each text got to the path as typed (for messages)."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.snapshot.io import load_snapshot_text, read_snapshot_file

    snapshots: list[dict[str, Any]] = []
    texts: list[tuple[str, str]] = []
    unrecognised: list[str] = []
    typed: dict[str, str] = {}
    for p in _expand_inputs(paths):
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
        elif kind == "analysis":
            raise InputError(f"{name} is an analysis, not evidence", f"use: hangdoctor report {p}")
        elif not str(text).strip() or _looks_binary(str(text)):
            unrecognised.append(p if p != "-" else name)
        else:
            texts.append((name, text))
    return snapshots, texts, unrecognised, typed
