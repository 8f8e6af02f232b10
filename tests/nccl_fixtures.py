"""Snapshots with an ``nccl`` section, made from what NCCL RAS and the Flight Recorder really wrote.

The section is built by the collector's own functions (``summarize_ras``, ``read_fr_dump``) from the
recordings in tests/fixtures/nccl/, so its shape is always what a live probe writes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ras_replay import recorded_status, with_ranks
from snapbuild import LAUNCHER, proc, snap

from hangdoctor.collect import nccl_sources as nccl

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
LIB = {"path": "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
       "version": "2.28.9", "version_source": "pip wheel nvidia_nccl_cu13-2.28.9.dist-info"}


def ras_sample(doc: dict[str, Any], t_s: float = 0.0) -> dict[str, Any]:
    return {"addr": "127.0.0.1:28028", "ok": True, "format": "json", "server_protocol": "2",
            "status": nccl.summarize_ras(doc), "duration_s": 0.002, "t_s": t_s}


def fr_dump(name: str, rank: int, mtime: float | None = None) -> dict[str, Any]:
    d = nccl.read_fr_dump(str(FIXTURES / name))
    d["path"] = f"/tmp/nccl_trace_rank_{rank}"
    d["rank"] = rank
    if mtime is not None:
        d["mtime"] = mtime
    return d


def nccl_snap(ras: list[dict[str, Any]] | None = None, fr: list[dict[str, Any]] | None = None,
              n_ranks: int = 2, created: float | None = None) -> dict[str, Any]:
    created = created if created is not None else time.time() - 600
    procs = [dict(LAUNCHER, create_time=created)] + [
        proc(101 + r, r, env={"WORLD_SIZE": str(n_ranks)}, create_time=created) for r in range(n_ranks)]
    s = snap(processes=procs)
    s["nccl"] = {"processes": [{"pid": 101 + r, "libraries": [LIB], "ras_addr": "127.0.0.1:28028",
                                "ras_disabled": False} for r in range(n_ranks)],
                 "ras": ras or [], "ras_queried": ras is not None,
                 "flight_recorder": fr or [], "fr_requests": []}
    return s


def ar(n: int) -> dict[str, int]:
    return {"AllReduce": n}


# ------------------------------------------------------------ RAS situations
def ras_rank_missing():
    base = recorded_status()
    doc = with_ranks(base, [ar(40), ar(40)], missing=[1])
    return nccl_snap([ras_sample(doc, 0.0), ras_sample(doc, 2.0)])


def ras_counts_skewed_frozen():
    base = recorded_status()
    doc = with_ranks(base, [ar(1204), ar(1203), ar(1204), ar(1204)])
    return nccl_snap([ras_sample(doc, 0.0), ras_sample(doc, 2.0)], n_ranks=4)


def ras_counts_moving():
    base = recorded_status()
    return nccl_snap([ras_sample(with_ranks(base, [ar(100), ar(99)]), 0.0),
                      ras_sample(with_ranks(base, [ar(180), ar(180)]), 2.0)])


def ras_all_present_frozen():
    base = recorded_status()
    doc = with_ranks(base, [ar(500), ar(500)])
    return nccl_snap([ras_sample(doc, 0.0), ras_sample(doc, 2.0)])


def ras_recorded_one_rank():
    """The H200 recording itself: one rank, counts 0 (NCCL short-cuts a 1-rank communicator)."""
    doc = recorded_status("stuck_json_1")
    doc2 = recorded_status("stuck_json_2")
    return nccl_snap([ras_sample(doc, 0.0), ras_sample(doc2, 2.0)], n_ranks=1)


# ------------------------------------------------------------ Flight Recorder situations
def fr_gloo_desync():
    return nccl_snap(fr=[fr_dump("fr-gloo-desync-rank0.pickle", 0, time.time()),
                         fr_dump("fr-gloo-desync-rank1.pickle", 1, time.time())])


def fr_h200_timeout():
    return nccl_snap(fr=[fr_dump("fr-h200-timeout-rank0.pickle", 0, time.time())], n_ranks=1)


def fr_stale():
    old = time.time() - 86400
    return nccl_snap(fr=[fr_dump("fr-gloo-desync-rank0.pickle", 0, old),
                         fr_dump("fr-gloo-desync-rank1.pickle", 1, old)], created=time.time() - 60)


def fr_all_done():
    """The recorded H200 dump as it was before the stuck collective: every entry completed."""
    d = fr_dump("fr-h200-timeout-rank0.pickle", 0, time.time())
    g = d["summary"]["groups"][0]
    g["entries"] = [e for e in g["entries"] if e["state"] == "completed"]
    g["status"]["last_enqueued_collective"] = 6
    return nccl_snap(fr=[d], n_ranks=1)


def fr_first_collective():
    d = fr_dump("fr-h200-timeout-rank0.pickle", 0, time.time())
    g = d["summary"]["groups"][0]
    g["entries"] = [dict(g["entries"][-1], collective_seq_id=1)]
    g["ranks"] = "[0, 1]"  # the first collective of a two-rank group
    g["status"] = {"last_enqueued_collective": 1, "last_started_collective": -1,
                   "last_completed_collective": 0}
    return nccl_snap(fr=[d], n_ranks=1)


def fr_one_dump_of_two_ranks():
    """Only rank 0's dump (of a two-rank group): it waits in all_reduce #2; its peer is unseen."""
    return nccl_snap(fr=[fr_dump("fr-gloo-desync-rank0.pickle", 0, time.time())])
