"""What the probe is asked to collect. Plain data: it travels to remote hosts as JSON.

Stdlib only, Python 3.8 compatible (ships with the probe).

Layer: collect; may import: the standard library, psutil and pynvml (both optional),
hangdoctor.collect and hangdoctor.redact (it ships in the probe, Python 3.8+).
"""

from __future__ import annotations

import copy

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

# Not a dataclass: the probe imports this on remote hosts, where `dataclasses` (with `inspect`)
# costs ~10 ms before the first sample. Field, default.
_DEFAULTS = (
    ("root_pids", []),  # empty: discover inference servers
    ("ports", []),  # extra ports to probe over HTTP
    ("log_path", None),  # server log to tail (on the target host)
    ("window_s", 2.0),  # sampling window; 0: one sample
    ("deadline_s", 30.0),  # the whole probe, hard
    ("pyspy_path", None),  # py-spy binary on the target; None: find it
    ("sudo", False),  # run py-spy through `sudo -n`
    ("native", False),  # py-spy --native (slow on torch: ~0.5 s per process)
    ("locals", False),  # py-spy --locals (redacted; off by default: prompts leak)
    ("redact", True),
    ("nvml", True),
    ("kernel_log", True),
    ("nccl_ras", True),  # query NCCL RAS (read-only) when a diagnosed process loaded NCCL
    ("fr_dump", False),  # opt-in: ask ranks to dump their Flight Recorder (on-demand pipe)
    ("max_dump_concurrency", 16),
    ("host_name", "localhost"),  # what the user typed, for the report
    # The probe runs under `python3 -S` (SSH): site-packages (pynvml, psutil) are added in a
    # thread while the window runs, not before it starts.
    ("late_site", False),
    # Engine progress: GET /metrics at both ends of the window (read-only, like /health).
    ("metrics", True),
    # --probe-generate: one 1-token completion after the window (opt-in; it makes the engine
    # work). The key goes in the request header only, never into the snapshot.
    ("probe_generate", False),
    ("api_key", None),
    ("generate_timeout_s", 5.0),
    # Paths below exist so tests and fault injection can point the probe elsewhere.
    ("proc_root", "/proc"),
    ("shm_path", "/dev/shm"),
    ("env_prefixes", [
        "NCCL_", "CUDA_", "TORCH_", "VLLM_", "SGLANG_", "RANK", "LOCAL_RANK", "WORLD_SIZE",
        "LOCAL_WORLD_SIZE", "MASTER_", "GROUP_RANK", "ROLE_RANK", "OMP_", "PYTORCH_", "HF_",
        "TRANSFORMERS_", "TGI_", "TRTLLM_", "TLLM_", "NVIDIA_", "GLOO_", "UCX_", "FI_", "OMPI_",
        "PMI_", "SLURM_", "KUBERNETES_", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
        "HOSTNAME", "TP_", "DP_",
    ]),
)
FIELDS = tuple(name for name, _ in _DEFAULTS)


class ProbeConfig:
    """Keyword arguments only; every field has a default (a fresh copy for lists)."""

    root_pids: List[int]
    ports: List[int]
    log_path: Optional[str]
    window_s: float
    deadline_s: float
    pyspy_path: Optional[str]
    sudo: bool
    native: bool
    locals: bool
    redact: bool
    nvml: bool
    kernel_log: bool
    nccl_ras: bool
    fr_dump: bool
    max_dump_concurrency: int
    host_name: str
    late_site: bool
    metrics: bool
    probe_generate: bool
    api_key: Optional[str]
    generate_timeout_s: float
    proc_root: str
    shm_path: str
    env_prefixes: List[str]

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - set(FIELDS))
        if unknown:
            raise TypeError("ProbeConfig got unexpected field(s): %s" % ", ".join(unknown))
        for name, default in _DEFAULTS:
            setattr(self, name, values[name] if name in values else copy.copy(default))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProbeConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return "ProbeConfig(%s)" % ", ".join(
            "%s=%r" % (k, "***" if k == "api_key" and self.api_key else getattr(self, k))
            for k in FIELDS)

    def to_dict(self) -> Dict[str, Any]:
        return {name: copy.deepcopy(getattr(self, name)) for name in FIELDS}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ProbeConfig:
        return cls(**{k: v for k, v in data.items() if k in FIELDS})
