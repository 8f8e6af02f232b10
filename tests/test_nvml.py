"""The NVML adapter against a fake libnvidia-ml.so.1, a fake nvidia-smi, and no driver at all.

Each case runs the real adapter (hangdoctor/collect/nvml.py) in a fresh interpreter, because
pynvml loads ``libnvidia-ml.so.1`` once per process through ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need

from hangdoctor.collect import nvml_records
from hangdoctor.collect.probe_pack import PROBE_MODULES

REPO = Path(__file__).resolve().parents[1]


def _load_fakebuild():
    # by path: works whether or not tests/ is a package
    spec = importlib.util.spec_from_file_location(
        "fakenvml_build", Path(__file__).with_name("fakenvml") / "build.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fakebuild = _load_fakebuild()
NO_SUCH_PID = 4194303  # what the fake's vanished-pid scenario adds

# Runs GpuSampler.run() in a daemon thread like the probe does, waits join_s, prints result().
DRIVER = r"""
import json, sys, threading, time
from hangdoctor.collect.nvml import GpuSampler
window_s, interval_s, call_timeout_s, join_s = (float(a) for a in sys.argv[1:5])
s = GpuSampler(window_s=window_s, interval_s=interval_s, call_timeout_s=call_timeout_s)
th = threading.Thread(target=s.run, daemon=True)
th.start()
polls = 0
deadline = time.monotonic() + join_s
while th.is_alive() and time.monotonic() < deadline:
    if sys.argv[5:] == ["poll"]:
        s.result()  # must be safe while the worker writes
        polls += 1
    th.join(0.01)
t = time.monotonic()
gpus, entry = s.result()
print(json.dumps({"gpus": gpus, "manifest": entry, "result_s": time.monotonic() - t,
                  "run_alive": th.is_alive(), "polls": polls,
                  "pynvml_imported": "pynvml" in sys.modules}))
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # a skip under CI=true is a failure: tests/run-all.sh installs gcc
    need(fakebuild.gcc_available(), "gcc (to build the fake libnvidia-ml.so.1)")
    dest = tmp_path_factory.mktemp("fakenvml")
    return {v: fakebuild.build(dest, v) for v in fakebuild.VARIANTS}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "LD_LIBRARY"))}
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi unless a test puts one first
    env.update(extra)
    return env


def sample(
    env: dict[str, str],
    window_s: float = 0.4,
    interval_s: float = 0.1,
    call_timeout_s: float = 2.0,
    join_s: float = 15.0,
    poll: bool = False,
    python: str = sys.executable,
) -> dict:
    args = [python, "-c", DRIVER, str(window_s), str(interval_s), str(call_timeout_s), str(join_s)]
    if poll:
        args.append("poll")
    t = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    out["wall_s"] = time.monotonic() - t
    return out


def fake(libs: dict[str, Path], scenario: str, pids: list[int], **kw: object) -> dict:
    lib = libs["missing-function" if scenario == "missing-function" else "full"]
    env = _env(
        LD_LIBRARY_PATH=str(lib),
        FAKE_NVML_SCENARIO=scenario,
        FAKE_NVML_PIDS=",".join(str(p) for p in pids),
    )
    return sample(env, **kw)  # type: ignore[arg-type]


@pytest.fixture()
def pids() -> list[int]:
    # two live pids for the two GPUs: this test process and its parent
    return [os.getpid(), os.getppid()]


# ---- the fake library, scenario by scenario -----------------------------------------------


