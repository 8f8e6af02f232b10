"""``python collect_env.py`` output (vLLM's and PyTorch's) into the snapshot's ``versions``::

PyTorch version              : 2.5.1+cu124          (vLLM 0.7+: "Key : value")
PyTorch version: 2.5.1+cu124                        (PyTorch / older vLLM)
Nvidia driver version: 550.54.15
[pip3] nvidia-nccl-cu12==2.21.5
vLLM Version: 0.6.3.post1

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable

from hangdoctor.parsers.text import clip_lines

_KV = re.compile(r"^\s*(?P<key>[A-Za-z][\w ./()-]*?)\s*:\s*(?P<val>\S.*?)\s*$")
_PIP = re.compile(r"^\s*\[(?:pip3?|conda)\]\s+(?P<pkg>[\w.-]+)(?:==|\s+)(?P<ver>[\w.+!-]+)")

_KEYS = {
    "pytorch version": "torch",
    "cuda used to build pytorch": "cuda_build",
    "cuda runtime version": "cuda_runtime",
    "nvidia driver version": "driver",
    "vllm version": "vllm",
    "python version": "python",
    "os": "os",
    "libc version": "libc",
    "rocm used to build pytorch": "rocm_build",
    "cudnn version": "cudnn",
    "nccl version": "nccl",
    "sglang version": "sglang",
    "transformers version": "transformers",
    "triton version": "triton",
}
_PIP_PKGS = {
    "torch": "torch",
    "nvidia-nccl-cu11": "nccl",
    "nvidia-nccl-cu12": "nccl",
    "nvidia-nccl-cu13": "nccl",
    "vllm": "vllm",
    "sglang": "sglang",
    "transformers": "transformers",
    "triton": "triton",
    "flashinfer-python": "flashinfer",
    "flashinfer": "flashinfer",
    "pyzmq": "pyzmq",
    "xformers": "xformers",
    "text-generation-server": "tgi",
}


def parse_collect_env(lines: Iterable[str]) -> dict:
    """Versions found in collect_env output: torch, cuda_build, cuda_runtime, driver, nccl,
    vllm, python, ... (only those present)."""
    out: dict = {}
    gpus: list[str] = []
    for raw in clip_lines(lines, 1000):
        line = raw.rstrip("\r\n")
        m = _PIP.match(line)
        if m:
            key = _PIP_PKGS.get(m.group("pkg").lower())
            if key:
                out.setdefault(key, m.group("ver"))
            continue
        g = re.match(r"^\s*GPU (\d+): (.+)$", line)
        if g:
            gpus.append(g.group(2).strip())
            continue
        m = _KV.match(line)
        if not m:
            continue
        key = _KEYS.get(m.group("key").strip().lower())
        val = m.group("val")
        if not key or val in ("N/A", "Could not collect", "None"):
            continue
        if key == "python":
            val = val.split()[0]
        elif key == "vllm":
            val = val.split()[0]
        out[key] = val  # explicit "Key: value" lines win over pip lists
    if gpus:
        out["gpu_models"] = gpus
    return out
