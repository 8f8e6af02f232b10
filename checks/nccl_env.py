"""The NCCL / torch.distributed environment: per-rank differences and settings known to hang.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""

from __future__ import annotations

from hangdoctor.checkapi import check, cleared, fired, support
from hangdoctor.evidence.model import Evidence

# Settings that matter for transport setup; a difference between ranks breaks the handshake.
_MUST_MATCH = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
               "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_SOCKET_IFNAME", "NCCL_PROTO", "NCCL_ALGO",
               "NCCL_NVLS_ENABLE", "NCCL_CUMEM_ENABLE", "NCCL_P2P_LEVEL", "NCCL_IB_HCA")
# Settings with a known record of hangs, and why.
_RISKY = {
    "NCCL_NVLS_ENABLE": ("1", "NVLink SHARP (NVLS) enabled: NVLS init hangs or fails on hosts "
                               "without working multicast; try NCCL_NVLS_ENABLE=0"),
    "NCCL_P2P_LEVEL": ("SYS", "P2P forced across the CPU interconnect (SYS): can hang on PCIe "
                              "consumer GPUs without working P2P"),
    "NCCL_BLOCKING_WAIT": ("1", "blocking wait: a desync blocks the host thread instead of raising"),
    "NCCL_IB_DISABLE": ("0", None),
}


@check("nccl.env", "NCCL and rendezvous environment across ranks", needs=["env"],
       causes=["nccl-transport", "rendezvous-stall"])
def nccl_env(ev: Evidence):
    """Compares the NCCL_*, MASTER_* and WORLD_SIZE variables of every rank. A rank with
    another MASTER_ADDR/MASTER_PORT/WORLD_SIZE waits at rendezvous for peers that are
    elsewhere; ranks with different transport settings (P2P, SHM, IB, socket interface) cannot
    complete the NCCL handshake. Also names settings with a record of hangs (NVLS on).

    Confirm by hand: for p in $(pgrep -f RANK_PATTERN); do tr '\\0' '\\n' < /proc/$p/environ | grep -E 'NCCL_|MASTER_|WORLD_SIZE'; done
    """
    ranks = [r for r in ev.ranks if r.proc.env]
    signals = []
    for key in _MUST_MATCH:
        vals = {}
        for r in ranks:
            vals[r.pid] = r.proc.env.get(key)
        distinct = {v for v in vals.values()}
        if len(ranks) >= 2 and len(distinct) > 1:
            detail = ", ".join(f"pid {pid}: {v if v is not None else '(unset)'}" for pid, v in list(vals.items())[:6])
            cause = "rendezvous-stall" if key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE") else "nccl-transport"
            signals.append(support(cause, 0.5, f"{key} differs between ranks: {detail}"))
    seen = set()
    for r in ranks:
        for key, (bad, why) in _RISKY.items():
            if why and r.proc.env.get(key) == bad and key not in seen:
                seen.add(key)
                signals.append(support("nccl-transport", 0.15, f"{key}={bad}: {why}"))
    if signals:
        signals.sort(key=lambda s: -s.weight)
        return fired(signals[0].text, *signals)
    keys = sorted({k for r in ranks for k in r.proc.env if k.startswith(("NCCL_", "MASTER_"))})
    return cleared(f"{len(ranks)} rank environment(s) agree on {len(keys)} NCCL/MASTER variable(s)")
