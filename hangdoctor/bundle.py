"""Snapshot bundles: one folder or ``.tar.gz`` that keeps everything a hang left behind.

A bundle is what ``hangdoctor snapshot`` (and ``watch``) writes before someone kills a wedged
server: the raw snapshot, the analysis, the HTML and Markdown reports, the raw evidence split
into plain files under ``raw/``, and ``MANIFEST.json`` (every file with its size and sha256,
the source manifest of the snapshot, the tool version, the redacted command line, the start and
end time, and whether the deadline was hit)::

    hangdoctor-snapshot-HOST-20261129T193000Z/
        MANIFEST.json  snapshot.json  analysis.json  report.html  report.md
        raw/stacks/PID.txt   raw/stacks/PID.json   raw/processes.json   raw/gpus.json
        raw/log-tail.txt     raw/kernel.txt        raw/http.json        raw/host.json

With several hosts the raw files go under ``raw/HOST/``. Archives hold the same tree under one
top-level folder. Writing is atomic: a temporary name in the same folder, then a rename, so an
interrupted run never leaves half a bundle under the final name.

Pure file work: no collection, no click. Reports are rendered with ``hangdoctor.report``.

Layer: bundle; may import: hangdoctor.bundle, hangdoctor.watch, hangdoctor.report,
hangdoctor.triage, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hangdoctor import __version__

BUNDLE_VERSION = 1
TAR_SUFFIXES = (".tar.gz", ".tgz")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class BundleResult:
    """Where a bundle went and what it holds."""

    path: str
    kind: str  # "tar" | "folder"
    files: list[dict[str, Any]] = field(default_factory=list)  # {"path", "size_bytes", "sha256"}
    problems: list[str] = field(default_factory=list)


def utc_iso(epoch_s: float | None = None) -> str:
    """``2026-11-29T19:30:00Z`` for ``epoch_s`` (default: now)."""
    stamp = datetime.fromtimestamp(time.time() if epoch_s is None else epoch_s, timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def is_tar_path(path: str) -> bool:
    """True when ``path`` names an archive (``.tar.gz`` / ``.tgz``), not a folder."""
    return path.lower().endswith(TAR_SUFFIXES)


def safe_name(text: str) -> str:
    """``text`` reduced to characters that are safe in a file name (``user@h:22`` -> ``user_h_22``)."""
    return _UNSAFE.sub("_", text).strip("._") or "host"


def default_bundle_name(host: str, epoch_s: float | None = None) -> str:
    """``hangdoctor-snapshot-HOST-YYYYmmddTHHMMSSZ.tar.gz`` (UTC)."""
    stamp = datetime.fromtimestamp(time.time() if epoch_s is None else epoch_s, timezone.utc)
    return f"hangdoctor-snapshot-{safe_name(host)}-{stamp.strftime('%Y%m%dT%H%M%SZ')}.tar.gz"


def bundle_root_name(path: str) -> str:
    """Top-level folder name inside an archive: the file name without its suffix."""
    name = os.path.basename(path.rstrip("/"))
    for suffix in TAR_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or "hangdoctor-snapshot"
    return name or "hangdoctor-snapshot"


def resolve_output(output: str | None, host: str, epoch_s: float | None = None) -> str:
    """Final bundle path for ``-o``: an existing folder gets a default-named archive inside it.

    ``None`` -> the default archive name in the current folder; ``x.tar.gz`` / ``x.tgz`` -> that
    archive (replaced if it exists); any other path that does not exist yet -> a bundle folder
    of that name. A default name already taken gets ``-2``, ``-3``... before its suffix.
    """
    if output and not os.path.isdir(output):
        return os.path.abspath(output)
    folder = output or "."
    name = default_bundle_name(host, epoch_s)
    path = os.path.abspath(os.path.join(folder, name))
    # Two incidents in one second must not overwrite each other: number the later ones.
    stem = path[: -len(".tar.gz")]
    number = 2
    while os.path.exists(path):
        path = f"{stem}-{number}.tar.gz"
        number += 1
    return path


# ---------------------------------------------------------------------------- raw evidence


def _frame_where(frame: dict[str, Any]) -> str:
    where = frame.get("short_filename") or frame.get("filename") or frame.get("file") or "?"
    line = frame.get("line")
    if isinstance(line, int) and line > 0:
        return f"{where}:{line}"
    return str(where)


def _thread_status(thread: dict[str, Any]) -> str:
    status = "active" if thread.get("active") else "idle"
    return status + ("+gil" if thread.get("owns_gil") else "")


def _thread_id(thread: dict[str, Any]) -> str:
    if isinstance(thread.get("os_thread_id"), int):
        return str(thread["os_thread_id"])
    if isinstance(thread.get("thread_id"), int):
        return f"0x{thread['thread_id']:X}"
    return str(thread.get("tid") or "?")


def _locals_lines(frame: dict[str, Any]) -> list[str]:
    values = frame.get("locals")
    if not isinstance(values, list) or not values:
        return []
    out: list[str] = []
    for heading, want_arg in (("Arguments", True), ("Locals", False)):
        chosen = [v for v in values if isinstance(v, dict) and bool(v.get("arg")) == want_arg]
        if chosen:
            out.append(f"        {heading}:")
            out += [f"            {v.get('name', '?')}: {v.get('repr', '?')}" for v in chosen]
    return out


def stack_text(pid: str, entry: dict[str, Any], process: dict[str, Any] | None) -> str:
    """One process's py-spy result as ``py-spy dump`` text (what people paste in tickets).

    Every sample of the window is written as its own dump, oldest first, each headed
    ``Process PID: cmdline``; ``hangdoctor analyze`` reads this text back.
    """
    cmdline = (process or {}).get("cmdline") or []
    cmd = " ".join(str(c) for c in cmdline) if isinstance(cmdline, list) else str(cmdline)
    header = f"Process {pid}: {cmd or (process or {}).get('name') or '?'}"
    samples = entry.get("samples") if isinstance(entry.get("samples"), list) else []
    lines: list[str] = []
    if entry.get("status") not in (None, "ok") or not samples:
        lines.append(
            f"# py-spy: {entry.get('status') or 'no dump'}: {entry.get('error') or ''}".rstrip(": ")
        )
        lines.append(header)
    for number, sample in enumerate(samples, 1):
        if len(samples) > 1:
            lines.append(f"# sample {number} of {len(samples)} at t={sample.get('t', 0):.2f} s")
        lines.append(header)
        lines.append("")
        for thread in sample.get("threads") or []:
            name = thread.get("name") or thread.get("thread_name")
            named = f': "{name}"' if name else ""
            lines.append(f"Thread {_thread_id(thread)} ({_thread_status(thread)}){named}")
            for frame in thread.get("frames") or []:
                lines.append(f"    {frame.get('name') or '?'} ({_frame_where(frame)})")
                lines += _locals_lines(frame)
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=1, default=str, ensure_ascii=False) + "\n").encode(
        "utf-8", "backslashreplace"
    )


def _text_bytes(lines: Any) -> bytes:
    text = "\n".join(str(line) for line in lines or [])
    return (text + "\n" if text else "").encode("utf-8", "backslashreplace")


def _source(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    for entry in snapshot.get("manifest") or []:
        if isinstance(entry, dict) and entry.get("source") == name:
            return entry
    return {}


def raw_files(snapshot: dict[str, Any]) -> dict[str, bytes]:
    """The raw evidence of one snapshot as plain files, keyed by path relative to ``raw/``."""
    files: dict[str, bytes] = {}
    processes = snapshot.get("processes") if isinstance(snapshot.get("processes"), list) else []
    by_pid = {str(p.get("pid")): p for p in processes if isinstance(p, dict)}
    stacks = snapshot.get("stacks") if isinstance(snapshot.get("stacks"), dict) else {}
    stems: set[str] = set()
    for pid, entry in sorted(stacks.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if not isinstance(entry, dict):
            continue
        # "1/2" and "1_2" both make "1_2": number the later one rather than lose it
        stem = f"stacks/{safe_name(str(pid))}"
        number = 2
        while stem in stems:
            stem = f"stacks/{safe_name(str(pid))}-{number}"
            number += 1
        stems.add(stem)
        files[stem + ".txt"] = stack_text(str(pid), entry, by_pid.get(str(pid))).encode(
            "utf-8", "backslashreplace"
        )
        files[stem + ".json"] = _json_bytes(entry)
    if "processes" in snapshot:
        files["processes.json"] = _json_bytes(processes)
    gpus = snapshot.get("gpus")
    if not isinstance(gpus, dict):
        # No GPU section: say why, in the section's own shape, so raw/gpus.json is always there.
        nvml = _source(snapshot, "nvml")
        gpus = {
            "status": nvml.get("status", "not-collected"),
            "detail": nvml.get("detail"),
            "devices": [],
        }
    files["gpus.json"] = _json_bytes(gpus)
    log = snapshot.get("log")
    if isinstance(log, dict):
        files["log-tail.txt"] = _text_bytes(log.get("tail"))
    kernel = snapshot.get("kernel_log")
    if isinstance(kernel, dict):
        files["kernel.txt"] = _text_bytes(kernel.get("lines"))
    if "http" in snapshot:
        files["http.json"] = _json_bytes(snapshot.get("http"))
    host = {
        k: snapshot[k]
        for k in ("host", "host_memory", "shm", "versions", "targets")
        if k in snapshot
    }
    if host:
        files["host.json"] = _json_bytes(host)
    return files


# ---------------------------------------------------------------------------- assembling


def _render(analysis: dict[str, Any], problems: list[str]) -> dict[str, bytes]:
    """analysis.json, report.html, report.md; a renderer that fails costs only its own file."""
    from hangdoctor.report import render

    out: dict[str, bytes] = {}
    for name, fn in (
        ("analysis.json", render.render_json),
        ("report.html", render.render_html),
        ("report.md", render.render_markdown),
    ):
        try:
            out[name] = fn(analysis).encode("utf-8", "backslashreplace")
        except Exception as exc:  # the evidence matters more than one rendering of it
            problems.append(f"{name} could not be rendered: {type(exc).__name__}: {exc}")
    if "analysis.json" not in out:
        out["analysis.json"] = _json_bytes(analysis)
    return out


def bundle_files(
    snapshots: list[dict[str, Any]], analysis: dict[str, Any], problems: list[str]
) -> dict[str, bytes]:
    """Every file of the bundle except MANIFEST.json, keyed by relative path."""
    files: dict[str, bytes] = {}
    if snapshots:
        doc: Any = (
            snapshots[0] if len(snapshots) == 1 else {"schema_version": 1, "hosts": snapshots}
        )
        # compact: the bundle's own snapshot is read back by `hangdoctor report` (F12)
        files["snapshot.json"] = (
            json.dumps(doc, separators=(",", ":"), default=str, ensure_ascii=False) + "\n"
        ).encode("utf-8", "backslashreplace")
    files.update(_render(analysis, problems))
    names_seen: set[str] = set()
    for snap in snapshots:
        prefix = "raw/"
        if len(snapshots) > 1:
            host = safe_name(str((snap.get("host") or {}).get("name") or "host"))
            while host in names_seen:
                host += "_"
            names_seen.add(host)
            prefix = f"raw/{host}/"
        for rel, body in raw_files(snap).items():
            files[prefix + rel] = body
    return files


def file_entries(files: dict[str, bytes]) -> list[dict[str, Any]]:
    """``[{"path", "size_bytes", "sha256"}]`` for every file, sorted by path."""
    return [
        {"path": p, "size_bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}
        for p, b in sorted(files.items())
    ]


def build_manifest(
    files: dict[str, bytes],
    *,
    snapshots: list[dict[str, Any]],
    analysis: dict[str, Any],
    meta: dict[str, Any],
    problems: list[str],
) -> dict[str, Any]:
    """MANIFEST.json: what the bundle holds and how it was made."""
    causes = analysis.get("causes") or []
    sources = []
    for snap in snapshots:
        host = (snap.get("host") or {}).get("name")
        for entry in snap.get("manifest") or []:
            if isinstance(entry, dict):
                sources.append({"host": host, **entry})
    return {
        "bundle_version": BUNDLE_VERSION,
        "tool": {"name": "hangdoctor", "version": __version__},
        **meta,
        "verdict": analysis.get("verdict"),
        "top_cause": causes[0].get("id") if causes else None,
        "score": causes[0].get("score") if causes else None,
        "headline": analysis.get("headline"),
        "sources": sources,
        "problems": list(problems),
        "files": file_entries(files),
    }


# ---------------------------------------------------------------------------- writing


def scrub_known_bytes(body: bytes) -> bytes:
    """``body`` with every secret value met so far (redact.learn) masked."""
    from hangdoctor.redact import scrub_known

    if not body:
        return body
    return scrub_known(body.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def _tar_bytes(files: dict[str, bytes], root: str, handle: Any) -> None:
    from hangdoctor.outfile import dir_mode, file_mode

    now = time.time()
    fmode, dmode = file_mode(), dir_mode()  # the umask, as for any file we write (F9)
    with tarfile.open(fileobj=handle, mode="w:gz", compresslevel=6) as tar:
        folders = sorted({str(Path(p).parent) for p in files} - {"."})
        for folder in [""] + folders:
            info = tarfile.TarInfo(f"{root}/{folder}".rstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, dmode, now
            tar.addfile(info)
        for rel, body in sorted(files.items()):
            body = scrub_known_bytes(body)  # a secret met anywhere is scrubbed in every member
            info = tarfile.TarInfo(f"{root}/{rel}")
            info.size, info.mode, info.mtime = len(body), fmode, now
            tar.addfile(info, io.BytesIO(body))


def write_tar(files: dict[str, bytes], path: str) -> None:
    """Write ``files`` as a gzip'd tar at ``path`` atomically (under one top-level folder).

    The archive is built under a name nobody can guess or plant (mkstemp), then renamed onto
    ``path``; a path that is a device or FIFO (``-o /dev/null``) is written to as it is."""
    from hangdoctor import outfile

    buf = io.BytesIO()
    _tar_bytes(files, bundle_root_name(path), buf)
    outfile.write_bytes(path, buf.getvalue(), what="bundle")


def write_folder(files: dict[str, bytes], path: str) -> None:
    """Write ``files`` into a new folder ``path`` atomically (a staged folder, then a rename).

    The staging folder is made by mkdtemp (0700, an unpredictable name): nobody can plant a
    symlink in it (a ``raw/stacks`` link was followed before). Files and folders get the
    umask's modes."""
    from hangdoctor import outfile

    target = Path(path)
    if os.path.lexists(target):
        raise FileExistsError(f"{path} already exists")
    tmp = Path(outfile.private_dir(str(target.parent), f".{target.name}.partial-"))
    fmode, dmode = outfile.file_mode(), outfile.dir_mode()
    try:
        for rel, body in files.items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                         fmode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
        for folder in sorted({p.parent for p in tmp.rglob("*")} | {tmp}, reverse=True):
            os.chmod(folder, dmode)
        os.rename(tmp, target)
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass


