"""Stacks as typed views: threads, frames, what each thread waits on, and signatures.

Frames are innermost first (py-spy order). ``wait_kind`` names what a thread is doing:

========================  =========================================================
``collective:<op>``       inside a torch.distributed collective (all_reduce, barrier, ...)
``cuda-sync``             host thread parked in a CUDA synchronize (NCCL waits look like this)
``nccl-init``             NCCL communicator init (native frames ncclCommInitRank and friends)
``rendezvous``            process-group init / c10d store / store-based barrier
``ipc-wait``              pipe, queue, zmq, socket recv, Event/Condition wait
``child-wait``            a parent blocked on its child process's answer (Triton's Python stub)
``lock``                  file lock, torch extension build baton, a native mutex (glibc, abseil, std)
``io``                    reading weights or files
``compile``               torch.compile / inductor / Triton / JIT build
``graph-capture``         CUDA graph capture / warm-up
``serving-idle``          an event loop or server waiting for connections (normal when idle)
``running``               active on the CPU in other code
``unknown``               parked somewhere not recognised
========================  =========================================================

Layer: evidence; may import: the standard library, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge, hangdoctor.snapshot and the foundation.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

COLLECTIVE_OPS = frozenset(
    {
        "all_reduce", "all_reduce_coalesced", "broadcast", "all_gather",
        "all_gather_into_tensor", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor",
        "_reduce_scatter_base", "barrier", "monitored_barrier", "all_to_all", "all_to_all_single",
        "send", "recv", "isend", "irecv", "gather", "scatter", "reduce", "broadcast_object_list",
        "all_gather_object", "gather_object", "scatter_object_list", "batch_isend_irecv",
        "send_object_list", "recv_object_list",
    }
)
_C10D_FILES = ("distributed_c10d.py", "torch/distributed/", "torch/distributed/_functional_collectives.py",
               "device_communicators/", "parallel_state.py", "communication_op.py")
_RENDEZVOUS_NAMES = re.compile(
    r"^(init_process_group|_new_process_group_helper|_create_c10d_store|_store_based_barrier|"
    r"_rendezvous_helper|_tcp_rendezvous_handler|_env_rendezvous_handler|_file_rendezvous_handler|"
    r"rendezvous|next_rendezvous|_barrier_nonblocking|init_distributed_environment|"
    r"_init_process_group|TCPStore|get_store)$"
)
_NCCL_INIT_NATIVE = re.compile(r"ncclCommInit|ncclCommSplit|bootstrap(Init|AllGather|Recv|Send)|ncclTransportP2pSetup|ncclProxyConnect")
_SYNC_NATIVE = re.compile(r"cuCtxSynchronize|cudaDeviceSynchronize|cudaStreamSynchronize|cuStreamSynchronize|cudaEventSynchronize|cuEventSynchronize")
# a native thread blocked taking a mutex: the lock primitives of the C and C++ runtimes. Sources:
# glibc nptl (pthread_mutex_lock.c: a contended lock waits in __lll_lock_wait, lowlevellock.c;
# pthread_rwlock_{rd,wr}lock.c), abseil (absl/synchronization/mutex.cc: Mutex::Lock ->
# LockSlow -> LockSlowLoop -> Block -> PerThreadSem::Wait), libstdc++ / libc++ (<mutex>:
# std::mutex::lock is pthread_mutex_lock). CPython's PyThread_acquire_lock is left out on
# purpose: threading.Condition.wait parks there too, and the Python frame above says which.
_LOCK_NATIVE = re.compile(
    r"__lll_lock_wait|(?:^|[\s_])_*pthread_mutex_(?:timed|clock)?lock\b|pthread_rwlock_(?:timed|clock)?(?:rd|wr)lock|"
    r"absl::(?:\w+::)*Mutex::(?:Lock|LockSlow\w*|ReaderLock|WriterLock|Block)\b|"
    r"std::(?:__1::)?(?:recursive_|shared_|timed_)?mutex::lock\b")
# a parent waiting for its child process's answer: Triton's Python backend pushes the stub's
# InitializeRequest and blocks in ReceiveMessageFromStub until the stub answers
# (python_backend src/stub_launcher.cc, StubLauncher::ModelInstanceStubProcess)
_CHILD_NATIVE = re.compile(r"StubLauncher::(?:ModelInstanceStubProcess|ReceiveMessageFromStub|Launch)\b|"
                           r"ReceiveMessageFromStub")
_IPC = [
    (re.compile(r"^(_recv|_recv_bytes|recv|recv_bytes|_poll|poll|wait)$"), "multiprocessing/connection.py"),
    (re.compile(r"^(get|_get|put)$"), "queue"),
    (re.compile(r"^(recv|recv_multipart|recv_pyobj|recv_json|recv_string|poll|_wait)$"), "zmq/"),
    (re.compile(r"^(wait|_wait_for_tstate_lock|join)$"), "threading.py"),
    (re.compile(r"^(recv|recv_into|recvfrom|readinto|accept)$"), "socket.py"),
    (re.compile(r"^(wait|_wait|wait_for)$"), "multiprocessing/synchronize.py"),
    (re.compile(r"^(read|readline|_read_status|wait|_wait|_try_wait|communicate|poll)$"), "subprocess.py"),
    (re.compile(r"^(acquire_read|dequeue|wait_until_ready|acquire)$"), "shm_broadcast.py"),
    (re.compile(r"^(join|wait|poll|_wait)$"), "multiprocessing/popen_"),
    (re.compile(r"^(get|wait)$"), "ray/"),
]
_SERVING = [
    (re.compile(r"^(select|poll|_run_once|run_forever|serve_forever|accept|_accept)$"),
     ("selectors.py", "asyncio/", "socketserver.py", "uvloop", "uvicorn", "socket.py")),
]
_LOCK = re.compile(r"filelock|fcntl|file_baton|baton|portalocker|lockfile")
_LOCK_NAMES = re.compile(r"^(acquire|_acquire|flock|lockf|wait|_poll|__enter__)$")
_IO_NAMES = re.compile(r"^(safe_open|load_file|safe_load_file|load|_load|read|readinto|pread|_read_file|get_tensor|get_slice|mmap|copy_)$")
_IO_FILES = ("safetensors", "serialization.py", "weight_utils.py", "model_loader", "_io", "io.py", "hf_hub", "huggingface_hub")
_COMPILE_FILES = ("torch/_inductor/", "torch/_dynamo/", "triton/compiler", "triton/runtime/",
                  "torch/utils/cpp_extension.py", "deep_gemm", "torch/_functorch/", "tilelang",
                  "flashinfer/jit", "compilation/")
_GRAPH_CAPTURE = re.compile(r"capture|CUDAGraph|cuda_graph|graph_capture|capture_model|_capture_graph")
_GRAPH_FILES = ("torch/cuda/graphs.py", "cuda_graph", "graph_runner", "cudagraph")
_SYNC_PY = re.compile(r"^(synchronize|item|cpu|tolist|to|__bool__|__int__|__float__|wait|nonzero|_local_scalar_dense)$")


@dataclass
class Frame:
    name: str
    file: str
    line: int | None
    native: bool = False

    @property
    def bare(self) -> str:
        """The function name without its class (py-spy 0.4 prints ``Connection._recv``)."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def short(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{self.name} ({where})"