def test_nccl_wait_reads_static_info_samples_and_processes(libs, pids):
    out = fake(libs, "h200x2-nccl-wait", pids, window_s=0.5)
    gpus, entry = out["gpus"], out["manifest"]
    assert entry["source"] == "nvml" and entry["status"] == "ok", entry
    assert entry["detail"].startswith("2 GPUs, ") and "pynvml" in entry["detail"]
    assert gpus["status"] == "ok" and gpus["backend"] == "pynvml"
    assert gpus["driver_version"] == "580.95.05"
    assert gpus["cuda_driver_version"] == "13.0"
    assert gpus["nvml_version"] == "13.580.95.05"
    d0, d1 = gpus["devices"]
    assert [d0["index"], d1["index"]] == [0, 1]
    assert d0["name"] == "NVIDIA H200" and d0["uuid"].startswith("GPU-")
    assert d0["uuid"] != d1["uuid"]
    assert (d0["pci_bus_id"], d1["pci_bus_id"]) == ("00000000:19:00.0", "00000000:3B:00.0")
    assert d0["mem_total_mib"] == 143771 and d0["power_limit_w"] == 700.0
    assert d0["mem_reserved_mib"] == 614  # memory info v2: the reservation apart from "used"
    assert d0["lost"] is False
    # Hopper remaps rows instead of retiring pages: the fake says NOT_SUPPORTED like the driver
    assert d0["unsupported"] == ["retired_pages"]
    assert d0["errors"]["ecc_uncorrected_volatile"] == 0
    assert d0["errors"]["remapped_rows_uncorrectable"] == 0
    for dev in (d0, d1):
        ts = [s["t"] for s in dev["samples"]]
        assert len(ts) >= 3 and ts == sorted(ts)
        assert ts[0] < 0.2 and ts[-1] >= 0.5
        for s in dev["samples"]:
            assert s["mem_used_mib"] == 20 * 1024 + 530
            assert s["sm_clock_mhz"] == 1980 and s["pstate"] == 0
            assert s["pcie_tx_kbps"] == 1200 and s["pcie_rx_kbps"] == 800
    # the NCCL-wait signature: busy at idle power on GPU0, parked peer on GPU1
    assert {s["util_pct"] for s in d0["samples"]} == {100}
    assert all(118.5 <= s["power_w"] <= 120.0 for s in d0["samples"])
    assert {s["util_pct"] for s in d1["samples"]} == {0}
    assert all(s["throttle"] == ["idle"] for s in d1["samples"])
    assert all(s["throttle"] == [] for s in d0["samples"])
    assert d0["processes"] == [{"pid": pids[0], "used_mib": 20 * 1024 + 500}]
    assert d1["processes"] == [{"pid": pids[1], "used_mib": 20 * 1024 + 500}]
    assert entry["duration_s"] >= 0.5 and not out["run_alive"]


def test_busy_and_idle_loaded_power_levels(libs, pids):
    busy = fake(libs, "h200x2-busy", pids)["gpus"]["devices"]
    idle = fake(libs, "h200x2-idle-loaded", pids)["gpus"]["devices"]
    for dev in busy:
        assert all(s["util_pct"] == 100 and s["power_w"] > 600 for s in dev["samples"])
        assert dev["samples"][0]["throttle"] == ["sw_power_cap"]
    for dev in idle:
        assert all(s["util_pct"] == 0 and s["power_w"] < 119 for s in dev["samples"])
        assert all(s["mem_used_mib"] > 20000 for s in dev["samples"])


def test_lost_gpu_is_recorded_and_the_others_are_still_sampled(libs, pids):
    out = fake(libs, "lost-gpu", pids)
    entry, (d0, d1) = out["manifest"], out["gpus"]["devices"]
    assert entry["status"] == "partial"
    assert "GPU 1 lost: nvmlDeviceGetName: GPU is lost" in entry["detail"]
    assert "remedy" in entry
    assert d1["lost"] is True and d1["samples"] == [] and "name" not in d1
    assert d0["lost"] is False and len(d0["samples"]) >= 2 and d0["processes"]


def test_unsupported_fields_are_named_not_zero(libs, pids):
    out = fake(libs, "unsupported-field", pids)
    assert out["manifest"]["status"] == "ok"
    for dev in out["gpus"]["devices"]:
        assert {"power_w", "power_limit_w", "pcie_tx_kbps", "pcie_rx_kbps"} <= set(
            dev["unsupported"]
        )
        assert "power_limit_w" not in dev
        for s in dev["samples"]:
            assert "power_w" not in s and "pcie_tx_kbps" not in s
            assert "util_pct" in s and "mem_used_mib" in s


