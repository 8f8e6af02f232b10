"""The cause catalogue: stable ids (DESIGN.md), titles, and next steps a person can run.

Ids are what scripts and tests match on: add, never rename. ``{pid}``, ``{pids}``, ``{host}``
and ``{port}`` in next steps are filled from the evidence when known.

Layer: knowledge; may import: the standard library, hangdoctor.knowledge and the foundation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    next_steps: tuple[str, ...]
    hang: bool = True  # False: when this cause leads, the server is progressing, not hung


CAUSES: dict[str, Cause] = {
    c.id: c
    for c in [
        Cause("post-load-deadlock", "Deadlock after the weights loaded",
              ("py-spy dump --native --pid {pid}   # on each worker: which handshake does each side wait for?",
               "compare what the launcher/engine waits for with what the workers wait for (pipe, queue, zmq socket)",
               "look for the first message after 'Loading weights took' that never came")),
        Cause("nccl-desync", "Ranks in different or mismatched collectives",
              ("py-spy dump --native --pid {pid}   # on the odd rank(s): why is it outside the collective?",
               "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1  # rerun for the NCCL flight recorder",
               "compare the code paths of the odd rank (different batch size, a skipped collective, an exception swallowed)")),
        Cause("rank-died", "A rank or worker died; the others wait for it",
              ("read the dead worker's own log and exit code",
               "dmesg -T | grep -iE 'killed process|oom|segfault|Xid'",
               "check the job's expected world size against the processes alive")),
        Cause("rendezvous-stall", "Stuck in process-group init / rendezvous",
              ("check that every rank started and has the same MASTER_ADDR / MASTER_PORT / WORLD_SIZE",
               "ss -ltnp | grep {port}   # is the c10d store listening on MASTER_PORT?",
               "TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_CPP_LOG_LEVEL=INFO  # rerun to see who joined")),
        Cause("nccl-transport", "NCCL communicator init or transport setup stuck",
              ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET  # rerun and see where init stops",
               "then try one at a time: NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0, NCCL_IB_DISABLE=1, NCCL_SOCKET_IFNAME=<iface>",
               "in containers: --ipc=host (or a large --shm-size)")),
        Cause("shm-exhausted", "/dev/shm too small or full",
              ("df -h /dev/shm", "docker run --ipc=host (or --shm-size=16g); Kubernetes: an emptyDir with medium: Memory on /dev/shm")),
        Cause("gpu-fault", "GPU fault, driver or NVML not answering",
              ("nvidia-smi -q | less   # ECC, retired pages, clocks, errors",
               "dmesg -T | grep -i xid",
               "drain the node and run dcgmi diag -r 1")),
        Cause("gpu-kernel-spin", "A GPU kernel that never finishes (outside any collective)",
              ("py-spy dump --native --pid {pid}   # which kernel launch preceded the synchronize?",
               "CUDA_LAUNCH_BLOCKING=1  # rerun to stop at the kernel that hangs",
               "compute-sanitizer --tool racecheck python ...  # on a small reproducer")),
        Cause("host-oom-or-swap", "Host memory exhausted or swapping",
              ("free -h; vmstat 1 5", "dmesg -T | grep -i 'killed process'", "lower --max-model-len / --gpu-memory-utilization or add RAM")),
        Cause("gpu-oom", "CUDA out of memory during load or warm-up",
              ("grep -n 'out of memory' LOG", "lower --gpu-memory-utilization, --max-num-seqs or --max-model-len")),
        Cause("cuda-graph-capture", "Stuck or failing during CUDA graph capture",
              ("rerun with --enforce-eager (vLLM) / --disable-cuda-graph (SGLang) to confirm",
               "py-spy dump --native --pid {pid}")),
        Cause("compile-in-progress", "Not hung: compilation is still making progress",
              ("wait, and watch the log and CPU: top -H -p {pid}",
               "next time: warm the compile cache (TORCHINDUCTOR_CACHE_DIR / VLLM_CACHE_ROOT) or --enforce-eager"),
              hang=False),
        Cause("io-stall", "Blocked on disk or network file-system reads",
              ("cat /proc/{pid}/io; sleep 5; cat /proc/{pid}/io   # are read bytes growing?",
               "cat /proc/{pid}/wchan; dmesg -T | grep -i 'blocked for more than'",
               "copy the weights to local NVMe")),
        Cause("lock-contention", "Waiting on a file lock or a lock held elsewhere",
              ("cat /proc/locks; lsof | grep -i lock   # who holds it, and is that holder alive?",
               "remove a stale lock (HF hub *.lock, torch_extensions baton) only after its holder is gone")),
        Cause("frontend-hang", "The API front end does not answer",
              ("curl -m 5 -v http://127.0.0.1:{port}/health",
               "py-spy dump --pid {pid}   # the API server: tokenizer, blocked event loop, lock?")),
        Cause("request-deadlock", "A request or batch wedged the scheduler after serving",
              ("look at the last requests in the log before the silence",
               "disable one at a time: speculative decoding, prefix caching, chunked prefill")),
        Cause("driver-or-runtime-mismatch", "Driver / runtime / NCCL versions known to hang together",
              ("nvidia-smi; python -c 'import torch; print(torch.version.cuda, torch.cuda.nccl.version())'",
               "use a driver that supports the CUDA runtime, or the NCCL version named in the evidence")),
        # added from the field corpus (README "Field accuracy"): mechanisms no id above covers
        Cause("cpu-livelock", "Ranks busy in Python on the CPU while their peers wait in a collective",
              ("py-spy dump --pid {pid}   # twice, a few seconds apart: is the busy rank in the same loop?",
               "py-spy top --pid {pid}   # which Python function burns the CPU",
               "look for per-iteration work on an idle path (sanity checks, cache walks, regexes)")),
        Cause("cuda-interposer-deadlock", "A CUDA API interposer (LD_PRELOAD) deadlocks a CUDA/NCCL call",
              ("cat /proc/{pid}/environ | tr '\\0' '\\n' | grep LD_PRELOAD   # which library intercepts CUDA?",
               "py-spy dump --native --pid {pid}   # frames of the interposer under cuMem*/ncclCommInitRank?",
               "rerun with the interposer disabled (unset LD_PRELOAD; HAMi: CUDA_DISABLE_CONTROL=true)")),
    ]
}


def title(cause_id: str) -> str:
    c = CAUSES.get(cause_id)
    return c.title if c else cause_id