@dataclass
class ThreadStack:
    tid: int | None
    name: str
    active: bool
    frames: list[Frame]
    wait_kind: str = "unknown"
    detail: str = ""  # the frame that decided wait_kind

    @property
    def signature(self) -> str:
        return frames_signature(self.frames)

    @property
    def top(self) -> Frame | None:
        for f in self.frames:
            if not f.native:
                return f
        return self.frames[0] if self.frames else None


@dataclass
class ProcStack:
    pid: int
    status: str
    error: str | None
    samples: list[list[ThreadStack]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples)

    @property
    def threads(self) -> list[ThreadStack]:
        return self.samples[0] if self.samples else []

    @property
    def main(self) -> ThreadStack | None:
        return pick_main(self.threads, self.pid)

    @property
    def moved(self) -> bool | None:
        """True when any thread's stack differs between any two samples of the window (the
        probe takes some in between: two that land on the same line are no verdict)."""
        if len(self.samples) < 2:
            return None
        seen: dict[Any, str] = {}
        for sample in self.samples:
            for t in sample:
                if t.tid in seen and seen[t.tid] != t.signature:
                    return True
                seen.setdefault(t.tid, t.signature)
        return False

    def thread_names(self) -> list[str]:
        return [t.name for t in self.threads]


def frames_signature(frames: list[Frame]) -> str:
    key = "|".join(f"{f.name}@{f.file}:{f.line}" for f in frames if not f.native)
    return hashlib.sha1(key.encode("utf-8", "replace")).hexdigest()[:8]


