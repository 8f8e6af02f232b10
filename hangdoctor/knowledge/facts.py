"""Facts about the environment, read from any text a report carries (launch commands, env
dumps, collect_env, NCCL INFO lines, nvidia-smi, logs): versions, parallelism, container and
NCCL settings, the GPUs. Pure functions of lines; no I/O.

A fact is a value (str, int, bool) or a list of values; rules compare them (``rules.json``).

Layer: knowledge; may import: the standard library, hangdoctor.knowledge and the foundation.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# (fact, regex, group): the first match wins unless the fact is a list ("*" suffix)
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("nccl_version*", re.compile(r"(?i)\bNCCL(?: version)?[ :=v]+(\d+\.\d+\.\d+)")),
    ("nccl_version*", re.compile(r"(?i)\bnccl==(\d+\.\d+\.\d+)")),
    ("nccl_version*", re.compile(r"(?i)nvidia-nccl-cu\d+\s*(?:==|=|\s)\s*(\d+\.\d+\.\d+)")),
    ("nccl_version*", re.compile(r"(?i)libnccl2?[=_ ]+(\d+\.\d+\.\d+)")),
    ("driver_version*", re.compile(r"(?i)driver version\s*[:=]?\s*(\d{3}\.\d+(?:\.\d+)?)")),
    ("driver_version*", re.compile(r"(?i)\bdriver[: ]+(\d{3}\.\d+\.\d+)")),
    ("cuda_version*", re.compile(r"(?i)CUDA Version\s*[:=]?\s*(\d+\.\d+)")),
    ("cuda_version*", re.compile(r"(?i)\bCUDA(?: runtime)?(?: version)?[: ]+(\d+\.\d+)\b")),
    ("torch_version", re.compile(r"(?i)\b(?:torch|pytorch)(?: version)?\s*(?:==|=|:|\s)\s*v?(\d+\.\d+\.\d+)")),
    ("vllm_version", re.compile(r"(?i)\bvllm(?:-openai)?(?: version)?\s*(?:==|:|\s)\s*v?(\d+\.\d+\.\d+)")),
    ("vllm_version", re.compile(r"(?i)vllm-openai:v(\d+\.\d+\.\d+)")),
    ("sglang_version", re.compile(r"(?i)\bsglang(?: version)?\s*(?:==|:)\s*v?(\d+\.\d+\.\d+)")),
    ("mpi4py_version", re.compile(r"(?i)\bmpi4py\s*(?:==|=|\s)\s*(\d+\.\d+(?:\.\d+)?)")),
    ("flashinfer_version", re.compile(r"(?i)\bflashinfer(?:-python)?\s*(?:==|:|\s)\s*v?(\d+\.\d+\.\d+)")),
    ("tp", re.compile(r"(?:--tensor[-_]parallel[-_]size|--tp[-_]size|--tp|\btensor_parallel_size)[= ]+(\d+)")),
    ("tp", re.compile(r"\bTP ?= ?(\d+)\b")),
    ("dp", re.compile(r"(?:--data[-_]parallel[-_]size|--dp[-_]size|--dp|\bdata_parallel_size)[= ]+(\d+)")),
    ("pp", re.compile(r"(?:--pipeline[-_]parallel[-_]size|--pp[-_]size|--pp|\bpipeline_parallel_size)[= ]+(\d+)")),
    ("nnodes", re.compile(r"--nnodes[= ]+(\d+)")),
    ("master_addr", re.compile(r"(?:--master[-_]addr|MASTER_ADDR)[= ]+([\w.:-]+)")),
    ("shm_size", re.compile(r"--shm-size[= ]+(\w+)")),
    ("ld_preload*", re.compile(r"LD_PRELOAD[= ]+[\"']?([^\s\"']+)")),
    ("max_model_len", re.compile(r"(?i)(?:max[-_ ]model[-_ ]len)[:= ]+([\d,]+)")),
    ("kv_cache_tokens", re.compile(r"(?i)GPU KV cache size:\s*([\d,]+) tokens")),
    ("gpu_arch*", re.compile(r"\bsm_?(\d{2,3})a?\b")),
    ("gpu_arch*", re.compile(r"(?i)\bSM ?(\d{1,2})\.(\d)\b")),
    ("gpu_arch*", re.compile(r"(?i)compute ?capability[: ]+(\d{1,2})\.(\d)")),
]
_FLAGS: list[tuple[str, re.Pattern[str]]] = [
    # vLLM logs every engine argument at start-up: "speculative_config=None" and SGLang's
    # "enable_dp_attention=False" say the feature is off
    ("spec_decode", re.compile(r"(?i)--speculative[-_](?:config|model|algorithm)|num_speculative_tokens|"
                               r"speculative_config(?!=None\b)")),
    ("enforce_eager", re.compile(r"--enforce[-_]eager|enforce_eager=True")),
    ("custom_ar_disabled", re.compile(r"--disable[-_]custom[-_]all[-_]reduce|disable_custom_all_reduce=True")),
    ("ipc_host", re.compile(r"--ipc[= ]host")),
    ("expert_parallel", re.compile(r"--enable[-_]expert[-_]parallel|--ep[-_]size[= ]+[2-9]")),
    ("dp_attention", re.compile(r"--enable[-_]dp[-_]attention|enable_dp_attention=True|"
                                r"(?<!enable_)dp_attention(?!=False)")),
    ("docker", re.compile(r"\bdocker run\b|nvidia-docker|\bdocker\b")),
    ("cross_node", re.compile(r"(?i)\bRoCE\b|across (?:the )?(?:two |\d+ )?nodes|cross-node|multi-node|"
                              r"\bEFA\b|InfiniBand|--nnodes[= ]+[2-9]")),
    ("interposer", re.compile(r"(?i)\bHAMi\b|libvgpu|vgpu\.so|LD_PRELOAD=\S*(?:vgpu|hook|intercept)")),
    # a bare "4090" is as often a port or a pid: the model number counts with its brand or a count
    ("consumer_gpu", re.compile(r"(?i)GeForce|\b(?:RTX|GTX) ?(?:[1-5]0[5-9]0|1660|1080)(?: ?Ti)?\b|"
                                r"\b\d+ ?x ?(?:RTX ?)?(?:1080|2080|3090|4090|5090)\b|"
                                r"\b(?:1080|2080|3090|4090|5090) ?Ti\b|\bTITAN [VXRP]")),
    ("workstation_gpu", re.compile(r"(?i)RTX (?:PRO )?\d{4}(?: Blackwell)?(?: Ada)?|RTX A\d{4}|"
                                   r"\bA6000\b|Ada Generation|RTX 6000 Ada")),
    ("pcie_gpu", re.compile(r"(?i)\bPCIe\b")),
    ("nvswitch_gpu", re.compile(r"\b(?:H100|H200|B200|B300|GB200|GB300)\b(?! PCIe)|NVSwitch|\bHGX\b|\bDGX (?:H|B|A)")),
    ("nvlink", re.compile(r"(?i)(?<!no )(?<!without )(?<!not )\bNVLink\b(?! ?(?:bridge )?(?:absent|: ?no))|\bNV\d+\b")),
    ("mpich", re.compile(r"(?i)\bmpich\b")),
    ("nccl_pip", re.compile(r"(?i)nvidia-nccl-cu\d+")),
    ("nccl_system", re.compile(r"(?i)\blibnccl2\b|/usr/lib\S*/libnccl\.so|from .?apt.?")),
    ("openmpi", re.compile(r"(?i)open ?mpi")),
]
_ENV_ASSIGN = re.compile(r"(?:^|\s|-e\s+|--env\s+[\"']?|export\s+)([A-Z][A-Z0-9_]{2,})=([^\s\"']*)")
_TOPO_ROW = re.compile(r"^\s*GPU(\d+)\s+((?:(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\s+){1,16})")
_STATS = re.compile(r"Running: (\d+) reqs?, (?:Swapped: \d+ reqs?, )?(?:Pending|Waiting): (\d+) reqs?")
_THROUGHPUT = re.compile(r"(?i)(?:generation|gen) throughput: ([\d.]+) tokens/s")


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def extract(lines: Iterable[str]) -> dict[str, Any]:
    """Every fact found in ``lines`` (see the module docstring)."""
    facts: dict[str, Any] = {}
    env: dict[str, str] = {}
    topo: set[str] = set()
    stats: list[tuple[int, int, float | None]] = []
    for line in lines:
        if not line or len(line) > 4000:
            continue
        for name, rx in _PATTERNS:
            m = rx.search(line)
            if not m:
                continue
            val = m.group(1) if m.lastindex == 1 else ".".join(m.groups())
            if name.endswith("*"):
                facts.setdefault(name[:-1], [])
                if val not in facts[name[:-1]]:
                    facts[name[:-1]].append(val)
            elif name not in facts:
                facts[name] = val
        for name, rx in _FLAGS:
            if name not in facts and rx.search(line):
                facts[name] = True
        if "=" in line:
            for m in _ENV_ASSIGN.finditer(line):
                env.setdefault(m.group(1), m.group(2))
        m = _TOPO_ROW.match(line)
        if m:
            topo.update(x for x in m.group(2).split() if x != "X")
        m = _STATS.search(line)
        if m:
            t = _THROUGHPUT.search(line)
            stats.append((int(m.group(1)), int(m.group(2)), float(t.group(1)) if t else None))
    for key in ("tp", "dp", "pp", "nnodes"):
        if key in facts:
            facts[key] = int(facts[key])
    for key in ("max_model_len", "kv_cache_tokens"):
        if key in facts:
            facts[key] = _num(facts[key])
    if "gpu_arch" in facts:
        facts["gpu_arch"] = [a.replace(".", "") for a in facts["gpu_arch"]]
    if env:
        facts["env"] = env
        for k, v in env.items():
            facts["env:" + k] = v
        if "LD_PRELOAD" in env:
            facts.setdefault("ld_preload", []).append(env["LD_PRELOAD"])
    if topo:
        facts["topo_links"] = sorted(topo)
        # every GPU pair through a host bridge or the CPU: P2P, if any, crosses the root complex
        facts["topo_pcie_only"] = not any(t.startswith("NV") for t in topo)
    if stats:
        running, waiting, gen = stats[-1]
        facts["stats_running"] = running
        facts["stats_waiting"] = waiting
        facts["stats_lines"] = len(stats)
        facts["stats_stalled"] = all(s[2] in (None, 0.0) for s in stats[-3:]) and (running or waiting) > 0
    if facts.get("max_model_len") and facts.get("kv_cache_tokens"):
        facts["prompt_can_exceed_kv"] = facts["max_model_len"] > facts["kv_cache_tokens"]
    if facts.get("nnodes", 1) > 1:
        facts["cross_node"] = True
    if facts.get("master_addr") in ("127.0.0.1", "localhost", "::1"):
        facts["master_loopback"] = True
    return facts


def version_tuple(v: Any) -> tuple[int, ...]:
    out = []
    for part in re.split(r"[.+-]", str(v)):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)
