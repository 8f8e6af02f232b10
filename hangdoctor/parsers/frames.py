"""Shared shapes for pasted stacks: frames and threads in py-spy JSON shape, innermost first,
plus the ranks and roles that process names and command lines give away.

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

_SITE = re.compile(r"^.*?/(?:site|dist)-packages/")
_STDLIB = re.compile(r"^.*?/lib(?:64)?/python\d+(?:\.\d+)?t?/")


def short_filename(filename: str) -> str:
    """Approximate py-spy's ``short_filename``: the path below site-packages or the stdlib dir,
    else the base name."""
    if not filename or not filename.startswith("/"):
        return filename
    for pat in (_SITE, _STDLIB):
        m = pat.match(filename)
        if m:
            return filename[m.end() :]
    return filename.rsplit("/", 1)[-1]


def make_frame(
    name: str,
    filename: str,
    line: Optional[int],
    native: bool = False,
    locals_: Optional[list] = None,
    short: Optional[str] = None,
) -> dict:
    """One frame in the snapshot's py-spy JSON shape."""
    return {
        "name": name,
        "filename": filename,
        "short_filename": short if short is not None else short_filename(filename),
        "line": line,
        "native": native,
        "locals": locals_,
    }


def make_thread(
    frames: list,
    name: Optional[str] = None,
    thread_id: Optional[int] = None,
    os_thread_id: Optional[int] = None,
    active: bool = False,
    owns_gil: bool = False,
    **extra: object,
) -> dict:
    """One thread in the snapshot's py-spy JSON shape (frames innermost first)."""
    t = {
        "thread_id": thread_id,
        "os_thread_id": os_thread_id,
        "name": name,
        "active": active,
        "owns_gil": owns_gil,
        "frames": frames,
    }
    t.update(extra)
    return t


@dataclass
class PastedDump:
    """One dump of one process as found in a paste: a py-spy dump, a faulthandler dump, a
    KeyboardInterrupt traceback. ``pid`` is None when the paste does not say; dumps with the
    same ``group`` (and no pid) are samples of one unknown process."""

    kind: str
    threads: list = field(default_factory=list)
    pid: Optional[int] = None
    cmdline: Optional[str] = None
    python: Optional[str] = None
    group: Optional[str] = None
    truncated: bool = False
    rank: Optional[int] = None
    notes: list = field(default_factory=list)


_RANK_PATTERNS = [
    (re.compile(r"(?:^|\s)--(?:rank|node[-_]rank|local[-_]rank)[= ](\d+)\b"), "cmdline"),
    (re.compile(r"\bRANK=(\d+)\b"), "cmdline"),
    (re.compile(r"(?:^|[_:\s-])TP(\d+)\b"), "name:TP"),
    (re.compile(r"\brank[= ](\d+)\b"), "cmdline"),
]


def rank_from_text(text: Optional[str]) -> tuple[Optional[int], Optional[str]]:
    """(rank, source) from a command line or process title: ``--rank 3``, ``RANK=3``,
    ``sglang::scheduler_TP1``, ``VllmWorker TP2``; (None, None) when it does not say."""
    if not text:
        return None, None
    for pat, source in _RANK_PATTERNS:
        m = pat.search(text)
        if m:
            src = f"name:TP{m.group(1)}" if source == "name:TP" else source
            return int(m.group(1)), src
    return None, None


_ROLES = [
    (
        re.compile(
            r"torchrun|torch\.distributed\.(?:run|launch)|\bmpirun\b|text-generation-launcher"
        ),
        "launcher",
    ),
    (re.compile(r"EngineCore|engine_core|LLMEngine"), "engine"),
    (
        re.compile(
            r"VllmWorker|Worker_TP|worker|scheduler_TP|sglang::scheduler|text-generation-server|--rank"
        ),
        "worker",
    ),
    (re.compile(r"detokenizer|DetokenizerManager"), "other"),
    (
        re.compile(
            r"api_server|vllm serve|\bserve\b|sglang\.launch_server|uvicorn|text-generation-router|sglang::"
        ),
        "api-server",
    ),
    (re.compile(r"compile_worker|torch/_inductor|\bnvcc\b|\bptxas\b|\bcicc\b"), "compiler"),
]


def role_from_text(text: Optional[str]) -> Optional[str]:
    """A guess at a process's role from its command line or title; None when nothing fits."""
    if not text:
        return None
    for pat, role in _ROLES:
        if pat.search(text):
            return role
    return None