def pick_main(threads: list[ThreadStack], pid: int) -> ThreadStack | None:
    if not threads:
        return None
    for t in threads:
        if t.name == "MainThread":
            return t
    for t in threads:
        if t.tid == pid:
            return t
    # the thread with the deepest Python stack is the one doing the work
    return max(threads, key=lambda t: sum(1 for f in t.frames if not f.native))


def _in(file: str, parts: Any) -> bool:
    if isinstance(parts, str):
        parts = (parts,)
    return any(p in file for p in parts)


def classify(frames: list[Frame], active: bool) -> tuple[str, str]:
    """Return (wait_kind, deciding frame text) for a thread's frames (innermost first)."""
    if not frames:
        return ("running" if active else "unknown"), ""
    # Whole-stack phases first: they explain whatever the innermost frame is.
    for f in frames:
        if f.native and _NCCL_INIT_NATIVE.search(f.name):
            return "nccl-init", f.short
    for f in frames:
        if not f.native and (_RENDEZVOUS_NAMES.match(f.bare) and
                             _in(f.file, ("torch/distributed", "distributed_c10d", "rendezvous", "parallel_state", "elastic"))):
            return "rendezvous", f.short
    for f in frames:
        if not f.native and _in(f.file, _GRAPH_FILES) and _GRAPH_CAPTURE.search(f.bare):
            return "graph-capture", f.short
        if not f.native and f.bare in ("capture_model", "capture", "warmup_model") and "graph" in f.file.lower():
            return "graph-capture", f.short
    inner_py = next((f for f in frames if not f.native), None)
    for i, f in enumerate(frames):
        if not f.native and _in(f.file, _COMPILE_FILES):
            if _runs_compiled(frames[: i + 1]):
                break  # running what torch.compile produced is not compiling
            if (inner_py is not None and "compile_worker" in inner_py.file
                    and _IDLE_POOL.match(inner_py.bare)):
                # inductor's compile-worker pool reading its pipe: waiting for a job, idle
                return "ipc-wait", inner_py.short
            return "compile", f.short
    # Innermost decides the rest.
    for f in frames:
        if f.native:
            if _SYNC_NATIVE.search(f.name):
                return "cuda-sync", f.short
            if _LOCK_NATIVE.search(f.name):
                return "lock", f.short
            if _CHILD_NATIVE.search(f.name):
                return "child-wait", f.short
            continue
        if f.bare in COLLECTIVE_OPS and _in(f.file, _C10D_FILES):
            return "collective:" + f.bare, f.short
        if f.bare in ("wait",) and "distributed_c10d" in f.file:
            return "collective:wait", f.short
        if f.bare == "synchronize" and _in(f.file, ("torch/cuda", "cuda/__init__")):
            return "cuda-sync", f.short
        if _LOCK.search(f.file) and _LOCK_NAMES.match(f.bare):
            return "lock", f.short
        for pat, where in _IPC:
            if pat.match(f.bare) and where in f.file:
                # a subprocess wait under a compile is a compile (caught above); else IPC
                return _idle_in(frames) or ("ipc-wait", f.short)
        for pat, wheres in _SERVING:
            if pat.match(f.bare) and _in(f.file, wheres):
                return "serving-idle", f.short
        if _IO_NAMES.match(f.bare) and _in(f.file, _IO_FILES):
            return "io", f.short
        if f.bare == "sleep" or f.bare == "select" and "select" in f.file:
            return "ipc-wait", f.short
        break
    # a collective further out (e.g. .item() after an all_reduce is inside a helper)
    for f in frames:
        if not f.native and f.bare in COLLECTIVE_OPS and _in(f.file, _C10D_FILES):
            return "collective:" + f.bare, f.short
    inner = next((f for f in frames if not f.native), frames[0])
    if _SYNC_PY.match(inner.bare) and "torch" in inner.file:
        return "cuda-sync", inner.short
    # a lock taken inside a queue's get / put (multiprocessing.Queue's reader lock while another
    # consumer holds it) is the queue's wait, not lock contention
    for f in frames[:5]:
        if not f.native and f.bare in ("get", "put", "get_nowait", "put_nowait") and \
                f.file.endswith(("multiprocessing/queues.py", "queue.py")):
            return _idle_in(frames) or ("ipc-wait", f.short)
    # the libraries' own wait points (knowledge/generated/wait_points.json, read out of their
    # source): the innermost frame that is one names the wait
    found = _generated_wait(frames)
    if found:
        return found
    return ("running" if active else "unknown"), inner.short