def test_missing_functions_fall_back_to_older_entry_points(libs, pids):
    out = fake(libs, "missing-function", pids)
    assert out["manifest"]["status"] == "ok"
    d0, d1 = out["gpus"]["devices"]
    # no nvmlDeviceGetRemappedRows in this library: unsupported, not an error
    assert "remapped_rows" in d0["unsupported"]
    assert "remapped_rows_uncorrectable" not in d0["errors"]
    # no ClocksEventReasons: ClocksThrottleReasons answers instead
    assert d1["samples"][0]["throttle"] == ["idle"]
    # no _v3 process list: _v2 answers instead
    assert d0["processes"] == [{"pid": pids[0], "used_mib": 20 * 1024 + 500}]
    # no memory info v2: v1 answers, and counts the driver's reservation as used
    assert "mem_reserved_mib" not in d0
    assert d0["samples"][0]["mem_used_mib"] == 20 * 1024 + 530 + 614


def test_vanished_pid_is_absent_from_processes(libs, pids):
    out = fake(libs, "vanished-pid", pids[:1])
    d0, d1 = out["gpus"]["devices"]
    # k-th pid on GPU k % 2: own pid on GPU0, the vanished one on GPU1
    assert d0["processes"] == [{"pid": pids[0], "used_mib": 20 * 1024 + 500}]
    assert d1["processes"] == []
    assert d1["pids_not_visible"] == [NO_SUCH_PID]
    assert out["manifest"]["status"] == "ok"


def test_blocked_call_times_out_and_keeps_what_was_gathered(libs, pids):
    out = fake(libs, "block", pids, call_timeout_s=1.0)
    entry, gpus = out["manifest"], out["gpus"]
    assert entry["status"] == "timeout" and gpus["status"] == "timeout"
    assert entry["detail"] == (
        "NVML call nvmlDeviceGetUtilizationRates on GPU 0 did not return within 1.0 s"
    )
    assert "dmesg" in entry["remedy"]
    # run() gave up by itself, well before the 10-minute block ends
    assert not out["run_alive"] and out["wall_s"] < 8
    assert 1.0 <= entry["duration_s"] < 4
    # static info read before the blocked call is kept
    assert gpus["devices"][0]["name"] == "NVIDIA H200"
    assert gpus["devices"][0]["samples"] == []


def test_result_at_probe_deadline_returns_promptly_while_run_is_blocked(libs, pids):
    out = fake(libs, "block", pids, call_timeout_s=60.0, join_s=1.0)
    entry = out["manifest"]
    assert out["run_alive"] and out["result_s"] < 0.5
    assert entry["status"] == "timeout"
    assert entry["detail"].startswith(
        "NVML call nvmlDeviceGetUtilizationRates on GPU 0 had not returned after "
    )
    assert out["gpus"]["devices"][1]["uuid"].endswith("1")
    assert out["wall_s"] < 8


def test_blocked_init_times_out_with_nothing_gathered(libs, pids):
    out = fake(libs, "block-init", pids, call_timeout_s=1.0)
    assert out["gpus"] is None
    assert out["manifest"]["status"] == "timeout"
    assert out["manifest"]["detail"] == "NVML call nvmlInit did not return within 1.0 s"


def test_driver_not_loaded_is_unavailable(libs, pids):
    out = fake(libs, "driver-not-loaded", pids)
    assert out["gpus"] is None
    assert out["manifest"]["status"] == "unavailable"
    assert out["manifest"]["detail"].startswith("no NVIDIA driver loaded")


def test_result_is_safe_while_sampling(libs, pids):
    out = fake(libs, "h200x2-nccl-wait", pids, window_s=0.6, interval_s=0.02, poll=True)
    assert out["polls"] > 10
    assert out["manifest"]["status"] == "ok"
    assert len(out["gpus"]["devices"][0]["samples"]) >= 10


# ---- no driver on this machine -------------------------------------------------------------


def test_no_driver_here_is_unavailable_not_an_error():
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver")
    out = sample(_env())
    assert out["gpus"] is None
    assert out["manifest"]["status"] == "unavailable"
    assert out["manifest"]["detail"] == "no NVIDIA driver (libnvidia-ml.so.1 not found)"
    # told by loading the library the way pynvml would, without importing pynvml (~70 ms)
    assert out["pynvml_imported"] is False


def test_with_a_driver_library_pynvml_is_imported(libs, pids):
    out = fake(libs, "h200x2-nccl-wait", pids)
    assert out["manifest"]["status"] == "ok" and out["pynvml_imported"] is True


