"""``nvidia-smi`` output: the default table and ``nvidia-smi -q``, into the snapshot's ``gpus``
section (one sample per GPU, backend ``pasted``).

Default table rows (driver 550+; older drivers differ only in spacing)::

    | NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0     |
    |   0  NVIDIA H200                    On  |   00000000:19:00.0 Off |                    0 |
    | N/A   35C    P0            119W /  700W |   21500MiB / 143771MiB |    100%      Default |
    |    0   N/A  N/A           46295      C   python3                           21000MiB |

Layer: parsers; may import: the standard library, hangdoctor.parsers, hangdoctor.snapshot and
the foundation.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from hangdoctor.parsers.text import clip_lines

_BANNER = re.compile(
    r"NVIDIA-SMI (?P<smi>[\d.]+)\s+Driver Version: (?P<drv>[\d.]+)(?:\s+CUDA Version: (?P<cuda>[\d.]+|N/A))?"
)
_GPU_ROW1 = re.compile(
    r"^\|\s+(?P<idx>\d+)\s+(?P<name>.+?)\s+(?P<pers>On|Off|N/A)\s+\|\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(?P<disp>On|Off|N/A)\s+\|\s*(?P<ecc>\S+)\s*\|"
)
_GPU_ROW2 = re.compile(
    r"^\|\s*(?P<fan>\d+%|N/A|ERR!)\s+(?P<temp>\d+C|N/A|ERR!)\s+(?P<perf>P\d+|N/A|ERR!)\s+"
    r"(?:(?P<pw>[\d.]+|N/A|ERR!)\s*W?\s*/\s*(?P<cap>[\d.]+|N/A|ERR!)\s*W?)?\s*\|\s*"
    r"(?P<used>\d+|N/A)\s*MiB\s*/\s*(?P<total>\d+|N/A)\s*MiB\s*\|\s*(?P<util>\d+|N/A|ERR!)\s*%?"
)
_PROC_ROW = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|C|G|M)\s+"
    r"(?P<name>.*?)\s+(?P<mem>\d+|N/A)\s*(?:MiB)?\s*\|\s*$"
)


def _num(s: Optional[str]) -> Optional[float]:
    try:
        return float(s) if s is not None else None
    except ValueError:
        return None


def _device(idx: int) -> dict:
    return {"index": idx, "samples": [], "processes": [], "errors": {}}


def parse_nvidia_smi_table(lines: Iterable[str]) -> dict:
    """Parse the default ``nvidia-smi`` table into a ``gpus`` section."""
    out: dict = {"status": "ok", "backend": "pasted", "devices": []}
    devs: dict[int, dict] = {}
    pending: Optional[dict] = None
    in_procs = False
    for raw in clip_lines(lines, 400):  # real rows are ~90 chars
        line = raw.rstrip("\r\n")
        m = _BANNER.search(line)
        if m:
            out["driver_version"] = m.group("drv")
            if m.group("cuda") and m.group("cuda") != "N/A":
                out["cuda_driver_version"] = m.group("cuda")
            continue
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            m = _PROC_ROW.match(line)
            if m:
                idx = int(m.group("gpu"))
                dev = devs.setdefault(idx, _device(idx))
                mem = m.group("mem")
                dev["processes"].append(
                    {
                        "pid": int(m.group("pid")),
                        "used_mib": int(mem) if mem.isdigit() else None,
                        "type": m.group("type"),
                        "name": m.group("name").strip(),
                    }
                )
            continue
        m = _GPU_ROW1.match(line)
        if m:
            idx = int(m.group("idx"))
            pending = devs.setdefault(idx, _device(idx))
            pending["name"] = m.group("name").strip()
            pending["pci_bus_id"] = m.group("bus")
            ecc = m.group("ecc")
            if ecc.isdigit():
                pending["errors"]["ecc_uncorrected_volatile"] = int(ecc)
            continue
        m = _GPU_ROW2.match(line)
        if m and pending is not None:
            if "ERR!" in line:
                # nvidia-smi could not read the GPU's own counters: a GPU in trouble (often
                # fallen off the bus), evidence for a fault and never a healthy reading
                pending["lost"] = True
                pending["lost_reason"] = "nvidia-smi printed ERR! for its readings"
            sample: dict = {"t": 0.0}
            util = _num(m.group("util"))
            if util is not None:
                sample["util_pct"] = int(util)
            if m.group("used") and m.group("used").isdigit():
                sample["mem_used_mib"] = int(m.group("used"))
            pw = _num(m.group("pw"))
            if pw is not None:
                sample["power_w"] = pw
            perf = m.group("perf")
            if perf and perf.startswith("P"):
                sample["pstate"] = int(perf[1:])
            temp = m.group("temp")
            if temp and temp.endswith("C"):
                sample["temp_c"] = int(temp[:-1])
            pending["samples"].append(sample)
            total = m.group("total")
            if total and total.isdigit():
                pending["mem_total_mib"] = int(total)
            cap = _num(m.group("cap"))
            if cap is not None:
                pending["power_limit_w"] = cap
            pending = None
    out["devices"] = [devs[k] for k in sorted(devs)]
    return out


# --- nvidia-smi -q ---------------------------------------------------------------------------

_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]+?)\s*:\s*(?P<val>.*?)\s*$")
_GPU_HEAD = re.compile(
    r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$"
)


def _tree(lines: list[str]) -> list:
    """Indentation tree of ``key : value`` / section lines: [(key, value, children)]."""
    root: list = []
    stack: list[tuple[int, list]] = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        m = _KV.match(line)
        if m and ":" in line:
            key, val = m.group("key").strip(), m.group("val")
        else:
            key, val = line.strip(), ""
        while stack and stack[-1][0] >= indent:
            stack.pop()
        node = (key, val, [])
        stack[-1][1].append(node)
        stack.append((indent, node[2]))
    return root


def _find(nodes: list, *path: str) -> Optional[tuple]:
    cur = None
    level = nodes
    for key in path:
        cur = next((n for n in level if n[0].lower() == key.lower()), None)
        if cur is None:
            return None
        level = cur[2]
    return cur


def _val(nodes: list, *path: str) -> Optional[str]:
    n = _find(nodes, *path)
    return n[1] if n is not None and n[1] != "" else None


def _first_num(s: Optional[str]) -> Optional[float]:
    if not s:
        return None
    m = re.search(r"-?\d+(?:\.\d+)?", s)
    return float(m.group(0)) if m else None


def parse_nvidia_smi_q(lines: Iterable[str]) -> dict:
    """Parse ``nvidia-smi -q`` text into a ``gpus`` section."""
    out: dict = {"status": "ok", "backend": "pasted", "devices": []}
    header: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for raw in clip_lines(lines, 1000):
        line = raw.rstrip("\r\n")
        m = _GPU_HEAD.match(line.strip()) if not line.startswith(" ") else None
        if m:
            blocks.append((m.group("bus"), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    top = _tree(header)
    drv = _val(top, "Driver Version")
    if drv:
        out["driver_version"] = drv
    cuda = _val(top, "CUDA Version")
    if cuda and cuda != "N/A":
        out["cuda_driver_version"] = cuda
    for i, (bus, body) in enumerate(blocks):
        t = _tree(body)
        minor = _first_num(_val(t, "Minor Number"))
        dev: dict = {
            "index": int(minor) if minor is not None else i,
            "pci_bus_id": bus,
            "samples": [],
            "processes": [],
            "errors": {},
        }
        name = _val(t, "Product Name")
        if name:
            dev["name"] = name
        uuid = _val(t, "GPU UUID")
        if uuid:
            dev["uuid"] = uuid
        total = _first_num(_val(t, "FB Memory Usage", "Total"))
        if total is not None:
            dev["mem_total_mib"] = int(total)
        cap = None
        for sect in ("GPU Power Readings", "Power Readings"):
            cap = _first_num(_val(t, sect, "Current Power Limit") or _val(t, sect, "Power Limit"))
            if cap is not None:
                break
        if cap is not None:
            dev["power_limit_w"] = cap
        sample: dict = {"t": 0.0}
        for key, path in (
            ("util_pct", ("Utilization", "Gpu")),
            ("mem_util_pct", ("Utilization", "Memory")),
            ("mem_used_mib", ("FB Memory Usage", "Used")),
            ("sm_clock_mhz", ("Clocks", "SM")),
        ):
            v = _first_num(_val(t, *path))
            if v is not None:
                sample[key] = int(v)
        for sect in ("GPU Power Readings", "Power Readings"):
            pw = _first_num(
                _val(t, sect, "Power Draw") or _val(t, sect, "Instantaneous Power Draw")
            )
            if pw is not None:
                sample["power_w"] = pw
                break
        ps = _val(t, "Performance State")
        if ps and ps.startswith("P") and ps[1:].isdigit():
            sample["pstate"] = int(ps[1:])
        for sect in ("Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Reasons"):
            node = _find(t, sect)
            if node:
                sample["throttle"] = [
                    re.sub(r"\W+", "_", k.strip().lower()).strip("_")
                    for k, v, _c in node[2]
                    if v.strip() == "Active"
                ]
                break
        dev["samples"].append(sample)
        _ecc(t, dev["errors"])
        procs = _find(t, "Processes")
        if procs:
            cur: Optional[dict] = None
            for key, val, children in procs[2]:
                if key == "Process ID" and val.isdigit():
                    cur = {"pid": int(val)}
                    dev["processes"].append(cur)
                    kids = children
                else:
                    kids = [(key, val, children)]
                for k, v, _c in kids:
                    if cur is None:
                        continue
                    if k == "Used GPU Memory":
                        n = _first_num(v)
                        cur["used_mib"] = int(n) if n is not None else None
                    elif k == "Name":
                        cur["name"] = v
                    elif k == "Type":
                        cur["type"] = v
        out["devices"].append(dev)
    out["devices"].sort(key=lambda d: d["index"])
    return out


def _ecc(t: list, errors: dict) -> None:
    vol = _find(t, "ECC Errors", "Volatile")
    if vol:
        unc = 0
        found = False
        for k, v, _c in vol[2]:
            if ("Uncorrectable" in k or "Double Bit" in k) and _first_num(v) is not None:
                unc += int(_first_num(v) or 0)
                found = True
            for k2, v2, _c2 in _c:  # older drivers nest "Single Bit" / "Double Bit" -> "Total"
                if "Double Bit" in k and k2 == "Total" and _first_num(v2) is not None:
                    unc += int(_first_num(v2) or 0)
                    found = True
        if found:
            errors["ecc_uncorrected_volatile"] = unc
    ret = _find(t, "Retired Pages")
    if ret:
        total = 0
        found = False
        for k, v, c in ret[2]:
            n = _first_num(v) if v else _first_num(_val(c, "Count"))
            if n is not None and "Pending" not in k:
                total += int(n)
                found = True
        if found:
            errors["retired_pages"] = total
    rem = _find(t, "Remapped Rows")
    if rem:
        n = _first_num(_val(rem[2], "Uncorrectable Error") or _val(rem[2], "Uncorrectable"))
        if n is not None:
            errors["remapped_rows_uncorrectable"] = int(n)
