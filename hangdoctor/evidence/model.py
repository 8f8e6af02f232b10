"""The evidence views: typed, pure objects over one or more snapshots (one per host).

Checks read these and nothing else. Absent data is ``None`` (unknown), never zero: a pasted
dump has no timing, and a check must say so instead of reading it as "idle".

Layer: evidence; may import: the standard library, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hangdoctor.evidence.nccl import NcclView
from hangdoctor.evidence.stacks import ProcStack, build_proc_stack

MIB = 1024 * 1024
GIB = 1024 * MIB

# Evidence names a check can declare in ``needs``.
SOURCES = (
    "processes", "stacks", "gpus", "log", "kernel_log", "http", "host_memory", "shm", "timing",
    "env", "nccl", "nccl_ras", "flight_recorder", "engine_progress",
)


@dataclass
class Proc:
    host: str
    raw: dict[str, Any]

    def __getattr__(self, key: str) -> Any:  # convenient read-only access to raw fields
        try:
            return self.raw[key]
        except KeyError:
            return None

    @property
    def pid(self) -> int:
        return int(self.raw["pid"])

    @property
    def label(self) -> str:
        r = self.raw.get("rank")
        name = self.raw.get("name") or "?"
        return f"pid {self.pid}" + (f" (rank {r})" if r is not None else "") + f" [{name}]"

    @property
    def state(self) -> str | None:
        return self.raw.get("status_end") or self.raw.get("status")

    @property
    def alive(self) -> bool:
        return bool(self.raw.get("alive", True)) and self.state not in ("Z", "X")

    @property
    def env(self) -> dict[str, str]:
        return self.raw.get("env") or {}

    @property
    def cmdline_text(self) -> str:
        return " ".join(self.raw.get("cmdline") or [])


@dataclass
class GpuDevice:
    host: str
    raw: dict[str, Any]

    @property
    def index(self) -> int:
        return int(self.raw.get("index", 0))

    def series(self, key: str) -> list[float]:
        return [float(s[key]) for s in self.raw.get("samples") or [] if s.get(key) is not None]

    def mean(self, key: str) -> float | None:
        vals = self.series(key)
        return sum(vals) / len(vals) if vals else None

    @property
    def power_limit_w(self) -> float | None:
        v = self.raw.get("power_limit_w")
        return float(v) if v else None

    @property
    def mem_used_mib(self) -> float | None:
        vals = self.series("mem_used_mib")
        return vals[-1] if vals else None

    @property
    def pids(self) -> list[int]:
        return [int(p["pid"]) for p in self.raw.get("processes") or [] if p.get("pid") is not None]

    @property
    def lost(self) -> bool:
        return bool(self.raw.get("lost"))

    def reading(self) -> str:
        """What utilisation read against power says (FIELD-NOTES: utilisation alone lies)."""
        util = self.mean("util_pct")
        power = self.mean("power_w")
        if self.lost:
            return "lost"
        if util is None:
            return "unknown"
        if util >= 80:
            if power is None:
                return "busy-or-waiting"
            return "busy" if not self.power_is_idle(power) else "waiting"
        if util <= 5:
            return "idle"
        return "partly-busy"

    def power_is_idle(self, power_w: float) -> bool:
        limit = self.power_limit_w
        # Measured on H200 (limit 700 W): idle and waiting at 75-125 W, busy at ~615 W.
        threshold = max(160.0, 0.3 * limit) if limit else 160.0
        return power_w < threshold


@dataclass
class Rank:
    """One worker joined across sources: process + stack + GPU."""

    host: str
    proc: Proc
    stack: ProcStack | None
    gpu: GpuDevice | None
    gpu_mem_mib: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def rank(self) -> int | None:
        return self.proc.rank

    @property
    def label(self) -> str:
        return self.proc.label

    @property
    def wait_kind(self) -> str:
        if self.stack and self.stack.ok and self.stack.main:
            return self.stack.main.wait_kind
        return "unknown"

    @property
    def signature(self) -> str | None:
        if self.stack and self.stack.ok and self.stack.main:
            return self.stack.main.signature
        return None


@dataclass
class Evidence:
    snapshots: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    # ------------------------------------------------------------ basic facts
    @property
    def origin(self) -> str:
        origins = {s.get("origin", "live") for s in self.snapshots}
        return origins.pop() if len(origins) == 1 else "mixed"

    @property
    def window_s(self) -> float | None:
        ws = [s.get("window_s") for s in self.snapshots if s.get("window_s")]
        return min(ws) if ws else None

    @property
    def has_timing(self) -> bool:
        return self.window_s is not None and self.origin == "live"

    @cached_property
    def manifest(self) -> list[dict[str, Any]]:
        out = []
        for s in self.snapshots:
            host = (s.get("host") or {}).get("name", "?")
            for m in s.get("manifest") or []:
                out.append(dict(m, host=host))
        return out

    def manifest_status(self, source: str) -> str | None:
        for m in self.manifest:
            if m.get("source") == source:
                return m.get("status")
        return None

    def has(self, source: str) -> bool:
        """True when this kind of evidence is present (for ``needs``)."""
        if source == "timing":
            return self.has_timing
        if source == "processes":
            return bool(self.processes)
        if source == "stacks":
            return any(ps.ok for ps in self.stacks.values())
        if source == "gpus":
            return bool(self.gpus)
        if source == "log":
            return any(s.get("log", {}).get("tail") for s in self.snapshots)
        if source == "kernel_log":
            return any("kernel_log" in s for s in self.snapshots)
        if source == "http":
            return any("http" in s for s in self.snapshots) and self.origin == "live"
        if source == "host_memory":
            return any(s.get("host_memory", {}).get("mem_total_bytes") for s in self.snapshots)
        if source == "shm":
            return any("shm" in s for s in self.snapshots)
        if source == "env":
            return any(p.env for p in self.processes)
        if source == "nccl":
            return bool(self.nccl.sections)
        if source == "nccl_ras":
            return bool(self.nccl.ras_answers)
        if source == "flight_recorder":
            return bool(self.nccl.fr_ranks)
        if source == "engine_progress":  # /metrics and client connections of the API port
            return self.origin == "live" and any(
                (s.get("engine_progress") or {}).get("ports") for s in self.snapshots)
        return False

    @cached_property
    def nccl(self) -> NcclView:
        """The loaded NCCL, NCCL RAS samples and Flight Recorder dumps (evidence/nccl.py)."""
        return NcclView(self.snapshots)

    # ------------------------------------------------------------ views
    @cached_property
    def processes(self) -> list[Proc]:
        out = []
        for s in self.snapshots:
            host = (s.get("host") or {}).get("name", "?")
            for p in s.get("processes") or []:
                if isinstance(p, dict) and p.get("pid") is not None:
                    out.append(Proc(host, p))
        return out

    @cached_property
    def roots(self) -> list[Proc]:
        out = []
        for s in self.snapshots:
            host = (s.get("host") or {}).get("name", "?")
            root_pids = set((s.get("targets") or {}).get("root_pids") or [])
            for p in self.processes:
                if p.host == host and p.pid in root_pids:
                    out.append(p)
        return out

    def proc(self, host: str, pid: int) -> Proc | None:
        for p in self.processes:
            if p.host == host and p.pid == pid:
                return p
        return None

    @cached_property
    def stacks(self) -> dict[tuple[str, int], ProcStack]:
        out = {}
        for s in self.snapshots:
            host = (s.get("host") or {}).get("name", "?")
            for key, entry in (s.get("stacks") or {}).items():
                try:
                    pid = int(key)
                except (TypeError, ValueError):
                    continue
                if isinstance(entry, dict):
                    out[(host, pid)] = build_proc_stack(pid, entry)
        return out

    @cached_property
    def gpus(self) -> list[GpuDevice]:
        out = []
        for s in self.snapshots:
            host = (s.get("host") or {}).get("name", "?")
            for d in (s.get("gpus") or {}).get("devices") or []:
                if isinstance(d, dict):
                    out.append(GpuDevice(host, d))
        return out

    @cached_property
    def gpu_of_pid(self) -> dict[tuple[str, int], tuple[GpuDevice, float | None]]:
        out = {}
        for g in self.gpus:
            for p in g.raw.get("processes") or []:
                if p.get("pid") is not None:
                    out[(g.host, int(p["pid"]))] = (g, p.get("used_mib"))
        return out

    @cached_property
    def workers(self) -> list[Proc]:
        """The processes that do the model's work: ranks, or else the Python processes."""
        ws = [p for p in self.processes if p.role in ("worker", "engine")]
        ws = [p for p in ws if p.role == "worker"] or ws
        if not ws:
            pys = [p for p in self.processes if p.is_python or (p.host, p.pid) in self.stacks]
            # a launcher that only waits for its children is not a worker, whether it is the
            # root or sits under one (`--pid` of a shell script that runs `python launch.py`)
            non_root = [p for p in pys if p not in self.roots]
            parents = {(p.host, p.ppid) for p in non_root if p.role != "compiler"}
            leaves = [p for p in non_root if (p.host, p.pid) not in parents or p.rank is not None]
            ws = leaves or non_root or pys
        return sorted(ws, key=lambda p: (p.host, p.rank if p.rank is not None else 1 << 30, p.pid))

    @cached_property
    def ranks(self) -> list[Rank]:
        out = []
        for p in self.workers:
            g = self.gpu_of_pid.get((p.host, p.pid))
            out.append(Rank(
                host=p.host, proc=p, stack=self.stacks.get((p.host, p.pid)),
                gpu=g[0] if g else None, gpu_mem_mib=g[1] if g else None,
            ))
        return out

    @cached_property
    def engine(self) -> Any:
        """The engine model's view (hangdoctor.engines): roles, phases, progress signals."""
        from hangdoctor.evidence.engine_view import EngineView

        return EngineView(self)

    @cached_property
    def log(self) -> Any:
        from hangdoctor.evidence.logs import parse_log

        lines: list[str] = []
        for s in self.snapshots:
            lines.extend((s.get("log") or {}).get("tail") or [])
        return parse_log(lines)

    @cached_property
    def log_meta(self) -> dict[str, Any]:
        for s in self.snapshots:
            if s.get("log"):
                return s["log"]
        return {}

    @cached_property
    def kernel(self) -> Any:
        from hangdoctor.evidence.kernel import parse_kernel

        lines: list[str] = []
        for s in self.snapshots:
            lines.extend((s.get("kernel_log") or {}).get("lines") or [])
        return parse_kernel(lines)

    @cached_property
    def http(self) -> list[dict[str, Any]]:
        out = []
        for s in self.snapshots:
            host = (s.get("host") or {}).get("name", "?")
            for h in s.get("http") or []:
                out.append(dict(h, host=host))
        return out

    @cached_property
    def host_memory(self) -> list[tuple[str, dict[str, Any]]]:
        return [((s.get("host") or {}).get("name", "?"), s["host_memory"])
                for s in self.snapshots if s.get("host_memory")]

    @cached_property
    def shm(self) -> list[tuple[str, dict[str, Any]]]:
        return [((s.get("host") or {}).get("name", "?"), s["shm"]) for s in self.snapshots if s.get("shm")]

    @cached_property
    def versions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for s in self.snapshots:
            out.update({k: str(v) for k, v in (s.get("versions") or {}).items() if v})
            g = s.get("gpus") or {}
            for key in ("driver_version", "cuda_driver_version"):
                if g.get(key):
                    out.setdefault(key, str(g[key]))
        return out

    def expected_world_size(self) -> tuple[int | None, str | None]:
        """How many ranks the job expects, and where that came from."""
        import re

        for p in self.processes:
            ws = p.env.get("WORLD_SIZE")
            if ws and ws.isdigit() and int(ws) > 0:
                return int(ws), f"WORLD_SIZE={ws} in the environment of pid {p.pid}"
        flag_re = re.compile(
            r"--(tensor-parallel-size|tensor_parallel_size|tp-size|tp_size|tp|num-shard|"
            r"nproc-per-node|nproc_per_node|world-size|world_size)[= ](\d+)")
        for p in self.roots + self.processes:
            m = flag_re.search(p.cmdline_text)
            if m:
                return int(m.group(2)), f"--{m.group(1)} {m.group(2)} on the command line of pid {p.pid}"
        return None, None