def test_ships_as_stdlib_only_source():
    """Executed like the probe bundle does, with no site-packages (so no pynvml): still answers.

    The adapter's modules are executed from their source alone, in PROBE_MODULES order."""
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver")
    names = [n for n in PROBE_MODULES if n.startswith("hangdoctor.collect.nvml")]
    src = json.dumps([(n, (REPO / (n.replace(".", "/") + ".py")).read_text()) for n in names])
    code = (
        "import sys, types, json\n"
        "for pkg in ('hangdoctor', 'hangdoctor.collect'):\n"
        "    p = types.ModuleType(pkg); p.__path__ = []; sys.modules[pkg] = p\n"
        "for name, text in json.loads(sys.stdin.read()):\n"
        "    m = types.ModuleType(name); sys.modules[name] = m\n"
        "    exec(compile(text, '<hangdoctor:' + name + '>', 'exec'), m.__dict__)\n"
        "m = sys.modules['hangdoctor.collect.nvml']\n"
        "s = m.GpuSampler(0.1); s.run(); print(json.dumps(s.result()))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        input=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    gpus, entry = json.loads(proc.stdout)
    assert gpus is None and entry["status"] == "unavailable"


def _python38() -> str | None:
    candidates = [shutil.which("python3.8")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for exe in candidates:
        if (
            exe
            and subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=30).returncode == 0
        ):
            return exe
    return None


def test_runs_on_python38(tmp_path):
    """The probe runs with the target's Python; 3.8 is the oldest we promise."""
    exe = _python38()
    if exe is None:
        pytest.skip("no working python3.8 here")
    body = f"""
case "$*" in
  *--query-compute-apps*) ;;
  *) cat <<'EOF'
{SMI_GPU_ROWS}EOF
  ;;
esac
"""
    # no pynvml for this interpreter: the nvidia-smi path, parsing included, runs on 3.8
    out = sample(_fake_smi(tmp_path, body), python=exe)
    assert out["manifest"]["status"] == "ok", out["manifest"]
    assert out["gpus"]["backend"] == "nvidia-smi"
    assert out["gpus"]["devices"][1]["samples"][0]["throttle"] == ["idle"]


# ---- the nvidia-smi fallback -----------------------------------------------------------------

SMI_GPU_ROWS = (
    "0, GPU-6a0c1f3e-0000-4000-8000-000000000000, NVIDIA H200, 00000000:19:00.0, 580.95.05, "
    "143771, 21010, 100, 0, 119.23, 700.00, 1980, P0, 0x0000000000000000, 0\n"
    "1, GPU-6a0c1f3e-0000-4000-8000-000000000001, NVIDIA H200, 00000000:3B:00.0, 580.95.05, "
    "143771, 21010, 0, 0, 120.41, 700.00, 1980, P0, 0x0000000000000001, [N/A]\n"
)


def _fake_smi(tmp_path: Path, body: str) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return _env(PATH=f"{bindir}:/usr/bin:/bin")


def test_nvidia_smi_fallback_parses_recorded_csv(tmp_path, pids):
    body = f"""
echo "$@" >> {tmp_path}/calls
case "$*" in
  *--query-compute-apps*) echo "{pids[0]}, GPU-6a0c1f3e-0000-4000-8000-000000000000, 20980"
                          echo "{NO_SUCH_PID}, GPU-6a0c1f3e-0000-4000-8000-000000000001, 20980";;
  *clocks_event_reasons*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.'
                          exit 2;;
  *--query-gpu*) cat <<'EOF'
{SMI_GPU_ROWS}EOF
  ;;
esac
"""
    out = sample(_fake_smi(tmp_path, body), window_s=1.0)
    gpus, entry = out["gpus"], out["manifest"]
    assert entry["status"] == "ok", entry
    assert gpus["backend"] == "nvidia-smi" and gpus["driver_version"] == "580.95.05"
    assert "used nvidia-smi" in entry["detail"] and "libnvidia-ml.so.1 not found" in entry["detail"]
    d0, d1 = gpus["devices"]
    assert d0["name"] == "NVIDIA H200" and d0["pci_bus_id"] == "00000000:19:00.0"
    assert d0["mem_total_mib"] == 143771 and d0["power_limit_w"] == 700.0
    assert d0["errors"] == {"ecc_uncorrected_volatile": 0}
    assert "ecc_uncorrected_volatile" in d1["unsupported"]
    assert {"pcie_tx_kbps", "pcie_rx_kbps"} <= set(d0["unsupported"])
    assert len(d0["samples"]) >= 2 and d0["samples"][-1]["t"] >= 1.0
    s0, s1 = d0["samples"][0], d1["samples"][0]
    assert (s0["util_pct"], s0["power_w"], s0["mem_used_mib"], s0["pstate"]) == (
        100,
        119.2,
        21010,
        0,
    )
    assert s0["throttle"] == [] and s1["throttle"] == ["idle"]
    assert d0["processes"] == [{"pid": pids[0], "used_mib": 20980}]
    assert d1["processes"] == [] and d1["pids_not_visible"] == [NO_SUCH_PID]
    # the refused field name is tried once, then the older name is kept for every sample
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sum("clocks_event_reasons" in c for c in calls) == 1


def test_nvidia_smi_that_hangs_times_out_and_is_killed(tmp_path):
    pidfile = tmp_path / "smi.pid"
    body = f"echo $$ > {pidfile}\nexec sleep 30\n"
    out = sample(_fake_smi(tmp_path, body), call_timeout_s=1.0)
    entry = out["manifest"]
    assert entry["status"] == "timeout"
    assert entry["detail"].startswith("nvidia-smi --query-gpu did not return within 1.0 s; ")
    assert "used nvidia-smi: no NVIDIA driver" in entry["detail"]
    assert out["gpus"] is None
    assert out["wall_s"] < 8
    pid = int(pidfile.read_text())
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped, not left behind


def test_nvidia_smi_reports_a_lost_gpu(tmp_path):
    body = f"""
case "$*" in
  *--query-compute-apps*) ;;
  *) echo "{SMI_GPU_ROWS.splitlines()[0]}"
     echo "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"
     exit 15;;
esac
"""
    out = sample(_fake_smi(tmp_path, body))
    entry, devices = out["manifest"], out["gpus"]["devices"]
    assert entry["status"] == "partial"
    assert "GPU is lost" in entry["detail"]
    assert [d["lost"] for d in devices] == [False, True]
    assert devices[1]["pci_bus_id"] == "00000000:3B:00.0"


def test_nvidia_smi_without_driver_is_unavailable(tmp_path):
    body = (
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        'Make sure that the latest NVIDIA driver is installed and running."\nexit 9\n'
    )
    out = sample(_fake_smi(tmp_path, body))
    assert out["gpus"] is None
    assert out["manifest"]["status"] == "unavailable"
    assert out["manifest"]["detail"].startswith("no NVIDIA driver")


# ---- pure helpers ------------------------------------------------------------------------------


def test_throttle_names():
    assert nvml_records.throttle_names(0) == []
    assert nvml_records.throttle_names(0x1) == ["idle"]
    assert nvml_records.throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert nvml_records.throttle_names(0x1 | 0x1000) == ["idle", "0x1000"]


def test_gpu_scenario_script_help_needs_no_torch():
    """tests/gpu/scenarios.py runs on the GPU machine; its launcher must not need torch."""
    script = REPO / "tests" / "gpu" / "scenarios.py"
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "--help"],  # -S: no site-packages, no torch
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("peer-never-joins", "rank-exits", "pipe-deadlock", "kernel-spin", "healthy-busy"):
        assert name in proc.stdout


def test_parameter_names_agree_with_inspect_for_pynvml_wrapped_and_builtin_functions() -> None:
    """The adapter reads whether nvmlDeviceGetMemoryInfo takes `version` from its code object
    (inspect's import costs the probe ~20 ms); it must say what inspect.signature says."""
    import functools
    import inspect

    import pynvml

    from hangdoctor.collect.nvml_pynvml import _parameter_names

    def plain(handle, version=None, *, extra=0):  # noqa: ANN001, ANN202
        return handle

    @functools.wraps(plain)
    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return plain(*args, **kwargs)

    for fn in (pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlDeviceGetCount, plain, wrapped, len):
        assert _parameter_names(fn) == tuple(inspect.signature(fn).parameters), fn
    assert "version" in _parameter_names(pynvml.nvmlDeviceGetMemoryInfo)
    assert _parameter_names(object()) == ()