def write_bundle(
    path: str,
    *,
    snapshots: list[dict[str, Any]],
    analysis: dict[str, Any],
    meta: dict[str, Any],
    started_epoch_s: float | None = None,
) -> BundleResult:
    """Render and write a whole bundle to ``path`` (archive or folder, by its suffix).

    ``meta`` goes into MANIFEST.json as is (command, deadline, hosts...), plus ``ended_at``
    and, given ``started_epoch_s``, ``started_at`` and ``duration_s``. Raises OSError when the
    path cannot be written; rendering problems are recorded in the manifest, not raised.
    """
    problems: list[str] = []
    files = bundle_files(snapshots, analysis, problems)
    now = time.time()
    meta = dict(meta)
    if started_epoch_s is not None:
        meta.setdefault("started_at", utc_iso(started_epoch_s))
        meta["duration_s"] = round(now - started_epoch_s, 3)
    meta["ended_at"] = utc_iso(now)
    manifest = build_manifest(
        files, snapshots=snapshots, analysis=analysis, meta=meta, problems=problems
    )
    entries = manifest["files"]
    files["MANIFEST.json"] = _json_bytes(manifest)
    if is_tar_path(path):
        write_tar(files, path)
        kind = "tar"
    else:
        write_folder(files, path)
        kind = "folder"
    return BundleResult(path=path, kind=kind, files=entries, problems=problems)
