"""The shape of a log line in a snapshot: the length cap, and the per-process prefix that says
who wrote it.

Servers that run several processes prefix each line with its writer: vLLM and Ray
``(VllmWorker rank=1 pid=456) ``, SGLang ``[2025-01-01 10:00:00 TP1] ``, torch.distributed
``[rank1]:`` (torchrun --tee: ``[default1]:``), and then often a logging header
``ERROR 01-01 10:00:00 [file.py:470] ``. Both the paste parsers and the log view read them.

Layer: snapshot; may import: the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

# Lines longer than this are cut: a 50 MB single-line paste must not feed the regexes.
MAX_LINE_CHARS = 16384

# Terminal colours and cursor codes (CSI, OSC, two-byte escapes): a log copied from a terminal
# or written with colours on carries them around every level word.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text) if "\x1b" in text else text

# vLLM / Ray: "(VllmWorker rank=1 pid=456) ", "(EngineCore_DP0 pid=12)", "(RayWorkerWrapper pid=7, ip=..)"
_PAREN_PREFIX = re.compile(r"^\((?P<head>[^()]{0,120}?\bpid=(?P<pid>\d+)[^()]{0,80})\)\s?")
# SGLang: "[2025-01-01 10:00:00 TP1] ", "[2025-01-01 10:00:00 DP0 TP3] ", "[... TP0 EP0] "
_SGLANG_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<tags>(?: [A-Z]{2,3}\d+)*)\]\s?"
)
# torch.distributed: "[rank1]:" and torchrun --tee: "[default1]:"
_TORCH_PREFIX = re.compile(r"^\[(?:rank|default)(?P<rank>\d+)\]:\s?")
# Python / vLLM logging header after the process prefix: "ERROR 01-01 10:00:00 [file.py:470] "
_LEVEL_HEADER = re.compile(
    r"^(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"(?: \[[^\]]*\])?\s?"
)
_RANK_IN_HEAD = re.compile(r"(?:\brank=|(?:^|[\s_])TP)(\d+)\b")


@dataclass
class LinePrefix:
    """What a line's prefix says about its writer; ``rest`` is the line without prefixes."""

    rank: Optional[int]
    pid: Optional[int]
    rest: str
    level: Optional[str] = None


def split_prefix(line: str) -> LinePrefix:
    """Peel the process prefixes (vLLM, Ray, SGLang, torch) and a logging header off a line."""
    rank: Optional[int] = None
    pid: Optional[int] = None
    rest = line
    for _ in range(3):  # prefixes stack: "[rank1]:(VllmWorker TP1 pid=4) INFO ..."
        m = _PAREN_PREFIX.match(rest)
        if m:
            pid = int(m.group("pid"))
            r = _RANK_IN_HEAD.search(m.group("head"))
            if r and rank is None:
                rank = int(r.group(1))
            rest = rest[m.end() :]
            continue
        m = _SGLANG_PREFIX.match(rest)
        if m:
            tp = re.search(r"TP(\d+)", m.group("tags"))
            if tp and rank is None:
                rank = int(tp.group(1))
            rest = rest[m.end() :]
            continue
        m = _TORCH_PREFIX.match(rest)
        if m:
            if rank is None:
                rank = int(m.group("rank"))
            rest = rest[m.end() :]
            continue
        break
    level = None
    m = _LEVEL_HEADER.match(rest)
    if m:
        level = m.group("lvl")
        rest = rest[m.end() :]
    return LinePrefix(rank=rank, pid=pid, rest=rest, level=level)
