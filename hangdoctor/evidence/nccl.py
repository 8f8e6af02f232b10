"""Typed views of what NCCL and PyTorch kept about the job: the loaded NCCL, RAS samples, Flight Recorder.

Pure: reads the ``nccl`` section of snapshots (hangdoctor/collect/nccl_sources.py writes it; SCHEMA.md
describes it). Checks ask this view, never the raw documents:

- ``libraries``: which NCCL each process mapped, and its version;
- ``communicators``: per RAS communicator, the first and last sample of each rank's collective
  counts, the ranks RAS reports missing, and each rank's status flags;
- ``fr_ranks``: per Flight Recorder dump (one per rank), per process group, the last collective
  that completed and the first one that did not (the collective the rank entered and is stuck in).

Layer: evidence; may import: the standard library, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COUNT_KEYS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
STALE_MARGIN_S = 5.0  # a dump older than the processes (minus this) is from an earlier run


@dataclass
class RasRank:
    rank: int | None
    host: str | None
    pid: int | None
    cuda_dev: int | None
    counts_first: dict[str, int]
    counts_last: dict[str, int]
    status: dict[str, Any]

    @property
    def total_first(self) -> int:
        return sum(int(v or 0) for v in self.counts_first.values())

    @property
    def total_last(self) -> int:
        return sum(int(v or 0) for v in self.counts_last.values())

    @property
    def label(self) -> str:
        where = ", ".join(x for x in (
            f"pid {self.pid}" if self.pid is not None else "",
            f"host {self.host}" if self.host else "",
            f"GPU {self.cuda_dev}" if self.cuda_dev is not None else "") if x)
        return f"rank {self.rank}" + (f" ({where})" if where else "")


@dataclass
class RasCommunicator:
    hash: str
    size: int | None
    ranks: list[RasRank]
    missing: list[dict[str, Any]]
    samples: int  # how many RAS answers saw this communicator
    missing_first: list[dict[str, Any]] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return self.samples > 1 and any(r.total_last != r.total_first for r in self.ranks)

    def behind(self) -> list[RasRank]:
        """Ranks whose collective count is below the communicator's highest (last sample)."""
        if len(self.ranks) < 2:
            return []
        top = max(r.total_last for r in self.ranks)
        return [r for r in self.ranks if r.total_last < top]

    def differing_ops(self) -> dict[str, dict[int | None, int]]:
        """Per collective kind whose count differs between ranks: rank -> count."""
        out: dict[str, dict[int | None, int]] = {}
        for key in COUNT_KEYS:
            vals = {r.rank: int(r.counts_last.get(key) or 0) for r in self.ranks}
            if len(set(vals.values())) > 1:
                out[key] = vals
        return out


@dataclass
class FrPending:
    """The first collective of a process group that had not completed when the dump was written."""
    op: str
    seq: int | None
    state: str
    sizes: list[Any]
    caller: str | None
    timeout_ms: int | None


@dataclass
class FrGroup:
    pg: str
    desc: str
    ranks: str | None
    last_completed: int | None  # collective_seq_id
    pending: FrPending | None
    timing_on: bool  # last_started_collective tracked (TORCH_NCCL_ENABLE_TIMING): 'started' is known
    last_op: str | None


@dataclass
class FrRank:
    host: str
    path: str
    rank: int | None
    mtime: float | None
    stale: bool
    groups: list[FrGroup]
    nccl_version: str | None

    def group(self, pg: str) -> FrGroup | None:
        for g in self.groups:
            if g.pg == pg:
                return g
        return None