# the generated wait classes in this module's words
_GENERATED_KIND = {
    "collective": "collective:wait", "comm-init": "nccl-init", "store": "rendezvous",
    "gpu-sync": "cuda-sync", "kernel": "kernel", "cuda-ipc": "cuda-ipc", "ipc-queue": "ipc-wait",
    "lock": "lock", "file-read": "io", "network": "network", "compile": "compile",
    "graph-capture": "graph-capture", "event-loop": "serving-idle", "idle-wait": "serving-idle",
    "sleep-poll": "ipc-wait", "import": "import",
}


def _named(frames: list[Frame]) -> Iterator[tuple[Frame, dict[str, Any]]]:
    """(frame, entry) for each frame, innermost first, that the libraries' own wait points
    (knowledge/generated/wait_points.json) name; nothing without the tables."""
    try:
        from hangdoctor.knowledge.generated import classify_frame
    except ImportError:  # an install without the generated tables
        return
    for f in frames:
        try:
            hit = classify_frame(f.name if f.native else f.bare, None if f.native else f.file)
        except Exception:  # noqa: BLE001 - a table that cannot answer leaves the frame unknown
            return
        if hit:
            yield f, hit


def _idle_in(frames: list[Frame]) -> tuple[str, str] | None:
    """A queue's, a socket's or a condition's wait that a library's own code calls where it
    idles for work is idle, not IPC: vLLM's EngineCoreProc._process_input_queue waits for
    "requests from the API server", released by a request arriving (wait_points.json)."""
    for f, hit in _named([f for f in frames[:8] if not f.native]):
        if hit.get("wait_class") in ("idle-wait", "event-loop"):
            return "serving-idle", f.short
    return None


def _generated_wait(frames: list[Frame]) -> tuple[str, str] | None:
    for f, hit in _named(frames[:40]):
        if hit.get("wait_class") in _GENERATED_KIND:
            kind = _GENERATED_KIND[hit["wait_class"]]
            if kind == "collective:wait" and not f.native:
                kind = "collective:" + f.bare
            return kind, f.short
    return None


_IDLE_POOL = re.compile(r"^(_recv_msg|recv|_recv|recv_bytes|read|readinto|get|wait|_wait|poll|_read_thread)$")


def _runs_compiled(frames: list[Frame]) -> bool:
    """True when the thread runs torch.compile's output (``CompiledFxGraph.__call__`` in
    ``torch/_inductor/output_code.py``) at or inside these frames. Seen on a real vLLM: a rank
    running its compiled graph was read as compiling and the server called healthy."""
    return any(not f.native and f.bare == "__call__" and f.file.endswith("_inductor/output_code.py")
               for f in frames)


def build_proc_stack(pid: int, entry: dict[str, Any]) -> ProcStack:
    ps = ProcStack(pid=pid, status=str(entry.get("status") or "failed"), error=entry.get("error"))
    for sample in entry.get("samples") or []:
        threads = []
        for t in sample.get("threads") or []:
            frames = []
            for f in t.get("frames") or []:
                if not isinstance(f, dict):
                    continue
                file = str(f.get("short_filename") or f.get("filename") or "")
                line = f.get("line")
                frames.append(Frame(
                    name=str(f.get("name") or "?"),
                    file=file,
                    line=line if isinstance(line, int) else None,
                    native=bool(f.get("native")) or (bool(file) and not file.endswith(".py") and ".py" not in file
                                                     and not f.get("cut")),
                ))
            ts = ThreadStack(
                tid=t.get("os_thread_id") or t.get("thread_id"),
                name=str(t.get("name") or t.get("thread_name") or ""),
                active=bool(t.get("active")),
                frames=frames,
            )
            ts.wait_kind, ts.detail = classify(frames, ts.active)
            if t.get("order") == "as-pasted" and len(frames) > 1:
                # frames pasted without a header may be outermost first: the end that is a
                # known wait point is the innermost one
                if ts.wait_kind in ("running", "unknown"):
                    kind, detail = classify(frames[::-1], ts.active)
                    if kind not in ("running", "unknown"):
                        ts.frames = frames[::-1]
                        ts.wait_kind, ts.detail = kind, detail
                elif ts.detail == frames[-1].short and ts.detail != frames[0].short:
                    ts.frames = frames[::-1]
            threads.append(ts)
        ps.samples.append(threads)
    return ps
