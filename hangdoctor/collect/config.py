"""What the probe is asked to collect. Plain data: it travels to remote hosts as JSON.

Stdlib only, Python 3.8 compatible (ships with the probe).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class ProbeConfig:
    root_pids: List[int] = field(default_factory=list)  # empty: discover inference servers
    ports: List[int] = field(default_factory=list)  # extra ports to probe over HTTP
    log_path: Optional[str] = None  # server log to tail (on the target host)
    window_s: float = 2.0  # sampling window
    deadline_s: float = 30.0  # the whole probe, hard
    pyspy_path: Optional[str] = None  # py-spy binary on the target; None: find it
    sudo: bool = False  # run py-spy through `sudo -n`
    native: bool = False  # py-spy --native (slow on torch: ~0.5 s per process)
    locals: bool = False  # py-spy --locals (redacted; off by default: prompts leak)
    redact: bool = True
    nvml: bool = True
    kernel_log: bool = True
    max_dump_concurrency: int = 16
    host_name: str = "localhost"  # what the user typed, for the report
    # The probe runs under `python3 -S` (SSH): site-packages (pynvml, psutil) are added in a
    # thread while the window runs, not before it starts.
    late_site: bool = False
    # Paths below exist so tests and fault injection can point the probe elsewhere.
    proc_root: str = "/proc"
    shm_path: str = "/dev/shm"
    env_prefixes: List[str] = field(
        default_factory=lambda: [
            "NCCL_", "CUDA_", "TORCH_", "VLLM_", "SGLANG_", "RANK", "LOCAL_RANK", "WORLD_SIZE",
            "LOCAL_WORLD_SIZE", "MASTER_", "GROUP_RANK", "ROLE_RANK", "OMP_", "PYTORCH_", "HF_",
            "TRANSFORMERS_", "TGI_", "TRTLLM_", "TLLM_", "NVIDIA_", "GLOO_", "UCX_", "FI_", "OMPI_",
            "PMI_", "SLURM_", "KUBERNETES_", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
            "HOSTNAME", "TP_", "DP_",
        ]
    )

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ProbeConfig:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)
