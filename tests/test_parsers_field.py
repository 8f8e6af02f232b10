"""What people paste into tickets, as they paste it: kinds mixed in one file, shell prompts,
markdown fences, gdb backtraces, stack fragments with the poster's labels, `nvidia-smi topo -m`,
launch commands, `ps` rows grepped without their header, dmesg -H, nvidia-smi errors and ERR!
rows. Samples written here for each shape (not copied from any report)."""

from __future__ import annotations

from hangdoctor.evidence.model import Evidence
from hangdoctor.parsers.assemble import analyze_inputs
from hangdoctor.parsers.detect import detect_kinds, split_segments
from hangdoctor.triage.analyze import analyze

MIXED = """\
Here is what I see on the node (the server stopped answering after ~2 h):

```
$ nvidia-smi topo -m
        GPU0    GPU1    CPU Affinity    NUMA Affinity
GPU0     X      PHB     0-31            0
GPU1    PHB      X      0-31            0
```

```
(venv) me@node3:~$ vllm serve /models/m \\
    --tensor-parallel-size 2 \\
    --max-model-len 8192
```

gdb on the worker:
```
Thread 2 (Thread 0x7f2c0effd640 (LWP 4711) "python3"):
#0  0x00007f2c1a2 in __lll_lock_wait () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007f2c1a3 in __pthread_mutex_lock () from /lib/x86_64-linux-gnu/libc.so.6
#2  0x00007f2c1a4 in app::Cache::Insert(std::string const&, int) () from /opt/app/lib
app.so
#3  0x00007f2c1a5 in app::Worker::Run() () from /opt/app/libapp.so
Thread 1 (Thread 0x7f2c1b000740 (LWP 4700) "python3"):
#0  0x00007f2c1b1 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6
```

$ ps aux | grep ptxas
root      4801 97.0  0.4 912344 101220 ?      R    10:01   0:41 /usr/local/cuda/bin/ptxas -arch=sm_90a kernel.ptx

[  +0.000316] NVRM: Xid (PCI:0000:3b:00): 79, pid=4711, GPU has fallen off the bus.
"""

LABELLED = """\
Thread "SchedulerMain"    (ranks 0-2)
sanity_check (cache/tree.py:88)
on_idle (managers/scheduler.py:140)

Thread "SchedulerMain"    (rank 3)
broadcast (torch/distributed/distributed_c10d.py:2720)
recv_requests (managers/scheduler.py:300)
"""

