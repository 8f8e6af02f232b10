"""Typed view of kernel log lines (dmesg / journalctl -k): GPU Xids, OOM kills, PCIe AER errors,
segfaults and hung tasks.

Samples::

    [ 8123.456789] NVRM: Xid (PCI:0000:19:00): 79, pid=46295, name=python3, GPU has fallen off the bus.
    [ 9001.000001] Out of memory: Killed process 46297 (python3) total-vm:312345678kB, anon-rss:...
    [ 9001.000000] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=python3,pid=46297,uid=0
    [ 7000.1] pcieport 0000:16:02.0: AER: Uncorrected (Fatal) error received: 0000:19:00.0
    [ 7100.2] python3[46301]: segfault at 0 ip 00007f... sp 00007ffd... error 4 in libc.so.6[7f...+195000]
    [ 7200.3] INFO: task python3:46302 blocked for more than 120 seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

# The live probe keeps only dmesg lines matching this (the probe copies it: keep it stdlib re).
KERNEL_LINE_RE = re.compile(
    r"NVRM|\bXid\b|nvidia|Out of memory|out of memory|oom-kill|oom_reaper|invoked oom-killer|"
    r"Killed process|\bAER\b|PCIe Bus Error|segfault at|general protection|traps:|"
    r"blocked for more than|hung_task|soft lockup|hard LOCKUP|\bBUG:|Bus error|SIGBUS|"
    r"I/O error|EXT4-fs error|XFS .*error|nfs: server .* not responding|Hardware Error|\bMCE\b|"
    r"fallen off the bus|NVLink|nvlink|\bmlx5\b.*(?:error|down)|link is down",
    re.IGNORECASE,
)

MAX_KERNEL_LINE_CHARS = 4096

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)"
    r"(?:, pid=(?P<pid>'?<?[\w]+>?'?), name=(?P<name>[^,]*))?(?:, (?P<msg>.*))?"
)
_OOM_KILLED = re.compile(
    r"(?:Out of memory|Memory cgroup out of memory)?:? ?Kill(?:ed)? process (?P<pid>\d+) \((?P<name>[^)]*)\)"
)
_OOM_KILL_LINE = re.compile(r"oom-kill:.*?\btask=(?P<name>[^,]*),pid=(?P<pid>\d+)")
_AER = re.compile(r"\bAER\b|PCIe Bus Error|pcieport.*error", re.IGNORECASE)
_SEGV = re.compile(
    r"(?P<name>[^\s\[\]:]+)\[(?P<pid>\d+)\]: (?:segfault at|general protection)|"
    r"traps: (?P<name2>[^\s\[]+)\[(?P<pid2>\d+)\]"
)
_HUNG = re.compile(
    r"INFO: task (?P<name>.+?):(?P<pid>\d+) blocked for more than (?P<s>\d+) seconds"
)


@dataclass
class Xid:
    """An NVIDIA Xid error: ``code`` (79 = fallen off the bus, 48/63/64/94/95 ECC, ...)."""

    code: int
    pci: Optional[str]
    pid: Optional[int]
    name: Optional[str]
    text: str


@dataclass
class OomKill:
    """A process killed by the kernel OOM killer."""

    pid: Optional[int]
    name: Optional[str]
    text: str


@dataclass
class Segfault:
    """A user process that crashed with a segfault / general protection fault / trap."""

    pid: Optional[int]
    name: Optional[str]
    text: str


@dataclass
class HungTask:
    """A task the kernel's hung-task detector saw blocked (D state) for ``blocked_s``."""

    pid: Optional[int]
    name: Optional[str]
    blocked_s: Optional[int]
    text: str


@dataclass
class KernelView:
    """Kernel log lines and what was recognised in them."""

    lines: list[str] = field(default_factory=list)
    xids: list[Xid] = field(default_factory=list)
    oom_kills: list[OomKill] = field(default_factory=list)
    aer: list[str] = field(default_factory=list)
    segfaults: list[Segfault] = field(default_factory=list)
    hung_tasks: list[HungTask] = field(default_factory=list)
    nvrm: list[str] = field(default_factory=list)  # other NVRM lines (GPU lost, RmInit failed)

    def oom_killed_pids(self) -> set:
        """Pids the OOM killer killed."""
        return {k.pid for k in self.oom_kills if k.pid is not None}


def _int_or_none(s: Optional[str]) -> Optional[int]:
    if s is None:
        return None
    s = s.strip("'<>")
    return int(s) if s.isdigit() else None


def parse_kernel(lines: Iterable[str]) -> KernelView:
    """Parse kernel log lines (any prefix: dmesg, dmesg -T, journalctl) into a KernelView."""
    view = KernelView()
    oom_seen: set = set()
    for raw in lines:
        if not isinstance(raw, str):
            continue
        for line in raw.split("\n"):
            # kernel lines are short; a cap keeps every regex linear on hostile input
            line = line.rstrip("\r")[:MAX_KERNEL_LINE_CHARS]
            if not line.strip():
                continue
            view.lines.append(line)
            _classify(view, line, oom_seen)
    return view


def _classify(view: KernelView, line: str, oom_seen: set) -> None:
    m = _XID.search(line)
    if m:
        name = m.group("name")
        name = None if name is None or name.strip("'<>") in ("unknown", "") else name
        view.xids.append(
            Xid(int(m.group("code")), m.group("pci"), _int_or_none(m.group("pid")), name, line)
        )
        return
    if "NVRM" in line:
        view.nvrm.append(line)
        return
    m = _OOM_KILL_LINE.search(line) or _OOM_KILLED.search(line)
    if m:
        pid = int(m.group("pid"))
        # one kill is logged twice (oom-kill: summary + "Killed process"): keep one entry
        if pid not in oom_seen:
            oom_seen.add(pid)
            view.oom_kills.append(OomKill(pid, m.group("name") or None, line))
        return
    m = _HUNG.search(line)
    if m:
        view.hung_tasks.append(
            HungTask(int(m.group("pid")), m.group("name"), int(m.group("s")), line)
        )
        return
    m = (
        _SEGV.search(line)
        if ("segfault" in line or "traps:" in line or "protection" in line)
        else None
    )
    if m:
        pid = m.group("pid") or m.group("pid2")
        view.segfaults.append(Segfault(int(pid), m.group("name") or m.group("name2"), line))
        return
    if _AER.search(line):
        view.aer.append(line)