class NcclView:
    def __init__(self, snapshots: list[dict[str, Any]]) -> None:
        self.snapshots = snapshots
        self.sections = [(str((s.get("host") or {}).get("name", "?")), s.get("nccl") or {}, s)
                         for s in snapshots if isinstance(s.get("nccl"), dict)]

    # ------------------------------------------------------------ the loaded NCCL
    @property
    def libraries(self) -> list[dict[str, Any]]:
        out = []
        for host, sec, _ in self.sections:
            for p in sec.get("processes") or []:
                for lib in p.get("libraries") or []:
                    out.append({"host": host, "pid": p.get("pid"), "path": lib.get("path"),
                                "version": lib.get("version"), "source": lib.get("version_source")})
        return out

    @property
    def versions(self) -> list[str]:
        vs = {lib["version"] for lib in self.libraries if lib.get("version")}
        for c in self._ras_docs():
            if c.get("nccl_version"):
                vs.add(str(c["nccl_version"]))
        return sorted(vs)

    # ------------------------------------------------------------ RAS
    @property
    def ras_queried(self) -> bool:
        return any(sec.get("ras_queried") for _, sec, _ in self.sections)

    @property
    def ras_answers(self) -> list[dict[str, Any]]:
        return [s for _, sec, _ in self.sections for s in sec.get("ras") or [] if s.get("ok")]

    @property
    def ras_errors(self) -> list[str]:
        return [str(s.get("error")) for _, sec, _ in self.sections for s in sec.get("ras") or []
                if not s.get("ok") and s.get("error")]

    def _ras_docs(self) -> list[dict[str, Any]]:
        return [a["status"] for a in self.ras_answers if isinstance(a.get("status"), dict)]

    @property
    def ras_text(self) -> list[str]:
        return [a["text"] for a in self.ras_answers if a.get("format") == "text" and a.get("text")]

    @property
    def communicators(self) -> list[RasCommunicator]:
        """Each communicator RAS reported, its first and last sample joined."""
        seen: dict[str, list[dict[str, Any]]] = {}
        order: list[str] = []
        for doc in self._ras_docs():
            for c in doc.get("communicators") or []:
                h = str(c.get("hash"))
                if h not in seen:
                    seen[h] = []
                    order.append(h)
                seen[h].append(c)
        out = []
        for h in order:
            first, last = seen[h][0], seen[h][-1]
            firsts = {r.get("rank"): r for r in first.get("ranks") or []}
            ranks = []
            for r in last.get("ranks") or []:
                a = firsts.get(r.get("rank"), r)
                ranks.append(RasRank(rank=r.get("rank"), host=r.get("host"), pid=r.get("pid"),
                                     cuda_dev=r.get("cuda_dev"),
                                     counts_first=dict(a.get("collective_counts") or {}),
                                     counts_last=dict(r.get("collective_counts") or {}),
                                     status=dict(r.get("status") or {})))
            out.append(RasCommunicator(hash=h, size=last.get("size"), ranks=ranks,
                                       missing=list(last.get("missing_ranks") or []),
                                       samples=len(seen[h]),
                                       missing_first=list(first.get("missing_ranks") or [])))
        return out

    # ------------------------------------------------------------ Flight Recorder
    @property
    def fr_files(self) -> list[dict[str, Any]]:
        return [dict(d, host=host) for host, sec, _ in self.sections
                for d in sec.get("flight_recorder") or []]

    @property
    def fr_ranks(self) -> list[FrRank]:
        out = []
        for host, sec, snap in self.sections:
            started = [p.get("create_time") for p in snap.get("processes") or []
                       if isinstance(p.get("create_time"), (int, float))]
            oldest = min(started) if started else None
            for d in sec.get("flight_recorder") or []:
                summ = d.get("summary")
                if not isinstance(summ, dict):
                    continue
                mtime = d.get("mtime")
                stale = bool(oldest is not None and isinstance(mtime, (int, float))
                             and mtime < oldest - STALE_MARGIN_S)
                groups = [self._fr_group(g) for g in summ.get("groups") or [] if isinstance(g, dict)]
                out.append(FrRank(host=host, path=str(d.get("path")), rank=d.get("rank"), mtime=mtime,
                                  stale=stale, groups=groups, nccl_version=summ.get("comm_lib_version")))
        return sorted(out, key=lambda r: (r.host, r.rank if r.rank is not None else -1))

    @staticmethod
    def _fr_group(g: dict[str, Any]) -> FrGroup:
        entries = [e for e in g.get("entries") or [] if isinstance(e, dict) and not e.get("is_p2p")]
        status = g.get("status") or {}
        last_completed = status.get("last_completed_collective")
        done = [e for e in entries if e.get("state") == "completed"]
        if last_completed is None and done:
            last_completed = done[-1].get("collective_seq_id")
        if isinstance(status.get("last_completed_collective"), int):
            # the process group's own counter: gloo leaves every entry 'scheduled'
            pend = next((e for e in entries if isinstance(e.get("collective_seq_id"), int)
                         and e["collective_seq_id"] > status["last_completed_collective"]), None)
        else:
            pend = next((e for e in entries if e.get("state") in ("scheduled", "started")), None)
        pending = None
        if pend is not None:
            pending = FrPending(op=_op_name(pend.get("op")), seq=pend.get("collective_seq_id"),
                                state=str(pend.get("state")), sizes=list(pend.get("input_sizes") or []),
                                caller=pend.get("caller"), timeout_ms=pend.get("timeout_ms"))
        started = status.get("last_started_collective")
        return FrGroup(pg=str(g.get("pg")), desc=str(g.get("desc") or ""), ranks=g.get("ranks"),
                       last_completed=last_completed, pending=pending,
                       timing_on=isinstance(started, int) and started >= 0,
                       last_op=_op_name(entries[-1].get("op")) if entries else None)


def _op_name(profiling_name: Any) -> str:
    """``nccl:all_reduce`` -> ``all_reduce``."""
    s = str(profiling_name or "?")
    return s.split(":", 1)[1] if ":" in s else s