SMI_ERR = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   31C    P0             62W /  400W |       4MiB /  81920MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  |   00000000:0F:00.0 Off |                 ERR! |
|ERR!  ERR!  ERR!             ERR! / ERR! |       0MiB /  81920MiB |    ERR!      Default |
+-----------------------------------------+------------------------+----------------------+
"""


def test_every_kind_is_recognised_where_it_sits() -> None:
    kinds = detect_kinds(MIXED)
    for k in ("nvidia-smi-topo", "command", "gdb", "ps", "kernel"):
        assert k in kinds, (k, kinds)


def test_gdb_backtrace_becomes_native_stacks_with_wrapped_frames_joined() -> None:
    snap = analyze_inputs([("ticket.md", MIXED)])
    stacks = snap["stacks"]
    [entry] = [v for v in stacks.values() if v["samples"][0]["format"] == "gdb"]
    threads = entry["samples"][0]["threads"]
    assert [t["name"] for t in threads] == ["python3", "python3"]
    names = [f["name"] for f in threads[0]["frames"]]
    assert names == ["__lll_lock_wait", "__pthread_mutex_lock", "app::Cache::Insert", "app::Worker::Run"]
    assert threads[0]["frames"][2]["filename"] == "/opt/app/libapp.so"  # the wrap joined
    assert all(f["native"] for f in threads[0]["frames"])


def test_topology_commands_and_ps_rows_are_kept() -> None:
    snap = analyze_inputs([("ticket.md", MIXED)])
    assert any("PHB" in row for row in snap["topology"]["matrix"])
    [cmd] = snap["commands"]
    assert cmd.startswith("(venv) me@node3:~$ vllm serve /models/m") and "--max-model-len 8192" in cmd
    ptxas = [p for p in snap["processes"] if p["pid"] == 4801]
    assert ptxas and "ptxas" in " ".join(ptxas[0]["cmdline"])
    assert any("NVRM: Xid" in x for x in snap["kernel_log"]["lines"])


def test_prose_is_said_not_dropped() -> None:
    snap = analyze_inputs([("ticket.md", MIXED)])
    notes = [n for n in snap["notes"] if "matched no known kind" in n]
    assert notes and notes[0].startswith("ticket.md: ")


def test_poster_labelled_fragments_are_stacks() -> None:
    snap = analyze_inputs([("pyspy.txt", LABELLED)])
    assert len(snap["stacks"]) == 2
    frames = [[f["name"] for f in v["samples"][0]["threads"][0]["frames"]] for v in snap["stacks"].values()]
    assert ["sanity_check", "on_idle"] in frames and ["broadcast", "recv_requests"] in frames
    assert any("the poster's label for this stack: (rank 3)" in n for n in snap["notes"])


def test_err_rows_count_for_gpu_fault_never_against() -> None:
    snap = analyze_inputs([("smi.txt", SMI_ERR)])
    lost = [d["index"] for d in snap["gpus"]["devices"] if d.get("lost")]
    assert lost == [1]
    a = analyze([snap])
    gh = next(c for c in a["checks"] if c["id"] == "gpu.health")
    assert gh["verdict"] == "fired"
    assert not any(s["cause"] == "gpu-fault" and s["weight"] < 0 for c in a["checks"] for s in c["signals"])
    assert a["causes"][0]["id"] == "gpu-fault"


def test_nvidia_smi_that_blocked_is_a_timeout() -> None:
    text = "nvidia-smi hangs for minutes on this node and then prints nothing\n"
    snap = analyze_inputs([("notes.txt", text)])
    assert {"source": "nvidia-smi", "status": "timeout"}.items() <= snap["manifest"][-1].items()
    text2 = "$ nvidia-smi\nUnable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
    ev = Evidence([analyze_inputs([("smi.txt", text2)])])
    assert ev.manifest_status("nvidia-smi") == "failed"


def test_healthy_table_is_not_a_fault() -> None:
    ok = SMI_ERR.replace("ERR!", "  0 ").replace("|  0   0   0              0  /  0  |", "| N/A   30C    P0   60W /  400W |")
    snap = analyze_inputs([("smi.txt", ok)])
    assert not any(d.get("lost") for d in snap["gpus"]["devices"])
    assert not any(m["source"] == "nvidia-smi" for m in snap["manifest"])


def test_kernel_log_styles() -> None:
    for line in ("[  +0.000316] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                 "[Jan 2 10:00] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE",
                 "Jan  2 10:00:00 gpu-node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79",
                 "gpu-node-3 kern: Out of memory: Killed process 812 (python3)"):
        assert detect_kinds(line + "\n") == ["kernel"], line


PREFIXED = """\
(EngineCore_DP0 pid=812) INFO 05-01 10:00:00 [core.py:100] started
[rank3]: Traceback (most recent call last):
[rank3]:   File "/app/train.py", line 40, in <module>
[rank3]:     main()
[rank3]:   File "/app/train.py", line 33, in main
[rank3]:     dist.all_reduce(t)
[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error
(Worker_TP1 pid=4411) Thread 4411 (idle): "MainThread"
(Worker_TP1 pid=4411)     wait (threading.py:320)
(Worker_TP1 pid=4411)     worker_busy_loop (vllm/v1/executor/multiproc_executor.py:500)
(EngineCore_DP0 pid=812) INFO 05-01 10:00:09 [core.py:200] still waiting
"""


def test_dumps_written_through_per_process_prefixes() -> None:
    assert [x.kind for x in split_segments(PREFIXED)] == ["log", "traceback", "pyspy-text", "log"]
    snap = analyze_inputs([("server.log", PREFIXED)])
    worker = snap["stacks"]["4411"]["samples"][0]["threads"][0]
    assert [f["name"] for f in worker["frames"]] == ["wait", "worker_busy_loop"]
    procs = {p["pid"]: p for p in snap["processes"]}
    assert procs[4411].get("rank") == 1
    # a crash traceback is log evidence (only an interrupt's traceback is a stack), kept as written
    assert not [p for p in snap["processes"] if p.get("rank") == 3]
    assert any(x.startswith("[rank3]: torch.distributed.DistBackendError") for x in snap["log"]["tail"])
