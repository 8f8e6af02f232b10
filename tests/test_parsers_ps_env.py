"""ps listings, env dumps and collect_env output."""

from __future__ import annotations

from pathlib import Path

from hangdoctor.parsers.collect_env import parse_collect_env
from hangdoctor.parsers.env import parse_env
from hangdoctor.parsers.ps import parse_ps

SAMPLES = Path(__file__).parent / "samples"


def _by_pid(name: str) -> dict:
    return {p["pid"]: p for p in parse_ps((SAMPLES / name).read_text().splitlines())}


def test_ps_auxf_forest() -> None:
    ps = _by_pid("ps_auxf.txt")
    assert sorted(ps) == [1, 46294, 46295, 46296, 46297, 46298, 46299]
    w = ps[46295]
    assert w["ppid"] == 46294 and w["status"] == "S" and w["ps_cpu_pct"] == 12.1
    assert w["rss_bytes"] == 1203456 * 1024 and w["cpu_time_s"] == 340.0
    assert w["cmdline"][0] == "/usr/bin/python3" and w["name"] == "python3"
    assert "cpu_pct" not in w  # a lifetime average is not the window rate
    assert ps[46299]["ppid"] == 46296 and ps[46299]["zombie"] and ps[46299]["name"] == "python3"
    assert ps[46297]["status"] == "Z" and ps[46297]["ppid"] == 46294
    assert ps[46298]["status"] == "D"
    assert "ppid" not in ps[46294] and ps[46294]["role"] == "api-server"
    assert ps[46294]["cmdline"][-2:] == [
        "--api-key",
        "sk-proj-abcdefghijklmnop1234567890",
    ]  # redacted later


def test_ps_ef_sglang_titles() -> None:
    ps = _by_pid("ps_ef.txt")
    assert ps[51301]["ppid"] == 51200 and ps[51301]["rank"] == 1 and ps[51301]["role"] == "worker"
    assert ps[51301]["rank_source"] == "name:TP1" and ps[51301]["cpu_time_s"] == 4218.0
    assert ps[51310]["role"] == "other" and "rank" not in ps[51310]
    assert "status" not in ps[51200]  # -ef has no STAT column: unknown, not invented


def test_ps_threads_with_wchan() -> None:
    ps = _by_pid("ps_elo.txt")
    assert ps[46295]["wchan"] == "futex_wait_queue" and ps[46295]["status"] == "S"
    assert ps[46295]["threads"] == [
        {"tid": 46301, "status": "S", "wchan": "ep_poll", "name": "pt_tcpstore_uv"},
        {"tid": 46302, "status": "R", "name": "python3"},
    ]
    assert ps[46296]["wchan"] == "anon_pipe_read"


def test_ps_lstart_and_junk_rows() -> None:
    lines = [
        "  PID  PPID S                  STARTED WCHAN  CMD",
        "  100     1 S Sat Nov 29 19:00:00 2025 do_wai python3 -m vllm serve x",
        "not a row at all",
        "  101   100 D Sat Nov 29 19:00:01 2025 io_sch python3 worker.py --rank 2",
    ]
    assert parse_ps(lines) == []  # "STARTED" is not a column we know: not a ps header
    lines[0] = "  PID  PPID S                  LSTART WCHAN  CMD"
    ps = {p["pid"]: p for p in parse_ps(lines)}
    assert ps[101]["status"] == "D" and ps[101]["wchan"] == "io_sch" and ps[101]["rank"] == 2
    assert ps[100]["cmdline"] == ["python3", "-m", "vllm", "serve", "x"]


def test_env_redacted() -> None:
    env = parse_env((SAMPLES / "env_worker.txt").read_text().splitlines())
    assert env["NCCL_P2P_DISABLE"] == "1" and env["RANK"] == "1" and env["WORLD_SIZE"] == "4"
    assert env["HF_TOKEN"] == "[REDACTED]" and env["OPENAI_API_KEY"] == "[REDACTED]"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["HTTP_PROXY"] == "http://alice:[REDACTED]@proxy.internal:3128"
    assert "hf_abc" not in repr(env)
    nul = parse_env(["A=1\x00B=2\x00HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz"])
    assert nul == {"A": "1", "B": "2", "HF_TOKEN": "[REDACTED]"}


def test_collect_env_versions() -> None:
    v = parse_collect_env((SAMPLES / "collect_env_vllm.txt").read_text().splitlines())
    assert v["torch"] == "2.7.0+cu126" and v["cuda_build"] == "12.6"
    assert v["cuda_runtime"] == "12.6.85" and v["driver"] == "570.133.20"
    assert v["nccl"] == "2.26.2" and v["vllm"] == "0.9.2" and v["python"] == "3.12.11"
    assert v["gpu_models"] == ["NVIDIA H200", "NVIDIA H200"]
    assert "cudnn" not in v  # "Could not collect"
    old = parse_collect_env(
        [
            "PyTorch version: 2.5.1+cu124",
            "CUDA runtime version: 12.4.131",
            "Nvidia driver version: 550.54.15",
            "[pip3] nvidia-nccl-cu12==2.21.5",
            "vLLM Version: 0.6.3.post1",
        ]
    )
    assert old == {
        "torch": "2.5.1+cu124",
        "cuda_runtime": "12.4.131",
        "driver": "550.54.15",
        "nccl": "2.21.5",
        "vllm": "0.6.3.post1",
    }
