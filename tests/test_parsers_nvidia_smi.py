"""nvidia-smi table and -q text into the gpus section."""

from __future__ import annotations

from pathlib import Path

from hangdoctor.parsers.nvidia_smi import parse_nvidia_smi_q, parse_nvidia_smi_table

SAMPLES = Path(__file__).parent / "samples"


def test_table_two_busy_gpus() -> None:
    g = parse_nvidia_smi_table((SAMPLES / "nvidia_smi_2gpu_busy.txt").read_text().splitlines())
    assert g["backend"] == "pasted" and g["status"] == "ok"
    assert (g["driver_version"], g["cuda_driver_version"]) == ("580.159.04", "13.0")
    d0, d1 = g["devices"]
    assert (d0["index"], d0["name"], d0["pci_bus_id"]) == (0, "NVIDIA H200", "00000000:19:00.0")
    assert d0["mem_total_mib"] == 143771 and d0["power_limit_w"] == 700.0
    assert d0["samples"] == [
        {
            "t": 0.0,
            "util_pct": 100,
            "mem_used_mib": 21503,
            "power_w": 119.0,
            "pstate": 0,
            "temp_c": 36,
        }
    ]
    assert d1["samples"][0]["power_w"] == 118.0 and d1["samples"][0]["util_pct"] == 100
    assert d0["processes"] == [{"pid": 46295, "used_mib": 21494, "type": "C", "name": "python3"}]
    assert d1["processes"][0]["pid"] == 46296
    assert d0["errors"] == {"ecc_uncorrected_volatile": 0}


def test_old_driver_layout() -> None:
    lines = [
        "+-----------------------------------------------------------------------------+",
        "| NVIDIA-SMI 470.57.02    Driver Version: 470.57.02    CUDA Version: 11.4     |",
        "|-------------------------------+----------------------+----------------------+",
        "|   0  Tesla V100-SXM2...  On   | 00000000:00:1E.0 Off |                    2 |",
        "| N/A   40C    P0    45W / 300W |      0MiB / 16160MiB |      0%      Default |",
        "+-------------------------------+----------------------+----------------------+",
        "| Processes:                                                                  |",
        "|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |",
        "|    0   N/A  N/A      1234      C   python                           900MiB |",
        "+-----------------------------------------------------------------------------+",
    ]
    (d,) = parse_nvidia_smi_table(lines)["devices"]
    assert d["name"] == "Tesla V100-SXM2..." and d["errors"] == {"ecc_uncorrected_volatile": 2}
    assert d["samples"][0]["power_w"] == 45.0 and d["samples"][0]["util_pct"] == 0
    assert d["processes"] == [{"pid": 1234, "used_mib": 900, "type": "C", "name": "python"}]


def test_query_text() -> None:
    g = parse_nvidia_smi_q((SAMPLES / "nvidia_smi_q.txt").read_text().splitlines())
    assert (g["driver_version"], g["cuda_driver_version"]) == ("580.159.04", "13.0")
    d0, d1 = g["devices"]
    assert d0["uuid"].startswith("GPU-6f8a") and d0["mem_total_mib"] == 143771
    assert d0["samples"] == [
        {
            "t": 0.0,
            "util_pct": 100,
            "mem_util_pct": 0,
            "mem_used_mib": 21503,
            "sm_clock_mhz": 1980,
            "power_w": 119.4,
            "pstate": 0,
            "throttle": [],
        }
    ]
    assert d0["errors"] == {"ecc_uncorrected_volatile": 2, "remapped_rows_uncorrectable": 1}
    assert d0["processes"] == [{"pid": 46295, "type": "C", "name": "python3", "used_mib": 21494}]
    assert d1["index"] == 1 and d1["samples"][0]["power_w"] == 78.5
    assert d1["samples"][0]["throttle"] == ["idle"] and d1["processes"] == []
    assert d1["power_limit_w"] == 700.0
