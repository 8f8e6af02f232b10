"""Typed view of kernel log lines (dmesg / journalctl -k): GPU Xids, OOM kills, PCIe AER errors,
segfaults and hung tasks.

Samples::

    [ 8123.456789] NVRM: Xid (PCI:0000:19:00): 79, pid=46295, name=python3, GPU has fallen off the bus.
    [ 9001.000001] Out of memory: Killed process 46297 (python3) total-vm:312345678kB, anon-rss:...
    [ 9001.000000] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=python3,pid=46297,uid=0
    [ 7000.1] pcieport 0000:16:02.0: AER: Uncorrected (Fatal) error received: 0000:19:00.0
    [ 7100.2] python3[46301]: segfault at 0 ip 00007f... sp 00007ffd... error 4 in libc.so.6[7f...+195000]
    [ 7200.3] INFO: task python3:46302 blocked for more than 120 seconds.

Layer: evidence; may import: the standard library, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot and the foundation.
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


# ---------------------------------------------------------------- relevance to the diagnosis
#
# The kernel log is host-wide and long-lived: a hung task of an unrelated process, or of one
# gone for hours, is context, not evidence about the server (it made "io-stall" the top cause of
# every diagnosis on one host, a stopped Python included). A line weighs by whether it names the
# diagnosed processes (pid, comm, a GPU they use) and by when it was logged.

_TS_MONO = re.compile(r"^(?:<\d+>)?\[\s*(\d{1,10}\.\d+)\]")
_TS_HUMAN = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"
)
CONTEXT_BEFORE_START_S = 60.0  # logged this long before the oldest diagnosed process started
RECENT_S = 900.0  # a line naming only a comm counts when logged this close to the collection


@dataclass
class Scope:
    """What the diagnosis is about: its processes and GPUs, and since when they run."""

    pids: set = field(default_factory=set)
    names: set = field(default_factory=set)  # comm names (the kernel logs 15 characters)
    gpu_buses: set = field(default_factory=set)  # PCI bus ids of their GPUs, "0000:19:00"
    start_epoch: Optional[float] = None  # when the oldest diagnosed process started
    boot_epoch: Optional[float] = None  # for "[ 8123.4]" stamps (seconds since boot)
    now_epoch: Optional[float] = None  # when the evidence was collected


def line_epoch(line: str, boot_epoch: Optional[float]) -> Optional[float]:
    """When a kernel line was logged (epoch seconds), from its dmesg stamp; None if unknown.

    ``dmesg -T`` stamps are local time of the host (read here in this machine's zone)."""
    m = _TS_MONO.match(line)
    if m:
        return boot_epoch + float(m.group(1)) if boot_epoch else None
    m = _TS_HUMAN.match(line)
    if m:
        import time

        try:
            return time.mktime(time.strptime(" ".join(m.group(1).split()), "%b %d %H:%M:%S %Y"))
        except (ValueError, OverflowError):
            return None
    return None


def _bus(pci: Optional[str]) -> Optional[str]:
    """``0000:19:00.0`` / ``00000000:19:00.0`` / ``0000:19:00`` -> ``19:00`` (bus:device)."""
    if not pci:
        return None
    parts = pci.lower().split(":")
    if len(parts) < 2:
        return None
    return f"{parts[-2][-2:]}:{parts[-1].split('.')[0][:2]}"


def relevance(scope: Scope, *, pid: Optional[int], name: Optional[str], text: str,
              pci: Optional[str] = None, host_wide: bool = False) -> tuple[str, float]:
    """(``"names"`` | ``"during"`` | ``"context"``, weight factor) for one kernel event.

    ``names`` (1.0): it names a diagnosed pid, comm or GPU. ``during`` (0.5 for a host-wide
    event such as an Xid without a pid, 0.3 for another process's trouble): it names nothing of
    theirs but was logged while they ran (or its time is unknown). ``context`` (0): logged
    before they started."""
    when = line_epoch(text, scope.boot_epoch)
    if when is not None and scope.start_epoch is not None:
        if when < scope.start_epoch - CONTEXT_BEFORE_START_S:
            return "context", 0.0  # before they started (a reused pid, a past job)
    if pid is not None and pid in scope.pids:
        return "names", 1.0
    bus = _bus(pci)
    if bus and bus in scope.gpu_buses:
        return "names", 1.0
    if name and name[:15] in scope.names:
        # a name is weaker than a pid (every server is "python3"): it counts when recent
        recent = when is None or scope.now_epoch is None or when >= scope.now_epoch - RECENT_S
        if recent:
            return "names", 1.0
    if host_wide and pid is None:
        return "during", 1.0 if not scope.pids else 0.5
    return "during", 0.3


def scope_of(snapshots: list, processes: list, gpus: list) -> Scope:
    """The Scope of a diagnosis from its snapshots, processes (Proc) and GPUs (GpuDevice)."""
    scope = Scope()
    starts = []
    for p in processes:
        scope.pids.add(p.pid)
        if p.name:
            scope.names.add(str(p.name)[:15])
        ct = p.raw.get("create_time")
        if isinstance(ct, (int, float)) and not isinstance(ct, bool) and ct > 0:
            starts.append(float(ct))
    pids = scope.pids
    for g in gpus:
        if pids & set(g.pids) or not g.pids:
            bus = _bus(g.raw.get("pci_bus_id"))
            if bus and (pids & set(g.pids)):
                scope.gpu_buses.add(bus)
    scope.start_epoch = min(starts) if starts else None
    for s in snapshots:
        boot = (s.get("host") or {}).get("boot_time") if isinstance(s.get("host"), dict) else None
        if isinstance(boot, (int, float)) and not isinstance(boot, bool) and boot > 0:
            scope.boot_epoch = float(boot)
        at = s.get("collected_at")
        if isinstance(at, str) and scope.now_epoch is None:
            import calendar
            import time

            try:
                scope.now_epoch = float(calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ")))
            except ValueError:
                pass
    return scope
