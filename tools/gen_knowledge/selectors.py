"""The curated half: which functions are wait points and which messages mean what.

Meaning is written here by hand; facts (module, function, file, line, the exact format string,
its regex, package and version) are extracted from the source each selector names. A selector
that finds nothing is an error, so a renamed function or a reworded message surfaces on the next
run instead of silently dropping out. Message selectors are tried in order: list the specific
ones (``text=``) before the catch-all of the same file.
"""

from __future__ import annotations

from tools.gen_knowledge.build import Msg, Wait

# (kind, package, version): pip wheels are read without installing; git snapshots come from
# --repo NAME=PATH and are versioned by their commit; stdlib is the running interpreter's.
SOURCES: list[tuple[str, str, str]] = [
    ("pip", "torch", "2.13.0"),  # CPU build: the Python side, libtorch_cpu.so (TCPStore, gloo)
    ("pip", "torch", "2.14.1"),  # CUDA build: libtorch_cuda.so (ProcessGroupNCCL, watchdog)
    ("pip", "nvidia-cuda-runtime-cu12", "12.8.90"),  # cuda.h, cuda_runtime_api.h
    ("pip", "vllm", "0.11.0"),  # first: the version the fixtures and most names come from
    ("pip", "vllm", "0.33.0"),  # the newest: where renamed waits and messages live now
    ("pip", "vllm", "0.6.3.post1"),  # the V0 engine many reports still run
    ("pip", "sglang", "0.5.3"),
    ("pip", "sglang", "0.5.23"),  # the newest: the scheduler split into components
    ("pip", "huggingface_hub", "0.35.3"),
    ("pip", "filelock", "3.20.0"),
    ("pip", "transformers", "4.57.6"),
    ("pip", "tokenizers", "0.22.1"),
    ("pip", "tqdm", "4.67.1"),  # Rust: its messages are strings in the extension module
    ("pip", "triton", "3.9.0"),
    ("pip", "pyzmq", "27.3.0"),
    ("pip", "uvicorn", "0.54.0"),
    ("pip", "ray", "2.60.0"),
    ("git", "nccl", ""),  # HEAD (or --repo nccl=PATH@REV)
    ("git", "nccl", "v2.21.5-1"),  # what torch 2.4-2.6 wheels ship: the lines most reports show
    ("git", "nccl", "v2.18.6-1"),  # torch 2.1-2.3
    ("git", "text-generation-inference", ""),
    ("git", "flashinfer", ""),
    ("git", "ollama", ""),  # HEAD: ollama drives llama-server (llm/llama_server.go)
    ("git", "ollama", "v0.12.11"),  # its own Go runners (llamarunner / ollamarunner): most reports
    ("git", "ollama", "v0.3.14"),  # 2024: the C++ runner (llm/ext_server) and llama.cpp vendored as files
    ("git", "ollama", "v0.1.31"),  # early 2024: the pull's shorter "part %d stalled; retrying"
    ("git", "triton-server", ""),  # NVIDIA Triton Inference Server: the front ends
    ("git", "triton-core", ""),  # the model lifecycle, the server's shutdown wait
    ("git", "triton-python-backend", ""),  # the Python backend and its stub processes
    ("sdist", "llama-cpp-python", "0.3.36"),  # vendors llama.cpp (vendor/llama.cpp): server, src, ggml
    ("sdist", "llama-cpp-python", "0.2.24"),  # Dec 2023: llama.cpp's examples/server/server.cpp of then
    ("git", "deepspeed", ""),
    ("git", "lmdeploy", ""),
    ("stdlib", "cpython", ""),
]

C10D = "torch/distributed/distributed_c10d.py"
SHM = "vllm/distributed/device_communicators/shm_broadcast.py"

# ---------------------------------------------------------------------------- wait points
WAITS: list[Wait] = [
    # torch.distributed: the public collectives wrap ProcessGroup ops in @_exception_logger and
    # block in work.wait() unless async_op (distributed_c10d.py)
    Wait("torch.c10d.collectives", "torch", [C10D], "collective", "serving",
         "every rank of the group to enter the same collective",
         "the last rank's matching call; a dead or diverged rank never releases it",
         decorator=r"_exception_logger", calls=r"(^|\.)wait$", exclude=r"init_process_group"),
    Wait("torch.c10d.object-collectives", "torch", [C10D], "collective", "serving",
         "every rank to exchange the pickled objects (a size collective, then the payload)",
         "the last rank's matching call", decorator=r"_exception_logger",
         name=r"\w+_object(_list)?|broadcast_object_list"),
    Wait("torch.c10d.p2p", "torch", [C10D], "collective", "serving",
         "the peer rank's matching send / recv", "the peer posting its half",
         name=r"isend|irecv|batch_isend_irecv|monitored_barrier"),
    Wait("torch.c10d.init", "torch", [C10D], "store", "rendezvous",
         "all world_size ranks to join the store and the process group",
         "the last rank reaching init; a wrong MASTER_ADDR/PORT or world size never releases it",
         name=r"init_process_group|_new_group_with_tag|new_group|_store_based_barrier|"
              r"new_subgroups\w*|_process_group_name|init_device_mesh"),
    Wait("torch.rendezvous", "torch", ["torch/distributed/rendezvous.py"], "store", "rendezvous",
         "the c10d TCPStore on MASTER_ADDR:MASTER_PORT to accept the connection",
         "the store server (rank 0) listening; the connect timeout",
         name=r"_create_c10d_store|_tcp_rendezvous_handler|_env_rendezvous_handler|rendezvous|"
              r"_file_rendezvous_handler"),
    Wait("torch.elastic.store", "torch", ["torch/distributed/elastic/utils/store.py"], "store",
         "rendezvous", "every agent to check in under the same key prefix",
         "the last agent's set(); a missing agent holds it until the store timeout",
         name=r"get_all|synchronize|barrier|_barrier_nonblocking"),
    Wait("torch.elastic.rendezvous", "torch",
         ["torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"], "store", "rendezvous",
         "min_nodes agents to join the elastic rendezvous", "enough nodes joining, or the join timeout",
         name=r"DynamicRendezvousHandler\.(next_rendezvous|_keep_alive|_close)|"
              r"_DistributedRendezvousOpExecutor\.run|_BackendRendezvousStateHolder\.sync"),
    Wait("torch.elastic.agent", "torch",
         ["torch/distributed/elastic/agent/server/api.py"], "idle-wait", "serving",
         "the worker processes to exit (the agent polls their state)",
         "a worker exiting; a hung worker keeps the agent waiting",
         name=r"SimpleElasticAgent\.(_invoke_run|run|_rendezvous|_exit_barrier)"),
    Wait("torch.mp.spawn", "torch", ["torch/multiprocessing/spawn.py"], "ipc-queue", "any",
         "the spawned children to exit (joined by their sentinels)",
         "every child exiting; one that hangs keeps the parent in join",
         name=r"ProcessContext\.join|ProcessContext\._join_procs_with_timeout|start_processes|spawn"),
    Wait("torch.file-baton", "torch", ["torch/utils/file_baton.py"], "lock", "compile",
         "the lock file of another process building the same extension",
         "that process finishing the build and removing the baton; a stale baton never goes",
         name=r"FileBaton\.wait"),
    Wait("torch.cpp-extension", "torch", ["torch/utils/cpp_extension.py"], "compile", "compile",
         "ninja / the C++ compiler building a JIT extension", "the build finishing",
         name=r"_jit_compile|_run_ninja_build|_write_ninja_file_and_build_library|load|load_inline"),
    Wait("torch.cuda-graph", "torch", ["torch/cuda/graphs.py"], "graph-capture", "graph-capture",
         "the stream capture of a CUDA graph (every kernel launched into it)",
         "capture_end; a collective or a sync inside capture hangs or fails it",
         name=r"CUDAGraph\.(capture_begin|capture_end|replay)|graph\.__enter__|graph\.__exit__|"
              r"make_graphed_callables"),
    Wait("torch.cuda-sync", "torch", ["torch/cuda/__init__.py", "torch/cuda/streams.py"],
         "gpu-sync", "any", "the GPU to finish the work queued on the device / stream / event",
         "the kernels completing; a hung kernel or collective never releases it",
         name=r"synchronize|Stream\.synchronize|Event\.synchronize|Event\.wait|Stream\.wait_event"),
    Wait("torch.inductor.compile", "torch",
         ["torch/_inductor/compile_fx.py", "torch/_inductor/async_compile.py",
          "torch/_inductor/codecache.py"], "compile", "compile",
         "inductor lowering and the Triton / C++ compile workers", "the compile finishing",
         name=r"compile_fx|compile_fx_inner|fx_codegen_and_compile|_compile_fx_inner|"
              r"AsyncCompile\.(wait|triton|cpp|_wait_futures)|PyCodeCache\.load_by_key_path|"
              r"CppCodeCache\.load"),
    Wait("torch.inductor.autotune", "torch",
         ["torch/_inductor/select_algorithm.py", "torch/_inductor/autotune_process.py"],
         "compile", "compile", "benchmarking candidate kernels (max-autotune)",
         "every choice benchmarked", name=r"AlgorithmSelectorCache\.(__call__|benchmark_example_value|"
                                          r"make_benchmark_fn)|benchmark_in_sub_process|"
                                          r"TuningProcess\.(get|recv|wait|process_main)"),
    Wait("torch.inductor.compile-workers", "torch", ["torch/_inductor/compile_worker/subproc_pool.py"],
         "compile", "compile", "the inductor compile sub-process pool's reply (a kernel compiled "
         "in a worker process)", "the worker answering; a dead worker leaves the reader waiting",
         name=r"_recv_msg|SubprocPool\.(_read_thread|submit|wait_until_ready)|SubprocMain\.main"),
    Wait("torch.dynamo", "torch", ["torch/_dynamo/convert_frame.py"], "compile", "compile",
         "Dynamo tracing the frame into an FX graph", "the trace and the backend compile finishing",
         name=r"_compile|compile_inner|ConvertFrameAssert\.__call__|_compile_inner|ConvertFrame\.__call__"),
    # native: TCPStore client and server, ProcessGroupNCCL's waits (libtorch_cpu / libtorch_cuda)
    Wait("torch.native.tcpstore", "torch", ["torch/lib/libtorch_cpu.so"], "store", "rendezvous",
         "a key in the c10d TCPStore (the server on MASTER_ADDR:MASTER_PORT)",
         "another rank setting the key; the store timeout",
         native="dynsym", name=r"c10d::TCPStore::(doWait|doGet|get|wait|add|compareSet|check|"
                               r"multiGet|waitForWorkers|TCPStore)"),
    Wait("torch.native.store-other", "torch", ["torch/lib/libtorch_cpu.so"], "store", "rendezvous",
         "a key in a c10d store", "another rank setting the key; the store timeout",
         native="dynsym", name=r"c10d::(PrefixStore|FileStore|HashStore|Store)::(get|wait|add)"),
    Wait("torch.native.gloo", "torch", ["torch/lib/libtorch_cpu.so"], "collective", "serving",
         "the gloo peers' half of the collective", "every rank joining it; gloo's timeout",
         native="dynsym", name=r"c10d::ProcessGroupGloo::\w*(Work\w*::)?(wait|synchronize|runLoop|"
                               r"AsyncWork::execute)"),
    Wait("torch.native.gloo-lib", "torch", ["torch/lib/libtorch_cpu.so"], "collective", "serving",
         "the peer's bytes on a gloo pair", "the peer sending them; gloo's timeout",
         native="dynsym", name=r"gloo::transport::(tcp::)?(UnboundBuffer|Pair)::(waitRecv|waitSend|"
                               r"recv|send)|gloo::(allreduce|allgather|barrier|broadcast|gather|"
                               r"reduce|scatter|alltoall\w*)"),
    Wait("torch.native.pgnccl-wait", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "collective",
         "serving", "the NCCL kernel of the collective to complete on the GPU",
         "every rank's kernel finishing; the watchdog timeout aborts it",
         native="dynsym", name=r"c10d::ProcessGroupNCCL::(WorkNCCL::)?(wait|synchronize|"
                               r"synchronizeStream|isCompleted|checkTimeout|waitForPendingWorks|"
                               r"barrier)"),
    Wait("torch.native.pgnccl-abort", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "collective",
         "shutdown", "the NCCL communicators to abort / finalize (in-flight kernels must drain)",
         "ncclCommAbort returning; a kernel wedged on a dead peer can hold it",
         native="dynsym", name=r"c10d::ProcessGroupNCCL::(abort|shutdown|abortComms)|"
                               r"c10d::NCCLComm::(abort|finalize|destroy|ncclCommAbort)|"
                               r"c10d::abortCommsFromMap"),
    Wait("torch.native.pgnccl-init", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "comm-init",
         "init", "every rank of the group creating its NCCL communicator",
         "the last rank's ncclCommInitRank; the store exchange of the unique id",
         native="dynsym", name=r"c10d::ProcessGroupNCCL::(getNCCLComm|initNCCLComm|"
                               r"broadcastUniqueNCCLID|eagerConnectSingleDevice)|"
                               r"c10d::NCCLComm::(create|split|\w*[Ii]nit\w*)"),
    Wait("torch.native.pgnccl-watchdog", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"],
         "idle-wait", "any", "work to watch (a background thread, normally idle)",
         "nothing: it polls; it is not the hung thread",
         native="dynsym", name=r"c10d::ProcessGroupNCCL::(Watchdog::run|Watchdog::runLoop|"
                               r"HeartbeatMonitor::runLoop|ncclCommWatchdog|watchdogHandler|"
                               r"heartbeatMonitor)"),
    # CUDA runtime / driver API as printed in native stacks
    Wait("cuda.runtime.sync", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda_runtime_api.h"],
         "gpu-sync", "any", "the GPU to finish queued work", "the kernels completing",
         native="header", name=r"cuda(DeviceSynchronize|StreamSynchronize|EventSynchronize|"
                               r"StreamWaitEvent|Memcpy|MemcpyAsync|Memcpy2D\w*|Memset|Free|FreeHost|"
                               r"StreamQuery|EventQuery)"),
    Wait("cuda.runtime.ipc", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda_runtime_api.h"],
         "cuda-ipc", "any", "the driver mapping another process's GPU memory",
         "the exporter alive and the mapping done; P2P / container isolation can stall it",
         native="header", name=r"cudaIpc\w+"),
    Wait("cuda.runtime.graph", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda_runtime_api.h"],
         "graph-capture", "graph-capture", "a CUDA graph capture or instantiation",
         "capture end / instantiate returning", native="header",
         name=r"cuda(StreamBeginCapture\w*|StreamEndCapture|GraphInstantiate\w*|GraphLaunch|"
              r"StreamIsCapturing|StreamGetCaptureInfo\w*)"),
    Wait("cuda.runtime.init", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda_runtime_api.h"],
         "gpu-sync", "init", "CUDA context creation on the device", "the driver finishing init",
         native="header", name=r"cuda(SetDevice|DeviceReset|Malloc|MallocHost|HostAlloc|HostRegister|"
                               r"DeviceEnablePeerAccess|MallocAsync|GetDeviceCount)"),
    Wait("cuda.driver.sync", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda.h"],
         "gpu-sync", "any", "the GPU to finish queued work", "the kernels completing",
         native="header", name=r"cu(CtxSynchronize|StreamSynchronize|EventSynchronize|StreamWaitEvent|"
                               r"MemcpyDtoH\w*|MemcpyHtoD\w*|MemcpyDtoD\w*|Memcpy|MemcpyAsync|"
                               r"MemFree\w*|StreamQuery|EventQuery|LaunchKernel\w*|ModuleLoad\w*|"
                               r"LibraryLoad\w*|MemMap|MemUnmap|MemSetAccess|MemCreate|MemRelease|"
                               r"MemAddressReserve)"),
    Wait("cuda.driver.ipc", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda.h"],
         "cuda-ipc", "any", "the driver mapping another process's GPU memory",
         "the exporter alive and the mapping done", native="header",
         name=r"cu(Ipc\w+|MemImportFromShareableHandle|MemExportToShareableHandle|"
              r"MemRetainAllocationHandle)"),
    Wait("cuda.driver.init", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda.h"],
         "gpu-sync", "init", "the driver creating a context on the device",
         "init finishing; an interposer or a wedged GPU can hold it",
         native="header", name=r"cu(Init|DevicePrimaryCtxRetain|CtxCreate\w*|DeviceGet|DeviceGetCount|"
                               r"CtxEnablePeerAccess)"),
    Wait("cuda.driver.graph", "nvidia-cuda-runtime-cu12", ["nvidia/cuda_runtime/include/cuda.h"],
         "graph-capture", "graph-capture", "a CUDA graph capture or instantiation",
         "capture end / instantiate returning", native="header",
         name=r"cu(StreamBeginCapture\w*|StreamEndCapture|GraphInstantiate\w*|GraphLaunch)"),
    # NCCL: the public API (src/nccl.h.in); init and the collectives block until all ranks join
    Wait("nccl.init", "nccl", ["src/nccl.h.in"], "comm-init", "init",
         "every rank of the communicator to join (bootstrap over the network, then transports)",
         "the last rank calling it; a missing rank or a blocked transport never releases it",
         native="header", name=r"nccl(CommInitRank\w*|CommInitAll|CommSplit|CommShrink|"
                               r"GetUniqueId|CommRegister|CommWindowRegister)"),
    Wait("nccl.teardown", "nccl", ["src/nccl.h.in"], "collective", "shutdown",
         "the communicator's outstanding operations to finish before it is freed",
         "the kernels completing; ncclCommAbort does not wait", native="header",
         name=r"nccl(CommFinalize|CommDestroy|CommAbort)"),
    Wait("nccl.collectives", "nccl", ["src/nccl.h.in"], "collective", "serving",
         "enqueueing the collective on the stream (blocks on a full queue or a group end)",
         "the enqueue completing; the kernel then waits on the GPU for every rank",
         native="header", name=r"nccl(AllReduce|Broadcast|Bcast|Reduce|AllGather|ReduceScatter|"
                               r"AlltoAll|Send|Recv|GroupEnd|Gather|Scatter)"),
    # CPython stdlib: the waits every server is built from
    Wait("py.mp.connection", "cpython", ["multiprocessing/connection.py"], "ipc-queue", "any",
         "bytes on a pipe / socket from the other process",
         "the peer sending; its death gives EOFError", name=r"(_ConnectionBase|Connection)\.(recv\w*|"
                                                            r"_recv\w*|poll|_poll)|wait|_exhaustive_wait|"
                                                            r"Listener\.accept|SocketListener\.accept|"
                                                            r"deliver_challenge|answer_challenge"),
    Wait("py.mp.queues", "cpython", ["multiprocessing/queues.py"], "ipc-queue", "any",
         "an item from another process", "a producer putting one",
         name=r"(Queue|SimpleQueue|JoinableQueue)\.(get|put|join|_poll|_recv_bytes)"),
    Wait("py.mp.process", "cpython", ["multiprocessing/process.py", "multiprocessing/popen_fork.py"],
         "ipc-queue", "any", "a child process to exit", "the child exiting",
         name=r"BaseProcess\.join|Popen\.wait|Popen\.poll"),
    Wait("py.mp.synchronize", "cpython", ["multiprocessing/synchronize.py"], "lock", "any",
         "a semaphore / lock / event shared with other processes",
         "the holder releasing it; a holder that died keeps it",
         name=r"(SemLock|Lock|RLock|Condition|Event|Barrier)\.(__enter__|acquire|wait\w*)"),
    Wait("py.queue", "cpython", ["queue.py"], "ipc-queue", "any", "an item from another thread",
         "a producer thread putting one", name=r"Queue\.(get|put|join)"),
    Wait("py.threading", "cpython", ["threading.py"], "lock", "any",
         "another thread: a condition, event, or join", "that thread notifying or exiting",
         name=r"Condition\.wait\w*|Event\.wait|Thread\.join|Thread\._wait_for_tstate_lock|"
              r"Semaphore\.acquire|Barrier\.wait"),
    Wait("py.concurrent-future", "cpython", ["concurrent/futures/_base.py"], "ipc-queue", "any",
         "a future's result from a worker thread or process", "the task finishing",
         name=r"Future\.result|Future\.exception|wait|as_completed"),
    Wait("py.concurrent-pool", "cpython", ["concurrent/futures/thread.py"], "idle-wait", "any",
         "a work item (an idle pool thread)", "a task being submitted", name=r"_worker"),
    Wait("py.asyncio.loop", "cpython", ["asyncio/base_events.py", "selectors.py"], "event-loop",
         "serving", "ready I/O or a timer (the event loop idles in select)",
         "a socket becoming ready; a blocking call in a coroutine stops the loop instead",
         name=r"BaseEventLoop\.(run_forever|run_until_complete|_run_once)|"
              r"(EpollSelector|PollSelector|SelectSelector|_PollLikeSelector|KqueueSelector)\.select"),
    # imports: the frames py-spy prints as "(<frozen importlib._bootstrap>)"
    Wait("py.import-lock", "cpython", ["importlib/_bootstrap.py"], "lock", "import",
         "the per-module import lock another thread holds while importing the same module",
         "that thread finishing the import; a deadlock when it waits on this thread",
         name=r"_ModuleLock\.acquire|_ModuleLockManager\.__enter__|_lock_unlock_module"),
    Wait("py.import", "cpython", ["importlib/_bootstrap.py", "importlib/_bootstrap_external.py"],
         "import", "import", "a module's import: its top-level code, or an extension's init "
                             "(dlopen, MPI / CUDA / NCCL set-up at import)",
         "the module finishing its import",
         name=r"_find_and_load(_unlocked)?|_load_unlocked|_call_with_frames_removed|_gcd_import|"
              r"_LoaderBasics\.exec_module|ExtensionFileLoader\.(create_module|exec_module)"),
    Wait("py.asyncio.runner", "cpython", ["asyncio/runners.py"], "event-loop", "serving",
         "the main coroutine (the server runs inside the loop)", "the server exiting",
         name=r"Runner\.run|run"),
    Wait("py.socket", "cpython", ["socket.py", "ssl.py"], "network", "any",
         "bytes from the network peer", "the peer sending or closing",
         name=r"(socket|SocketIO|SSLSocket)\.(accept|readinto|recv\w*|read|create_connection|"
              r"connect)|create_connection"),
    Wait("py.subprocess", "cpython", ["subprocess.py"], "ipc-queue", "any",
         "a child command to exit or write", "the child exiting",
         name=r"Popen\.(wait|_wait|communicate|_communicate)|run|check_output|check_call|call"),
    Wait("py.time-sleep-poll", "cpython", ["selectors.py"], "sleep-poll", "any",
         "a timeout in a polling loop", "the timeout expiring", name=r"_PollLikeSelector\.select"),
    # vLLM 0.11 (V1 engine)
    Wait("vllm.shm-broadcast", "vllm*", [SHM], "ipc-queue", "serving",
         "a shared-memory ring-buffer block: the writer waits for every reader, a reader for the writer",
         "the other side reading / writing; a dead or stuck worker never does",
         name=r"MessageQueue\.(acquire_read|acquire_write|dequeue|enqueue|wait_until_ready|recv|"
              r"broadcast_object)"),
    Wait("vllm.executor-rpc", "vllm*", ["vllm/v1/executor/multiproc_executor.py",
                                        "vllm/executor/multiproc_worker_utils.py"], "ipc-queue",
         "serving", "every worker's reply to a collective RPC (execute_model and friends)",
         "the workers answering; VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS raises TimeoutError",
         name=r"MultiprocExecutor\.(collective_rpc|_wait_for_response|get_response)|"
              r"FutureWrapper\.(result|wait_for_response)|ResultHandler\.run|ResultFuture\.result"),
    Wait("vllm.executor-init", "vllm*", ["vllm/v1/executor/multiproc_executor.py"], "ipc-queue", "init",
         "every worker process to report READY over its pipe (after loading the model)",
         "the workers starting; one that dies or hangs in init never answers",
         name=r"WorkerProc\.wait_for_ready|MultiprocExecutor\._init_executor"),
    Wait("vllm.worker-loop", "vllm*", ["vllm/v1/executor/multiproc_executor.py"], "idle-wait",
         "serving", "the next RPC from the engine over the shared-memory queue",
         "the engine broadcasting work", name=r"WorkerProc\.(worker_busy_loop|worker_main|"
                                              r"async_output_busy_loop)"),
    Wait("vllm.engine-core-loop", "vllm*", ["vllm/v1/engine/core.py"], "idle-wait", "serving",
         "requests from the API server (the input queue)", "a request arriving",
         name=r"EngineCoreProc\.(run_busy_loop|_process_input_queue|process_input_sockets)|"
              r"DPEngineCoreProc\.run_busy_loop"),
    Wait("vllm.engine-core-handshake", "vllm*", ["vllm/v1/engine/core.py", "vllm/v1/engine/utils.py"],
         "ipc-queue", "init", "the engine / front-end start-up handshake over ZMQ",
         "the other side sending READY; a crashed engine never does",
         name=r"EngineCoreProc\.(startup_handshake|_perform_handshakes?|wait_for_init)|"
              r"DPEngineCoreProc\.(_perform_handshakes|wait_for_init)|wait_for_engine_startup"),
    Wait("vllm.core-client", "vllm*", ["vllm/v1/engine/core_client.py"], "ipc-queue", "serving",
         "outputs from the engine core process", "the engine producing a step",
         name=r"\w+Client\.(get_output\w*|call_utility\w*|_call_utility_async)"),
    Wait("vllm.group-coordinator", "vllm*", ["vllm/distributed/parallel_state.py"], "collective",
         "serving", "every rank of the TP / PP / DP group in the same collective",
         "the last rank's matching call", name=r"GroupCoordinator\.(all_reduce|_all_reduce_out_place|"
                                                r"all_gather\w*|reduce_scatter\w*|gather|broadcast\w*|"
                                                r"send\w*|recv\w*|barrier)"),
    Wait("vllm.group-init", "vllm*", ["vllm/distributed/parallel_state.py"], "comm-init", "init",
         "every rank creating the groups (torch.distributed groups, then the device communicators)",
         "the last rank reaching it", name=r"init_distributed_environment|initialize_model_parallel|"
                                           r"ensure_model_parallel_initialized|GroupCoordinator\.__init__|"
                                           r"init_model_parallel_group|init_world_group"),
    Wait("vllm.pynccl", "vllm*", ["vllm/distributed/device_communicators/pynccl.py"], "collective",
         "serving", "vLLM's own NCCL binding: every rank in the same NCCL call",
         "the last rank's matching call", name=r"PyNcclCommunicator\.(all_reduce|all_gather\w*|"
                                                 r"reduce_scatter\w*|send|recv|broadcast|group_end)"),
    Wait("vllm.pynccl-init", "vllm*", ["vllm/distributed/device_communicators/pynccl.py",
                                      "vllm/distributed/device_communicators/pynccl_wrapper.py"],
         "comm-init", "init", "ncclCommInitRank through vLLM's binding (all ranks must join)",
         "the last rank's init", name=r"PyNcclCommunicator\.__init__|NCCLLibrary\.(ncclCommInitRank|"
                                     r"ncclGetUniqueId)"),
    Wait("vllm.custom-allreduce", "vllm*", ["vllm/distributed/device_communicators/custom_all_reduce.py"],
         "collective", "serving", "the peer GPUs' flags in vLLM's custom all-reduce kernel (CUDA IPC buffers)",
         "every rank's kernel writing its flag", name=r"CustomAllreduce\.(all_reduce|custom_all_reduce|"
                                                       r"register_graph_buffers|capture)"),
    Wait("vllm.custom-allreduce-init", "vllm*",
         ["vllm/distributed/device_communicators/custom_all_reduce.py",
          "vllm/distributed/device_communicators/all_reduce_utils.py"], "cuda-ipc", "init",
         "exchanging CUDA IPC handles and testing P2P access between the GPUs",
         "every rank opening the peers' handles", name=r"CustomAllreduce\.(__init__|create_shared_buffer|"
                                                         r"_get_ipc_meta|_gather_ipc_meta)|"
                                                         r"gpu_p2p_access_check|can_actually_p2p"),
    Wait("vllm.weights", "vllm*", ["vllm/model_executor/model_loader/weight_utils.py"], "file-read", "load",
         "weight shards read from disk (safetensors / pt / npcache)", "the iterator finishing the files",
         name=r"\w*weights_iterator|filter_duplicate_safetensors_files"),
    Wait("vllm.weights-download", "vllm*", ["vllm/model_executor/model_loader/weight_utils.py"], "network",
         "load", "the Hub sending the weight files (under a per-model file lock)",
         "the download finishing; a concurrent downloader's lock", name=r"download_weights_from_hf|"
                                                                      r"download_safetensors_index_file_from_hf"),
    Wait("vllm.weights-lock", "vllm*", ["vllm/model_executor/model_loader/weight_utils.py"], "lock", "load",
         "the per-model file lock vLLM takes around downloads", "the other process releasing it",
         name=r"get_lock"),
    Wait("vllm.worker-init", "vllm*", ["vllm/v1/worker/gpu_worker.py"], "comm-init", "init",
         "torch.distributed and the NCCL group of the workers",
         "every worker reaching init", name=r"init_worker_distributed_environment|Worker\.init_device"),
    Wait("vllm.load", "vllm*", ["vllm/v1/worker/gpu_model_runner.py"], "file-read", "load",
         "the weights read from disk / the hub", "the loader finishing",
         name=r"GPUModelRunner\.(load_model|reload_weights)"),
    Wait("vllm.capture", "vllm*", ["vllm/v1/worker/gpu_model_runner.py"], "graph-capture",
         "graph-capture", "CUDA graph capture of every batch size", "the capture loop ending",
         name=r"GPUModelRunner\.(capture_model|_capture_cudagraphs)"),
    Wait("vllm.profile", "vllm*", ["vllm/v1/worker/gpu_model_runner.py", "vllm/v1/worker/gpu_worker.py"],
         "kernel", "warmup", "a dummy forward pass to profile memory or warm up",
         "the pass finishing", name=r"GPUModelRunner\.(profile_run|_dummy_run|_dummy_sampler_run)|"
                                    r"Worker\.(determine_available_memory|compile_or_warm_up_model)"),
    Wait("vllm.compile", "vllm*", ["vllm/compilation/backends.py"], "compile", "compile",
         "vLLM's torch.compile backend compiling the graph pieces", "the compile finishing",
         name=r"VllmBackend\.__call__|CompilerManager\.compile|PiecewiseCompileInterpreter\.\w+"),
    # SGLang 0.5.3
    Wait("sglang.scheduler-loop", "sglang*", ["sglang/srt/managers/scheduler.py"], "idle-wait",
         "serving", "requests from the tokenizer manager (ZMQ) between batches",
         "a request arriving", name=r"Scheduler\.(event_loop_normal|event_loop_overlap|"
                                    r"event_loop_pp\w*|recv_requests)"),
    Wait("sglang.scheduler-batch", "sglang*", ["sglang/srt/managers/scheduler.py"], "kernel",
         "serving", "the forward pass of the current batch", "the batch finishing on the GPU",
         name=r"Scheduler\.(run_batch|process_batch_result|get_next_batch_to_run)"),
    Wait("sglang.watchdog", "sglang*", ["sglang/srt/managers/scheduler.py"], "sleep-poll", "any",
         "the forward counter to move (watchdog thread)", "nothing: it polls and kills on timeout",
         name=r"Scheduler\.watchdog_thread"),
    Wait("sglang.tokenizer-wait", "sglang*", ["sglang/srt/managers/tokenizer_manager.py"],
         "event-loop", "serving", "the detokenized output of a request", "the scheduler producing it",
         name=r"TokenizerManager\.(_wait_one_response|handle_loop|generate_request)"),
    Wait("sglang.detokenizer", "sglang*", ["sglang/srt/managers/detokenizer_manager.py"], "idle-wait",
         "serving", "token ids from the scheduler", "a batch finishing",
         name=r"DetokenizerManager\.event_loop"),
    Wait("sglang.tp-worker", "sglang*", ["sglang/srt/managers/tp_worker.py"], "kernel", "serving",
         "the model forward on the GPU", "the forward finishing",
         name=r"TpModelWorker\.(forward_batch_generation|forward_batch_embedding)"),
    Wait("sglang.load", "sglang*", ["sglang/srt/model_executor/model_runner.py"], "file-read", "load",
         "weights read from disk", "the loader finishing", name=r"ModelRunner\.load_model"),
    Wait("sglang.init-dist", "sglang*", ["sglang/srt/model_executor/model_runner.py"], "comm-init",
         "init", "torch.distributed / NCCL init of the TP group", "every rank reaching init",
         name=r"ModelRunner\.init_torch_distributed"),
    Wait("sglang.group-coordinator", "sglang*", ["sglang/srt/distributed/parallel_state.py"],
         "collective", "serving", "every rank of the TP group in the same collective",
         "the last rank's matching call", name=r"GroupCoordinator\.(all_reduce|_all_reduce_\w+|"
                                                r"all_gather\w*|reduce_scatter\w*|gather|broadcast\w*|"
                                                r"send\w*|recv\w*|barrier)"),
    Wait("sglang.group-init", "sglang*", ["sglang/srt/distributed/parallel_state.py"], "comm-init", "init",
         "every rank creating the parallel groups", "the last rank reaching it",
         name=r"init_distributed_environment|initialize_model_parallel|GroupCoordinator\.__init__|"
              r"init_model_parallel_group|init_world_group"),
    Wait("sglang.capture", "sglang*", ["sglang/srt/model_executor/cuda_graph_runner.py"],
         "graph-capture", "graph-capture", "CUDA graph capture", "the capture loop ending",
         name=r"CudaGraphRunner\.(capture|capture_one_batch_size|__init__)"),
    # hub, filelock, tokenizers, triton, zmq, uvicorn, ray
    Wait("hub.download", "huggingface_hub", ["huggingface_hub/file_download.py"], "network", "load",
         "the Hub (or a mirror) to send file bytes", "the transfer finishing; HF_HUB_OFFLINE avoids it",
         name=r"hf_hub_download|http_get|_download_to_tmp_and_move|_hf_hub_download_to_cache_dir|"
              r"_hf_hub_download_to_local_dir|get_hf_file_metadata|_get_metadata_or_catch_error"),
    Wait("hub.snapshot", "huggingface_hub", ["huggingface_hub/_snapshot_download.py"], "network",
         "load", "every file of the repository", "the downloads finishing", name=r"snapshot_download"),
    Wait("hub.lock", "huggingface_hub", ["huggingface_hub/utils/_fixes.py"], "lock", "load",
         "the .lock file of a concurrent download of the same blob",
         "the other downloader finishing; a stale lock on a shared FS may never go",
         name=r"WeakFileLock"),
    Wait("filelock.acquire", "filelock", ["filelock/_api.py"], "lock", "any",
         "a file lock held by another process (polled with sleep)",
         "the holder releasing it; NFS / stale locks can hold forever",
         name=r"BaseFileLock\.(acquire|__enter__)"),
    Wait("filelock.unix", "filelock", ["filelock/_unix.py", "filelock/_soft.py"], "lock", "any",
         "flock() on the lock file", "the holder releasing it", name=r"\w+FileLock\._acquire"),
    Wait("transformers.tokenizer", "transformers",
         ["transformers/tokenization_utils_base.py", "transformers/tokenization_utils_fast.py"],
         "event-loop", "serving", "CPU tokenization (blocks the event loop when called from a coroutine)",
         "the encode finishing", name=r"PreTrainedTokenizer\w*\.(__call__|encode|encode_plus|"
                                      r"batch_encode_plus|_batch_encode_plus|_encode_plus|"
                                      r"apply_chat_template|decode|batch_decode|_decode)"),
    Wait("transformers.from-pretrained", "transformers",
         ["transformers/modeling_utils.py", "transformers/tokenization_utils_base.py",
          "transformers/utils/hub.py"], "file-read", "load",
         "weights / tokenizer files read (or downloaded)", "the load finishing",
         name=r"PreTrainedModel\.from_pretrained|PreTrainedTokenizerBase\.from_pretrained|"
              r"cached_files?|load_state_dict"),
    Wait("triton.compile", "triton", ["triton/compiler/compiler.py"], "compile", "compile",
         "the Triton compiler (and ptxas) building a kernel", "the compile finishing",
         name=r"compile|CompiledKernel\._init_handles|ASTSource\.make_ir"),
    Wait("triton.autotune", "triton", ["triton/runtime/autotuner.py"], "compile", "compile",
         "benchmarking every config of an autotuned kernel", "every config timed",
         name=r"Autotuner\.(run|_bench|prune_configs|check_disk_cache|benchmark)"),
    Wait("triton.jit", "triton", ["triton/runtime/jit.py"], "compile", "compile",
         "the first call of a @triton.jit kernel compiling it", "the compile finishing",
         name=r"JITFunction\.(run|_do_compile|create_binder)"),
    Wait("triton.cache-lock", "triton", ["triton/runtime/cache.py"], "file-read", "compile",
         "the kernel cache directory", "the file being written",
         name=r"FileCacheManager\.(get_file|put|get_group|put_group)"),
    Wait("zmq.recv", "pyzmq", ["zmq/sugar/socket.py"], "ipc-queue", "any",
         "a message on a ZMQ socket from another process", "the peer sending; a dead peer never does",
         name=r"Socket\.(recv_multipart|recv_pyobj|recv_json|recv_string|recv_serialized|"
              r"send_multipart|send_pyobj|send_json|send_string)"),
    Wait("zmq.poll", "pyzmq", ["zmq/sugar/poll.py"], "ipc-queue", "any",
         "readiness on ZMQ sockets", "a peer sending", name=r"Poller\.poll|select"),
    Wait("zmq.asyncio", "pyzmq", ["zmq/_future.py"], "event-loop", "serving",
         "a ZMQ message awaited in the event loop", "the peer sending",
         name=r"_AsyncSocket\.(recv\w*|poll|_add_recv_event)"),
    Wait("uvicorn.serve", "uvicorn", ["uvicorn/server.py"], "event-loop", "serving",
         "HTTP connections (the server's main loop)", "a request arriving",
         name=r"Server\.(serve|_serve|main_loop|on_tick|startup|shutdown)"),
    Wait("flashinfer.jit-build", "flashinfer", ["flashinfer/jit/core.py", "flashinfer/jit/cpp_ext.py"],
         "compile", "compile", "ninja / nvcc building a FlashInfer kernel module on first use",
         "the build finishing (minutes per module on a cold cache)",
         name=r"JitSpec\.(build|build_and_load|load)|run_ninja|build_jit_specs"),
    Wait("tgi.dist", "text-generation-inference", ["server/text_generation_server/utils/dist.py"],
         "comm-init", "init", "torch.distributed / NCCL init of the TGI shards", "every shard reaching init",
         name=r"initialize_torch_distributed", root="server/"),
    Wait("tgi.hub", "text-generation-inference", ["server/text_generation_server/utils/hub.py"], "network",
         "load", "the Hub sending weight files", "the download finishing",
         name=r"download_weights|weight_files|weight_hub_files", root="server/"),
    Wait("tgi.serve", "text-generation-inference", ["server/text_generation_server/server.py"], "event-loop",
         "serving", "gRPC requests from the router", "a request arriving", name=r"serve|serve_inner",
         root="server/"),
    Wait("deepspeed.comm", "deepspeed", ["deepspeed/comm/comm.py"], "collective", "serving",
         "every rank in the same collective (DeepSpeed's wrapper over torch.distributed)",
         "the last rank's matching call", decorator=r"timed_op"),
    Wait("deepspeed.init", "deepspeed", ["deepspeed/comm/comm.py"], "comm-init", "init",
         "torch.distributed init for DeepSpeed (all ranks must join)", "the last rank's init",
         name=r"init_distributed|init_deepspeed_backend"),
    # pattern selectors, last: whatever the specific ones above did not name. A function whose
    # body sleeps in a loop is, when sampled idle, polling; one that calls a ZMQ recv is, when
    # innermost (the Cython recv leaves no Python frame), waiting for a peer's message.
    Wait("vllm.zmq-recv", "vllm*", ["vllm/v1/**/*.py", "vllm/entrypoints/**/*.py",
                                   "vllm/distributed/**/*.py"], "ipc-queue", "any",
         "a ZMQ message from another vLLM process", "the peer sending; a dead peer never does",
         calls=r"(sock|socket|_socket|output_socket|input_socket)\w*\.recv(_multipart|_pyobj)?$|"
               r"\.recv_multipart$|\.recv_pyobj$"),
    Wait("sglang.zmq-recv", "sglang*", ["sglang/srt/**/*.py"], "ipc-queue", "any",
         "a ZMQ message from another SGLang process", "the peer sending",
         calls=r"\.recv(_multipart|_pyobj)$"),
    Wait("vllm.sleep-poll", "vllm*", ["vllm/v1/**/*.py", "vllm/distributed/**/*.py",
                                     "vllm/executor/**/*.py", "vllm/entrypoints/**/*.py"],
         "sleep-poll", "any", "a condition it polls with time.sleep", "the condition becoming true",
         calls=r"^time\.sleep$"),
    Wait("sglang.sleep-poll", "sglang*", ["sglang/srt/**/*.py"], "sleep-poll", "any",
         "a condition it polls with time.sleep", "the condition becoming true", calls=r"^time\.sleep$"),
    Wait("torch.dist-sleep-poll", "torch", ["torch/distributed/**/*.py"], "sleep-poll", "any",
         "a condition it polls with time.sleep (agents, rendezvous, monitors)",
         "the condition becoming true", calls=r"^time\.sleep$"),
    Wait("vllm.cuda-sync", "vllm", ["vllm/v1/**/*.py", "vllm/distributed/**/*.py"], "gpu-sync", "any",
         "the GPU finishing queued work (an explicit synchronize)", "the kernels completing",
         calls=r"^torch\.cuda\.synchronize$|^current_platform\.synchronize$|\.synchronize$"),
    Wait("sglang.cuda-sync", "sglang", ["sglang/srt/managers/**/*.py", "sglang/srt/model_executor/**/*.py",
                                        "sglang/srt/distributed/**/*.py"], "gpu-sync", "any",
         "the GPU finishing queued work (an explicit synchronize)", "the kernels completing",
         calls=r"^torch\.cuda\.synchronize$|\.synchronize$"),
    Wait("ray.worker-loop", "ray", ["ray/_private/worker.py"], "idle-wait", "serving",
         "tasks for this Ray worker process", "a task being scheduled on it", name=r"Worker\.main_loop"),
    Wait("tqdm.monitor", "tqdm", ["tqdm/_monitor.py"], "idle-wait", "any",
         "the progress-bar monitor thread's next check (a background thread, never the hang)",
         "its timer", name=r"TMonitor\.run"),
    Wait("deepspeed.op-builder", "deepspeed", ["op_builder/builder.py"], "compile", "compile",
         "torch.utils.cpp_extension building a DeepSpeed op on first use (ninja, nvcc)",
         "the build finishing; another process's build lock", name=r"OpBuilder\.(jit_load|load|builder)|"
                                                                  r"CUDAOpBuilder\.(jit_load|load|builder)",
         root="op_builder/=deepspeed/ops/op_builder/"),
    Wait("lmdeploy.executor-rpc", "lmdeploy", ["lmdeploy/pytorch/engine/executor/*.py"], "ipc-queue",
         "serving", "the workers' replies to an executor call", "every worker answering",
         name=r"\w+Executor\.(collective_rpc\w*|_collective_rpc\w*|wait\w*|_wait\w*|forward_async|"
              r"get_output_async)"),
    Wait("lmdeploy.sleep-poll", "lmdeploy", ["lmdeploy/**/*.py"], "sleep-poll", "any",
         "a condition it polls with time.sleep", "the condition becoming true", calls=r"^time\.sleep$"),
    Wait("ray.get", "ray", ["ray/_private/worker.py"], "network", "any",
         "a Ray object: a remote task or actor result", "the task finishing; a dead node never returns it",
         name=r"get|wait|get_actor"),
]

MESSAGES: list[Msg] = []  # filled below, by package

# ---------------------------------------------------------------------------- messages
# cause weights: a mechanism names what went wrong (<= 0.5); a symptom only says someone waits
# (<= 0.2); progress and state lines carry no cause.
NCCL_MACROS = {"WARN": ("warning", 0), "INFO": ("info", 1)}
_RANK_GONE = [("rank-died", 0.2), ("nccl-desync", 0.15), ("gpu-kernel-spin", 0.1)]

MESSAGES += [
    # ---- torch Python
    Msg("torch.c10d.store-barrier", "torch", [C10D], "store-barrier-wait", "symptom", "rendezvous",
        "A store-based barrier is still waiting for ranks to check in.",
        [("rendezvous-stall", 0.2), ("rank-died", 0.1)], text=r"[Ww]aiting in store based barrier|"
                                                              r"store based barrier|Timed out initializing"),
    Msg("torch.c10d.errors", "torch", [C10D], "c10d-usage-error", "state", "any",
        "torch.distributed refused a call (a usage or state error, raised before any wait).",
        via="raise", levels=("error",),
        text=r"not been initialized|[Tt]imeout|[Ss]tore|MASTER_|world_size|[Bb]ackend|rank"),
    Msg("torch.c10d.logs", "torch", [C10D], "c10d-log", "state", "any",
        "torch.distributed reports its state.", via="log"),
    Msg("torch.rendezvous", "torch", ["torch/distributed/rendezvous.py"], "rendezvous-error",
        "mechanism", "rendezvous", "The env / tcp rendezvous is misconfigured (a missing variable or URL part).",
        [("rendezvous-stall", 0.4)]),
    Msg("torch.elastic.store", "torch", ["torch/distributed/elastic/utils/store.py"],
        "store-barrier-wait", "mechanism", "rendezvous",
        "The elastic store barrier timed out; the message names the ranks that never arrived.",
        [("rendezvous-stall", 0.3), ("rank-died", 0.3)]),
    Msg("torch.elastic.rdzv", "torch", ["torch/distributed/elastic/rendezvous/dynamic_rendezvous.py",
                                         "torch/distributed/elastic/rendezvous/api.py",
                                         "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"],
        "elastic-rendezvous", "progress", "rendezvous",
        "The elastic rendezvous reports a join, a round or a closed rendezvous."),
    Msg("torch.elastic.agent", "torch", ["torch/distributed/elastic/agent/server/api.py",
                                          "torch/distributed/elastic/agent/server/local_elastic_agent.py"],
        "elastic-agent", "state", "any",
        "torchrun's agent reports the workers' state (started, failed, restarted, stopped)."),
    Msg("torch.elastic.failed", "torch", ["torch/distributed/elastic/multiprocessing/api.py",
                                           "torch/distributed/elastic/multiprocessing/errors/__init__.py"],
        "worker-failed", "mechanism", "any",
        "torchrun saw a worker process exit or fail; the survivors are left waiting.",
        [("rank-died", 0.45)], text=r"[Ff]ail|exit|[Ss]ignal|[Tt]erminat"),
    Msg("torch.mp.spawn", "torch", ["torch/multiprocessing/spawn.py"], "worker-failed", "mechanism",
        "any", "A process started by torch.multiprocessing exited with an error or a signal.",
        [("rank-died", 0.45)], via="raise"),
    Msg("torch.file-baton", "torch", ["torch/utils/file_baton.py"], "file-baton-wait", "symptom",
        "compile", "Another process holds the extension build lock; this one polls for it.",
        [("lock-contention", 0.2)]),
    Msg("torch.cpp-extension", "torch", ["torch/utils/cpp_extension.py"], "extension-build", "state",
        "compile", "torch.utils.cpp_extension reports building or loading a JIT extension.",
        [("compile-in-progress", 0.05)], levels=("info", "warning", "debug")),
    Msg("torch.cuda-graph", "torch", ["torch/cuda/graphs.py"], "cuda-graph", "mechanism",
        "graph-capture", "CUDA graph capture was misused or failed.", [("cuda-graph-capture", 0.35)]),
    Msg("torch.cuda.init", "torch", ["torch/cuda/__init__.py"], "cuda-init", "mechanism", "init",
        "CUDA could not initialise or is misconfigured in this process.",
        [("driver-or-runtime-mismatch", 0.3), ("gpu-fault", 0.15)],
        text=r"CUDA|driver|initiali[sz]|fork"),
    # ---- torch C++ (strings in the shared objects: c10::str fragments and fmt templates)
    Msg("torch.nccl.watchdog-timeout", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"],
        "nccl-watchdog-timeout", "symptom", "serving",
        "ProcessGroupNCCL's watchdog saw a collective exceed its timeout: some rank never joined it.",
        _RANK_GONE, lang="strings",
        text=r"^(Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|"
             r" timed out in blocking wait|Timeout watchdog caught|, last completed NCCL work: |"
             r"Last enqueued NCCL work: | PG status: last enqueued work: | ran for $|"
             r" failure detected by watchdog at work sequence id)"),
    Msg("torch.nccl.heartbeat", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"],
        "nccl-heartbeat-timeout", "symptom", "any",
        "The heartbeat monitor found the NCCL watchdog thread itself stuck (often in a CUDA call).",
        [("gpu-fault", 0.15), ("cuda-interposer-deadlock", 0.1), ("gpu-kernel-spin", 0.1)],
        lang="strings", text=r"^(Heartbeat monitor timed out|ProcessGroupNCCL's watchdog got stuck for|you can either increase the timeout "
                             r"\(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC\)| seconds because we want to wait longer "
                             r"to verify there is indeed a watchdog hang|Received a dump signal due to a "
                             r"collective timeout from )"),
    Msg("torch.nccl.desync", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "nccl-desync-report",
        "mechanism", "serving",
        "TORCH_NCCL_DESYNC_DEBUG names the lagging, dead or mismatched ranks behind a timeout.",
        [("nccl-desync", 0.4), ("rank-died", 0.2)], lang="strings",
        text=r"lagging/dead/mismatched ranks|TORCH_NCCL_DESYNC_DEBUG report|"
             r"(is|are) (not )?(joined|running) the collective|Collective sequence number: "),
    Msg("torch.nccl.abort", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "nccl-comm-aborted",
        "state", "any", "A NCCL communicator was aborted after an error or a timeout.",
        [("rank-died", 0.1)], lang="strings",
        text=r"^(NCCL communicator was aborted|Aborting ncclComm_|Aborting process on rank |"
             r"Process group watchdog thread terminated with exception|Launching ProcessGroupNCCL abort)"),
    Msg("torch.nccl.errors", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "nccl-error",
        "mechanism", "any", "NCCL returned an error to ProcessGroupNCCL (its text says which kind).",
        [("nccl-transport", 0.3), ("rank-died", 0.2)], lang="strings",
        text=r"^(ncclRemoteError: |ncclSystemError: |ncclInternalError: |NCCL error in: |"
             r"NCCL error: |Unknown NCCL error)"),
    Msg("torch.nccl.flight-recorder", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"],
        "flight-recorder-dump", "state", "any", "The NCCL flight recorder dumped its trace after a timeout.",
        lang="strings", text=r"^(Flight Recorder trace successfully dumped|Finished flight recorder|"
                             r"Dumping nccl comm trace, reason: )"),
    Msg("torch.cuda.error", "torch==2.14.1", ["torch/lib/libtorch_cuda.so"], "cuda-error", "mechanism",
        "any", "A CUDA call failed inside a torch operator or the NCCL process group.",
        [("gpu-fault", 0.3)], lang="strings", text=r"^(CUDA error: |CUDA error \(%s:%d\)|"
                                                   r"CUDA error during (start|end) event query)"),
    Msg("torch.cuda.oom", "torch==2.14.1", ["torch/lib/libc10_cuda.so"], "cuda-oom", "mechanism", "any",
        "The CUDA caching allocator could not allocate: the GPU is out of memory.",
        [("gpu-oom", 0.5)], lang="strings", text=r"^CUDA out of memory\."),
    Msg("torch.tcpstore.timeout", "torch", ["torch/lib/libtorch_cpu.so"], "store-timeout", "mechanism",
        "rendezvous", "A c10d TCPStore wait or connect timed out: a rank never set the key, or the "
        "store is unreachable.", [("rendezvous-stall", 0.4), ("rank-died", 0.15)], lang="strings",
        text=r"^(Socket Timeout$|The client socket has timed out after|Timed out after \{\} seconds "
             r"waiting for clients|Timeout waiting for key: |wait timeout after \{\}ms, keys|"
             r"TCP client failed to connect/validate to host)"),
    Msg("torch.tcpstore.connect", "torch", ["torch/lib/libtorch_cpu.so"], "store-connect-failed",
        "mechanism", "rendezvous", "A rank could not connect to the c10d TCPStore: wrong MASTER_ADDR / "
        "port, a firewall, or the store host not up.", [("rendezvous-stall", 0.45)], lang="strings",
        text=r"^The client socket has failed to connect to"),
    Msg("torch.tcpstore.closed", "torch", ["torch/lib/libtorch_cpu.so"], "store-connection-lost",
        "mechanism", "any", "The TCPStore peer closed the connection: the store host (rank 0) exited.",
        [("rank-died", 0.4)], lang="strings",
        text=r"^(Failed to recv, got 0 bytes\. Connection was likely closed|connection reset by peer$|"
             r"broken pipe$)"),
    Msg("torch.tcpstore.listen", "torch", ["torch/lib/libtorch_cpu.so"], "store-bind-failed",
        "mechanism", "rendezvous", "The TCPStore server could not bind or listen (port in use?).",
        [("rendezvous-stall", 0.4)], lang="strings",
        text=r"^(The server socket has failed to (listen|bind)|address already in use$|"
             r"The server socket on \{\} has failed to bind)"),
    Msg("torch.gloo", "torch", ["torch/lib/libtorch_cpu.so"], "gloo-error", "mechanism", "any",
        "A gloo transport operation failed or timed out.", [("rank-died", 0.25), ("nccl-transport", 0.1)],
        lang="strings", text=r"^(Gloo connectFullMesh failed with |Timed out waiting $|"
                             r"\[\w+/\w+\.cc:\d+\] Timed out|Connection closed by peer)"),
]

CUDART = ["nvidia/cuda_runtime/lib/libcudart.so.12"]
MESSAGES += [
    # ---- the CUDA runtime's error strings (cudaGetErrorString), as they end "CUDA error: ..."
    Msg("cuda.fault", "nvidia-cuda-runtime-cu12", CUDART, "cuda-error-fault", "mechanism", "any",
        "A kernel faulted (illegal address or instruction, ECC): the context is dead; every later "
        "CUDA call fails and peers waiting on this rank hang.", [("gpu-fault", 0.4), ("rank-died", 0.1)],
        lang="strings", text=r"^(an illegal memory access was encountered|an illegal instruction was "
                             r"encountered|uncorrectable ECC error encountered|unspecified launch failure|"
                             r"misaligned address|hardware stack error)$"),
    Msg("cuda.timeout", "nvidia-cuda-runtime-cu12", CUDART, "cuda-error-launch-timeout", "mechanism",
        "any", "A kernel ran past the driver's watchdog and was killed.",
        [("gpu-kernel-spin", 0.4)], lang="strings", text=r"^the launch timed out and was terminated$"),
    Msg("cuda.oom", "nvidia-cuda-runtime-cu12", CUDART, "cuda-oom", "mechanism", "any",
        "A CUDA allocation failed: the GPU is out of memory.", [("gpu-oom", 0.4)], lang="strings",
        text=r"^out of memory$"),
    Msg("cuda.driver-mismatch", "nvidia-cuda-runtime-cu12", CUDART, "cuda-driver-mismatch", "mechanism",
        "init", "The installed driver is too old for this CUDA runtime.",
        [("driver-or-runtime-mismatch", 0.5)], lang="strings",
        text=r"^(CUDA driver version is insufficient for CUDA runtime version|forward compatibility was "
             r"attempted on non supported HW|system has unsupported display driver / cuda driver combination)$"),
    Msg("cuda.peer", "nvidia-cuda-runtime-cu12", CUDART, "cuda-peer-access", "mechanism", "init",
        "P2P access between two GPUs is not available (topology, IOMMU, or a container / VM).",
        [("nccl-transport", 0.25)], lang="strings",
        text=r"^peer access is not supported between these two devices$"),
]

MESSAGES += [
    # ---- NCCL (source): WARN lines are its errors; INFO lines its progress in init
    Msg("nccl.socket", "nccl*", ["src/misc/socket.cc", "src/include/socket.h"], "nccl-socket", "mechanism", "init",
        "NCCL's bootstrap / socket layer failed to connect, accept or transfer.",
        [("nccl-transport", 0.4), ("rank-died", 0.15)], lang="c", macros=NCCL_MACROS,
        levels=("warning",)),
    Msg("nccl.bootstrap", "nccl*", ["src/bootstrap.cc"], "nccl-bootstrap", "mechanism", "init",
        "NCCL's bootstrap (the rank exchange over TCP) failed or timed out.",
        [("nccl-transport", 0.4), ("rendezvous-stall", 0.2)], lang="c", macros=NCCL_MACROS,
        levels=("warning",)),
    Msg("nccl.ib", "nccl*", ["src/transport/net_ib*.cc", "src/transport/net_ib/*.cc",
                            "src/transport/net_socket.cc", "src/transport/net.cc"],
        "nccl-net", "mechanism", "any", "NCCL's network transport (IB / RoCE / sockets) reported an error.",
        [("nccl-transport", 0.45)], lang="c", macros=NCCL_MACROS, levels=("warning",)),
    Msg("nccl.p2p-shm", "nccl*", ["src/transport/p2p.cc", "src/transport/shm.cc", "src/misc/shmutils.cc",
                                  "src/include/shm.h"],
        "nccl-p2p-shm", "mechanism", "init",
        "NCCL's P2P / shared-memory transport failed (CUDA IPC, /dev/shm, container isolation).",
        [("nccl-transport", 0.35), ("shm-exhausted", 0.3)], lang="c", macros=NCCL_MACROS,
        levels=("warning",)),
    Msg("nccl.proxy", "nccl*", ["src/proxy.cc"], "nccl-proxy", "mechanism", "any",
        "NCCL's proxy thread failed (often a peer process gone).",
        [("rank-died", 0.3), ("nccl-transport", 0.2)], lang="c", macros=NCCL_MACROS, levels=("warning",)),
    Msg("nccl.cuda", "nccl*", ["src/misc/cudawrap.cc", "src/include/checks.h", "src/enqueue.cc",
                              "src/init.cc"], "nccl-cuda", "mechanism", "any",
        "A CUDA call inside NCCL failed.", [("gpu-fault", 0.3), ("driver-or-runtime-mismatch", 0.15)],
        lang="c", macros=NCCL_MACROS, levels=("warning",), text=r"[Cc]uda|CUDA|cu\w+ failed|driver"),
    Msg("nccl.syscall", "nccl*", ["src/include/checks.h", "src/include/shm.h", "src/misc/shmutils.cc"], "nccl-system-call-failed", "mechanism", "any",
        "A system or verbs call inside NCCL failed (socket, shm, ibv_*): the transport is broken.",
        [("nccl-transport", 0.35)], lang="c", macros=NCCL_MACROS, levels=("warning",),
        text=r"^Call to ", min_literal=6),  # "Call to %s failed: %s": the regex is specific
    Msg("nccl.init-warn", "nccl*", ["src/init.cc", "src/transport.cc", "src/graph/*.cc"], "nccl-init-error",
        "mechanism", "init", "NCCL communicator init or topology detection failed.",
        [("nccl-transport", 0.35)], lang="c", macros=NCCL_MACROS, levels=("warning",)),
    Msg("nccl.init-progress", "nccl*", ["src/init.cc", "src/bootstrap.cc", "src/transport.cc"],
        "nccl-init-progress", "progress", "init",
        "NCCL reports a step of communicator init (bootstrap, topology, channels, init done).",
        lang="c", macros=NCCL_MACROS, levels=("info",)),
    Msg("nccl.transport-info", "nccl*", ["src/transport/p2p.cc", "src/transport/shm.cc",
                                        "src/transport/net.cc", "src/transport/net_ib*.cc",
                                        "src/transport/net_ib/*.cc", "src/transport/net_socket.cc"],
        "nccl-transport-selected", "state", "init", "NCCL reports which transport a channel uses.",
        lang="c", macros=NCCL_MACROS, levels=("info",), text=r" via |Using|[Cc]onnected"),
]

MESSAGES += [
    # ---- vLLM 0.11
    Msg("vllm.shm-wait", "vllm*", [SHM], "shm-broadcast-wait", "symptom", "serving",
        "A shared-memory broadcast block stayed busy: the writer (acquire_write) waits for a reader "
        "that has not read the last block, or a reader (acquire_read) for a write that has not come. "
        "Some peer process is stuck or busy; the message does not say which way: a kernel that does "
        "not finish, a collective another rank never joins, a lock, compilation (its own note), or a "
        "worker that died.",
        [("rank-died", 0.1), ("nccl-desync", 0.1), ("gpu-kernel-spin", 0.1), ("compile-in-progress", 0.1),
         ("lock-contention", 0.05)],
        text=r"No available shared memory broadcast block"),
    Msg("vllm.shm-other", "vllm*", [SHM], "shm-broadcast-state", "state", "init",
        "vLLM's shared-memory message queue reports its set-up or a misuse."),
    Msg("vllm.worker-died", "vllm*", ["vllm/v1/executor/multiproc_executor.py",
                                      "vllm/v1/engine/core_client.py",
                                      "vllm/executor/multiproc_worker_utils.py",
                                      "vllm/executor/multiproc_gpu_executor.py"], "worker-died", "mechanism",
        "any", "A worker or the engine core process died; the engine shuts down.",
        [("rank-died", 0.5)], text=r"died unexpectedly|proc \w* ?died|pid %s died"),
    Msg("vllm.rpc-timeout", "vllm*", ["vllm/v1/executor/multiproc_executor.py"], "executor-rpc-timeout",
        "symptom", "serving", "A collective RPC to the workers timed out: some worker did not answer.",
        [("rank-died", 0.15), ("nccl-desync", 0.15)], text=r"timed out"),
    Msg("vllm.worker-failed", "vllm*", ["vllm/v1/executor/multiproc_executor.py"], "worker-failed",
        "mechanism", "any", "A worker process failed to start or hit an exception.",
        [("rank-died", 0.35)], text=r"WorkerProc (failed|hit an exception)|failed to start|Worker failed with error|"
                                   r"Executor failed"),
    Msg("vllm.executor-other", "vllm*", ["vllm/v1/executor/multiproc_executor.py"], "executor-state",
        "state", "any", "vLLM's multiprocess executor reports its state."),
    Msg("vllm.engine-dead", "vllm*", ["vllm/v1/engine/core.py", "vllm/v1/engine/core_client.py",
                                     "vllm/v1/engine/exceptions.py", "vllm/v1/engine/utils.py"],
        "engine-core-failed",
        "mechanism", "any", "The engine core failed at start-up or hit a fatal error.",
        [("rank-died", 0.3)], text=r"EngineCore (failed to start|encountered a fatal error)|"
                                   r"Engine core initialization failed|EngineCore.*died|"
                                   r"died during startup|EngineCore encountered an issue"),
    Msg("vllm.engine-startup-wait", "vllm*", ["vllm/v1/engine/core.py", "vllm/v1/engine/utils.py",
                                             "vllm/v1/engine/core_client.py"], "engine-startup-wait",
        "symptom", "init", "The engine or the front end is waiting for the other side's start-up "
        "message.", [("post-load-deadlock", 0.15), ("rank-died", 0.1)],
        text=r"Waiting for (READY|init message|(the )?engines?|.*(startup|handshake|coordinator))|"
             r"Timed out waiting for engines"),
    Msg("vllm.engine-other", "vllm*", ["vllm/v1/engine/core.py", "vllm/v1/engine/core_client.py"],
        "engine-core-state", "state", "any", "vLLM's engine core reports its state.",
        levels=("info", "warning", "error", "exception")),
    Msg("vllm.load", "vllm*", ["vllm/v1/worker/gpu_model_runner.py", "vllm/model_executor/model_loader/*.py"],
        "model-load", "progress", "load", "vLLM reports the model load (start, weights, time taken).",
        text=r"[Ll]oad|[Ww]eights|[Dd]ownload|[Ll]oading"),
    Msg("vllm.capture", "vllm*", ["vllm/v1/worker/gpu_model_runner.py"], "cuda-graph-capture",
        "progress", "graph-capture", "vLLM reports CUDA graph capture.",
        [("cuda-graph-capture", 0.05)], text=r"[Gg]raph|[Cc]aptur"),
    Msg("vllm.kv-oom", "vllm*", ["vllm/v1/worker/gpu_worker.py", "vllm/v1/core/kv_cache_utils.py"],
        "kv-cache-oom", "mechanism", "warmup", "After the model and the profile run, no GPU memory "
        "is left for the KV cache the configuration needs.", [("gpu-oom", 0.45)],
        text=r"No available memory for the cache blocks|To serve at least one request with the models's "
             r"max seq len|is larger than the maximum number of tokens that can be stored in KV cache"),
    Msg("vllm.kv-memory", "vllm*", ["vllm/v1/worker/gpu_worker.py", "vllm/v1/core/kv_cache_utils.py"],
        "kv-cache-memory", "state", "warmup", "vLLM reports the memory profile / KV cache budget, or "
        "that it does not fit.", text=r"KV cache|[Mm]emory|GiB"),
    Msg("vllm.compile", "vllm*", ["vllm/compilation/backends.py", "vllm/compilation/monitor.py",
                                 "vllm/compilation/wrapper.py", "vllm/compilation/compiler_interface.py"],
        "torch-compile", "progress", "compile", "vLLM reports torch.compile progress (Dynamo, "
        "inductor, cache).", [("compile-in-progress", 0.1)], levels=("info", "warning", "debug")),
    Msg("vllm.distributed", "vllm*", ["vllm/distributed/parallel_state.py",
                                     "vllm/distributed/device_communicators/*.py",
                                     "vllm/distributed/utils.py"], "vllm-distributed", "state", "init",
        "vLLM reports its distributed set-up (groups, custom all-reduce, P2P checks, NCCL).",
        text=r"[Pp]2[Pp]|NCCL|nccl|custom allreduce|[Cc]ustom all-?reduce|world_size|IPC|shm|"
             r"[Ss]hared memory|backend"),
    Msg("vllm.api-server", "vllm*", ["vllm/entrypoints/openai/api_server.py", "vllm/entrypoints/launcher.py"],
        "api-server", "state", "any", "vLLM's API server reports its state (start, shutdown, engine dead).",
        levels=("info", "warning", "error", "exception")),
]

MESSAGES += [
    # ---- SGLang 0.5.3
    Msg("sglang.watchdog", "sglang*", ["sglang/srt/managers/scheduler.py"], "scheduler-watchdog-timeout",
        "symptom", "serving", "SGLang's scheduler watchdog saw no forward progress within "
        "--watchdog-timeout and kills the server.", [("request-deadlock", 0.15), ("nccl-desync", 0.1),
                                                     ("gpu-kernel-spin", 0.1)], text=r"Watchdog timeout"),
    Msg("sglang.child-failed", "sglang*", ["sglang/srt/managers/scheduler.py",
                                          "sglang/srt/managers/detokenizer_manager.py",
                                          "sglang/srt/managers/tokenizer_manager.py",
                                          "sglang/srt/managers/data_parallel_controller.py"],
        "sglang-child-failed", "mechanism", "any",
        "An SGLang subprocess hit an exception; the launcher is told with SIGQUIT and exits.",
        [("rank-died", 0.4)], text=r"hit an exception|SIGQUIT received"),
    Msg("sglang.health", "sglang*", ["sglang/srt/managers/tokenizer_manager.py",
                                    "sglang/srt/entrypoints/http_server.py"], "health-check-failed",
        "symptom", "serving", "SGLang's health check did not get a response in time.",
        [("request-deadlock", 0.1), ("frontend-hang", 0.1)], text=r"[Hh]ealth"),
    Msg("sglang.load-error", "sglang*", ["sglang/srt/model_executor/model_runner.py",
                                        "sglang/srt/model_loader/*.py"], "model-load-error", "state", "load",
        "SGLang could not load the weights (missing files or keys, an unsupported format): the "
        "rank fails instead of hanging.", [("rank-died", 0.1)],
        text=r"Cannot find any model weights|No model weights found|Missing keys|could finish the model "
             r"loading, but"),
    Msg("sglang.load", "sglang*", ["sglang/srt/model_executor/model_runner.py",
                                  "sglang/srt/model_loader/*.py"], "model-load", "progress", "load",
        "SGLang reports the weight load (begin, end, memory).", text=r"[Ll]oad|[Ww]eight"),
    Msg("sglang.capture", "sglang*", ["sglang/srt/model_executor/cuda_graph_runner.py",
                                     "sglang/srt/model_executor/model_runner.py"], "cuda-graph-capture",
        "mechanism", "graph-capture", "SGLang reports CUDA graph capture (begin, end, or a failure).",
        [("cuda-graph-capture", 0.3)], text=r"[Cc]apture.*(fail|[Ee]rror)|[Cc]uda graph.*fail"),
    Msg("sglang.capture-progress", "sglang*", ["sglang/srt/model_executor/cuda_graph_runner.py",
                                              "sglang/srt/model_executor/model_runner.py"],
        "cuda-graph-capture", "progress", "graph-capture", "SGLang reports CUDA graph capture progress.",
        text=r"[Cc]aptur|cuda graph"),
    Msg("sglang.oom", "sglang*", ["sglang/srt/model_executor/model_runner.py"], "kv-cache-oom", "mechanism",
        "warmup", "Too little GPU memory is left for SGLang's KV pool after the weights.",
        [("gpu-oom", 0.45)], text=r"Not enough memory"),
    Msg("sglang.memory", "sglang*", ["sglang/srt/model_executor/model_runner.py"], "kv-cache-memory",
        "state", "warmup", "SGLang reports the memory pool / KV cache size or a shortage.",
        text=r"[Mm]emory|mem|KV"),
    Msg("sglang.dist", "sglang*", ["sglang/srt/distributed/parallel_state.py",
                                  "sglang/srt/model_executor/model_runner.py"], "sglang-distributed",
        "state", "init", "SGLang reports its distributed init.", text=r"[Ii]nit|NCCL|nccl|distributed"),
    Msg("sglang.scheduler", "sglang*", ["sglang/srt/managers/scheduler.py"], "scheduler-state", "state",
        "serving", "SGLang's scheduler reports its state.", levels=("warning", "error", "exception")),
    Msg("sglang.tokenizer", "sglang*", ["sglang/srt/managers/tokenizer_manager.py"], "tokenizer-manager-state",
        "state", "serving", "SGLang's tokenizer manager reports its state.",
        levels=("warning", "error", "exception")),
]

MESSAGES += [
    # ---- hub, filelock, transformers, triton, flashinfer, zmq, uvicorn, ray, TGI, ollama
    Msg("hub.lock-wait", "huggingface_hub", ["huggingface_hub/utils/_fixes.py"], "hub-lock-wait",
        "symptom", "load", "huggingface_hub is still waiting for the .lock of a concurrent download.",
        [("lock-contention", 0.2)], text=r"Still waiting to acquire lock"),
    Msg("hub.lock-other", "huggingface_hub", ["huggingface_hub/utils/_fixes.py"], "hub-lock-state",
        "state", "load", "huggingface_hub's lock falls back (no flock on this file system)."),
    Msg("hub.download", "huggingface_hub", ["huggingface_hub/file_download.py"], "hub-download",
        "state", "load", "huggingface_hub reports a download (retry, resume, offline, size)."),
    Msg("filelock.debug", "filelock", ["filelock/_api.py"], "file-lock-wait", "progress", "any",
        "filelock's debug log of acquiring, waiting for or releasing a lock.",
        [("lock-contention", 0.05)], text=r"not acquired|waiting|Timeout"),
    Msg("filelock.other", "filelock", ["filelock/_api.py", "filelock/_error.py"], "file-lock-state",
        "state", "any", "filelock reports a lock acquired / released or a timeout."),
    Msg("transformers.tokenizer", "transformers", ["transformers/tokenization_utils_base.py"],
        "tokenizer-state", "state", "load", "transformers reports a tokenizer load / length issue.",
        levels=("warning",), via="log"),
    Msg("tokenizers.fork", "tokenizers", ["tokenizers/tokenizers.abi3.so"], "tokenizers-fork",
        "state", "any", "The Rust tokenizer was used before a fork; it turns its parallelism off "
        "in the child (the known deadlock it avoids).", lang="strings",
        text=r"huggingface/tokenizers: The current process just got forked"),
    Msg("triton.autotune", "triton", ["triton/runtime/autotuner.py"], "triton-autotune", "progress",
        "compile", "Triton's autotuner reports benchmarking configs (TRITON_PRINT_AUTOTUNING).",
        [("compile-in-progress", 0.1)], via="print", text=r"[Aa]utotuning"),
    Msg("triton.compile", "triton", ["triton/compiler/compiler.py", "triton/runtime/build.py",
                                     "triton/backends/nvidia/compiler.py"], "triton-compile", "state",
        "compile", "Triton reports a compile step or a compile failure (ptxas, cache)."),
    Msg("flashinfer.lock", "flashinfer", ["flashinfer/jit/*.py"], "flashinfer-lock-timeout", "mechanism",
        "compile", "FlashInfer gave up waiting for a file lock another process holds (a build or "
        "a download of the same artifact).", [("lock-contention", 0.4)], text=r"Failed to acquire lock"),
    Msg("flashinfer.jit", "flashinfer", ["flashinfer/jit/core.py", "flashinfer/jit/cpp_ext.py",
                                         "flashinfer/jit/*.py"], "flashinfer-jit", "progress", "compile",
        "FlashInfer reports JIT-compiling a kernel module (ninja build) or loading a cached one.",
        [("compile-in-progress", 0.15)], via="log"),
    Msg("uvicorn.server", "uvicorn", ["uvicorn/server.py", "uvicorn/main.py", "uvicorn/lifespan/on.py"],
        "http-server", "state", "any", "uvicorn reports the server's life cycle (startup, shutdown, "
        "waiting for connections / background tasks)."),
    Msg("deepspeed.launcher-exit", "deepspeed", ["deepspeed/launcher/launch.py"], "worker-failed",
        "mechanism", "any", "DeepSpeed's launcher saw a rank exit with a non-zero code and kills the rest.",
        [("rank-died", 0.45)], text=r"exits with return code"),
    Msg("deepspeed.launcher", "deepspeed", ["deepspeed/launcher/launch.py", "deepspeed/launcher/runner.py"],
        "deepspeed-launcher", "state", "any", "DeepSpeed's launcher reports the job's set-up or a "
        "process it kills.", levels=("info", "warning", "error")),
    Msg("lmdeploy.child-exit", "lmdeploy", ["lmdeploy/pytorch/engine/executor/*.py"], "worker-failed",
        "mechanism", "any", "An lmdeploy worker process signalled termination; the engine exits.",
        [("rank-died", 0.35)], text=r"termination signal|died|exit"),
    Msg("lmdeploy.cache-full", "lmdeploy", ["lmdeploy/pytorch/engine/*.py"], "lmdeploy-cache-full",
        "symptom", "serving", "No request can be scheduled for prefill: the KV cache may be full.",
        [("request-deadlock", 0.1), ("gpu-oom", 0.05)], text=r"Maybe cache is full"),
    Msg("lmdeploy.memory", "lmdeploy", ["lmdeploy/pytorch/engine/executor/*.py"], "kv-cache-oom",
        "mechanism", "warmup", "lmdeploy found too little GPU memory for its cache and shrank it.",
        [("gpu-oom", 0.3)], text=r"No enough memory|[Nn]ot enough memory"),
    Msg("lmdeploy.engine", "lmdeploy", ["lmdeploy/pytorch/engine/*.py", "lmdeploy/pytorch/engine/executor/*.py"],
        "lmdeploy-engine", "state", "any", "lmdeploy's PyTorch engine reports its state.",
        levels=("warning", "error", "exception")),
    Msg("ray.worker", "ray", ["ray/_private/worker.py"], "ray-worker", "state", "any",
        "Ray reports a worker / driver state or a failure to get an object.",
        levels=("warning", "error", "exception"), via="log"),
    Msg("tgi.launcher-wait", "text-generation-inference", ["launcher/src/main.rs"], "tgi-shard-wait",
        "symptom", "load", "TGI's launcher is still waiting for a shard to report ready.",
        [("post-load-deadlock", 0.1), ("io-stall", 0.1), ("nccl-transport", 0.1)],
        lang="rust", text=r"Waiting for shard"),
    Msg("tgi.launcher-fail", "text-generation-inference", ["launcher/src/main.rs"], "tgi-shard-failed",
        "mechanism", "any", "A TGI shard process failed or was killed; the launcher shuts down.",
        [("rank-died", 0.45)], lang="rust",
        text=r"[Ss]hard.*(fail|[Ee]rror|terminated|[Kk]illed)|failed to start|[Ss]ignal"),
    Msg("tgi.launcher-error", "text-generation-inference", ["launcher/src/main.rs"], "tgi-launcher-error",
        "mechanism", "any", "TGI's launcher lost a shard, the download, or the webserver.",
        [("rank-died", 0.25)], lang="rust", levels=("error",),
        text=r"Shard status channel disconnected|Download encountered an error|Webserver Crashed|"
             r"Failed to start webserver"),
    Msg("tgi.launcher-other", "text-generation-inference", ["launcher/src/main.rs"], "tgi-launcher",
        "progress", "any", "TGI's launcher reports a step (download, shard start, ready, shutdown).",
        lang="rust"),
    Msg("tgi.router", "text-generation-inference", ["router/src/server.rs", "router/src/infer/*.rs"],
        "tgi-router", "state", "serving", "TGI's router reports its state.", lang="rust",
        levels=("warning", "error")),
]

# ---------------------------------------------------------------------------- llama.cpp
# read from llama-cpp-python's sdist, which carries llama.cpp's tree under vendor/llama.cpp.
# common/log.h: LOG_INF(fmt, ...); tools/server/server-common.h: SRV_INF(fmt, ...) and
# SLT_INF(slot, fmt, ...) prefix "srv  <func>: " / "slot <func>: id N | task N | "; src/llama-impl.h
# LLAMA_LOG_INFO(fmt, ...), ggml/src/ggml-impl.h GGML_LOG_INFO(fmt, ...).
# 0.2.24 (December 2023) carries the server of then, examples/server/server.cpp: LOG_TEE(fmt, ...)
# (common/log.h, no level: read as info) prints "slot %d is processing [task id: %d]", "slot
# unavailable"..., LOG_INFO("text", {json fields}) one JSON object a line, and fprintf(stderr, fmt).
# The selectors of llama-server's events read both versions ("llama-cpp-python*"): 0.2.24 adds only
# what 0.3.36 does not print; what only 0.2.24 prints (no free slot, all slots idle, the decode loop
# giving up) has selectors of its own.
LLAMA_MACROS = {f"{p}_{lv}": (level, 1 if p == "SLT" else 0)
                for p in ("LOG", "SRV", "SLT", "QUE")
                for lv, level in (("INF", "info"), ("WRN", "warning"), ("ERR", "error"), ("DBG", "debug"))}
LLAMA_MACROS.update({f"{p}_{lv}": (level, 0) for p in ("LLAMA_LOG", "GGML_LOG")
                     for lv, level in (("INFO", "info"), ("WARN", "warning"), ("ERROR", "error"),
                                       ("DEBUG", "debug"))})
LC = "vendor/llama.cpp/"
LC_OLD_SERVER = LC + "examples/server/server.cpp"  # 0.2.24 only
LC_SERVER = [LC + "tools/server/server.cpp", LC + "tools/server/server-context.cpp",
             LC + "tools/server/server-http.cpp", LC + "tools/server/server-queue.cpp",
             LC_OLD_SERVER]
LC_SRC = [LC + "src/llama.cpp", LC + "src/llama-model-loader.cpp", LC + "src/llama-model.cpp",
          LC + "src/llama-context.cpp", LC + "src/llama-kv-cache.cpp"]
LC_GGML = [LC + "ggml/src/ggml-backend.cpp", LC + "ggml/src/ggml-alloc.c",
           LC + "ggml/src/ggml-cuda/ggml-cuda.cu", LC + "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
           LC + "ggml/src/ggml-metal/ggml-metal.cpp", LC + "ggml/src/ggml-metal/ggml-metal-context.m",
           LC + "ggml/src/ggml-metal/ggml-metal-device.m"]
LCPP = "llama-cpp-python==0.3.36"  # what only the newer llama.cpp has (src/, ggml/src/, the router)
LCPP_ALL = "llama-cpp-python*"  # 0.3.36, then 0.2.24
LCPP_2023 = "llama-cpp-python==0.2.24"
LLAMA_OLD_MACROS = dict(LLAMA_MACROS, LOG_TEE=("info", 0), LOG_INFO=("info", 0), LOG_WARNING=("warning", 0),
                        LOG_ERROR=("error", 0), LOG_VERBOSE=("debug", 0))

MESSAGES += [
    Msg("llamacpp.kv-no-space", LCPP_ALL, [LC + "tools/server/server-context.cpp", LC_OLD_SERVER], "kv-cache-full",
        "symptom", "serving", "llama_decode found no free KV cells for the batch: llama-server clears idle slots "
        "or halves the batch and retries; the running slots hold the whole cache.",
        [("request-deadlock", 0.1), ("gpu-oom", 0.05)], lang="c", macros=LLAMA_OLD_MACROS,
        text=r"failed to find free space in the KV cache"),
    Msg("llamacpp.decode-failed", LCPP, [LC + "tools/server/server-context.cpp"], "decode-failed",
        "mechanism", "serving", "A decode failed (compute error, invalid batch, an exception in "
        "pre/post decode): every processing slot gets the error and is released.",
        [("gpu-fault", 0.15)], lang="c", macros=LLAMA_MACROS, levels=("error",),
        text=r"off = %d, n_batch = %d, ret = %d|(pre_|post_)?decode\(\) failed|failed to process "
             r"speculative batch|failed to (decode|encode|process) mtmd"),
    Msg("llamacpp.context-shift", LCPP_ALL, [LC + "tools/server/server-context.cpp", LC_OLD_SERVER], "context-shift",
        "state", "serving", "A slot's context is full: llama-server discards n_discard tokens after n_keep and "
        "goes on generating (a request with no stop and no n_predict can run on like this).",
        lang="c", macros=LLAMA_OLD_MACROS, text=r"^slot context shift|^slot %d: context shift"),
    Msg("llamacpp.load-failed", LCPP_ALL, LC_SERVER + [LC + "src/llama.cpp"], "model-load-error", "mechanism",
        "load", "llama.cpp could not load the model or create its context; llama-server exits.",
        [("rank-died", 0.2), ("gpu-oom", 0.1)], lang="c", macros=LLAMA_OLD_MACROS, levels=("error",),
        text=r"failed to load model|failed to create_context|exiting due to model loading error|"
             r"failed to load models on startup|error loading model|failed to load draft model|"
             r"^unable to load (clip )?model"),
    Msg("llamacpp.alloc-failed", LCPP, LC_SRC + LC_GGML, "gpu-alloc-failed", "mechanism", "load",
        "A device (or host) buffer for weights, the KV cache or the compute graph could not be "
        "allocated.", [("gpu-oom", 0.35)], lang="c", macros=LLAMA_MACROS, levels=("error", "warning"),
        text=r"failed to allocate|cudaMalloc failed|out of memory|unable to allocate"),
    Msg("llamacpp.http-failed", LCPP_ALL, [LC + "tools/server/server.cpp", LC + "tools/server/server-http.cpp",
                                           LC_OLD_SERVER],
        "http-server-failed", "mechanism", "init", "llama-server's HTTP listener could not bind / start "
        "or stopped: the process exits or no request reaches it.", [("frontend-hang", 0.2)], lang="c",
        macros=dict(LLAMA_OLD_MACROS, fprintf=("error", 1)), levels=("error",),
        text=r"couldn't bind HTTP|couldn't start HTTP listener|failed to initialize HTTP server|"
             r"exiting due to HTTP server error|stopped unexpectedly|couldn't bind to server socket"),
    Msg("llamacpp.server-load", LCPP_ALL, LC_SERVER, "llama-server-phase", "progress", "load",
        "llama-server's start-up: loading the model, the model loaded, the slots initialised.",
        lang="c", macros=LLAMA_OLD_MACROS,
        text=r"^loading model|^initializing|loaded multimodal model|^Available slots|^ -> Slot %i - max context"),
    Msg("llamacpp.server-listening", LCPP_ALL, LC_SERVER, "llama-server-phase", "progress", "serving",
        "llama-server has its model loaded and listens for requests, sleeps / wakes when idle, or "
        "cleans up before exit.", lang="c", macros=LLAMA_OLD_MACROS,
        text=r"^model loaded|^listening on|sleeping state|cleaning up before exit|starting server in "
             r"router mode|^\s*llama server listening at|^HTTP server listening"),
    Msg("llamacpp.slot-progress", LCPP_ALL, [LC + "tools/server/server-context.cpp", LC_OLD_SERVER],
        "slot-progress", "progress",
        "serving", "A slot picks a task, processes the prompt, generates and stops: requests are moving.",
        lang="c", macros=LLAMA_OLD_MACROS,
        text=r"prompt processing|^n_gen =|stop processing|processing task|selected slot|eval time =|"
             r"total time =|draft tokens|is processing \[task id|^slot %d released|in cache: %i tokens|"
             r"kv cache rm|we have to evaluate at least|^prompt ingested$|^input truncated$"),
    # what only the server of 2023 prints (0.2.24): it answers a request no slot can take with an
    # error, and its slot loop ends when a decode fails for good
    Msg("llamacpp.no-slot-2023", LCPP_2023, [LC_OLD_SERVER], "no-free-slot", "symptom", "serving",
        "Every slot is busy (or the slot the request named is): the server of 2023 answers the request "
        "with the error 'slot unavailable' instead of queueing it.", [("request-deadlock", 0.1)],
        lang="c", macros=LLAMA_OLD_MACROS, text=r"^slot unavailable"),
    Msg("llamacpp.idle-2023", LCPP_2023, [LC_OLD_SERVER], "slots-idle", "state", "serving",
        "Every slot is idle: no request is in flight, the KV cache is cleared.", lang="c",
        macros=LLAMA_OLD_MACROS, text=r"^all slots are idle"),
    Msg("llamacpp.decode-failed-2023", LCPP_2023, [LC_OLD_SERVER], "decode-failed", "mechanism", "serving",
        "A decode failed for good (at a batch of 1 or with an error, where the source says the KV cache "
        "is full, or while evaluating an image): update_slots returns false and the server's slot loop "
        "ends, while its HTTP thread goes on taking requests.", [("gpu-fault", 0.15)], lang="c",
        macros=LLAMA_OLD_MACROS, text=r"failed to decode the batch|failed to eval"),
    Msg("llamacpp.router", LCPP, [LC + "tools/server/server-models.cpp"], "llama-router-instance", "state",
        "any", "llama-server's router spawns, waits for, stops or kills a model instance.",
        lang="c", macros=LLAMA_MACROS,
        text=r"force-killing|exited with status|still loading|waiting until model|spawning server "
             r"instance|is not running|still alive|queued"),
    Msg("llamacpp.server-other", LCPP_ALL, LC_SERVER, "llama-server-state", "state", "any",
        "llama-server reports a warning or an error.", lang="c", macros=LLAMA_OLD_MACROS,
        levels=("warning", "error"), min_literal=20),  # "failed to create %s" says too little
    Msg("llamacpp.load-progress", LCPP, LC_SRC, "model-load", "progress", "load",
        "llama.cpp loads the model: the GGUF metadata, tensors, layers offloaded, buffers sized.",
        lang="c", macros=LLAMA_MACROS,
        text=r"loaded meta data|offloaded %d/%d layers|model buffer size|KV buffer size|compute buffer "
             r"size|constructing llama_context|file size|loading additional|partial load"),
    Msg("ggml.cuda-init-failed", LCPP, [LC + "ggml/src/ggml-cuda/ggml-cuda.cu"], "gpu-init-failed",
        "mechanism", "init", "ggml's CUDA backend could not initialise (cudaGetDeviceCount failed): no "
        "GPU is used, or the process stops.", [("driver-or-runtime-mismatch", 0.35)], lang="c",
        macros=LLAMA_MACROS, levels=("error",), text=r"failed to initialize %s"),
    Msg("ggml.cuda-error", LCPP, [LC + "ggml/src/ggml-cuda/ggml-cuda.cu"], "cuda-error", "mechanism", "any",
        "A CUDA call in ggml failed (ggml_cuda_error: the error, the device and the call), then "
        "GGML_ABORT.", [("gpu-fault", 0.25), ("gpu-oom", 0.1)], lang="c", macros=LLAMA_MACROS,
        levels=("error",), text=r"current device: %d, in function"),
    Msg("ggml.vulkan-lost", LCPP, [LC + "ggml/src/ggml-vulkan/ggml-vulkan.cpp"], "gpu-device-lost",
        "mechanism", "any", "The Vulkan device was lost or faulted while ggml waited on a submission "
        "(a driver reset or a faulting shader).", [("gpu-fault", 0.3), ("driver-or-runtime-mismatch", 0.15)],
        lang="c", macros=LLAMA_MACROS, levels=("error",),
        text=r"device lost|device fault|waitForFences error|getFenceStatus"),
    Msg("ggml.metal-failed", LCPP, [LC + "ggml/src/ggml-metal/ggml-metal-context.m",
                                    LC + "ggml/src/ggml-metal/ggml-metal-device.m"], "gpu-device-lost",
        "mechanism", "any", "A Metal command buffer failed, or the Metal device / library could not be "
        "set up.", [("gpu-fault", 0.25), ("driver-or-runtime-mismatch", 0.1)], lang="c",
        macros=LLAMA_MACROS, levels=("error",),
        text=r"command buffer %d failed|error state from a previous command buffer|failed to create "
             r"command queue|failed to initialize the Metal library"),
    Msg("ggml.device-init", LCPP, [LC + "ggml/src/ggml-cuda/ggml-cuda.cu",
                                   LC + "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
                                   LC + "ggml/src/ggml-metal/ggml-metal-context.m",
                                   LC + "ggml/src/ggml-metal/ggml-metal-device.m"], "gpu-device-init",
        "state", "init", "ggml lists the devices its backend found (CUDA, Vulkan, Metal) and loads or "
        "compiles the Metal library.", lang="c", macros=LLAMA_MACROS,
        text=r"found %d %s devices|^  Device %d:|Found %zu Vulkan devices|ggml_vulkan: %zu = |No devices "
             r"found|found device|picking default device|loaded in %|compiled in %"),
    Msg("ggml.vulkan-init-failed", LCPP, [LC + "ggml/src/ggml-vulkan/ggml-vulkan.cpp"], "gpu-init-failed",
        "mechanism", "init", "ggml's Vulkan backend rejects the instance or device (Vulkan version, "
        "queue family, device index, missing features).", [("driver-or-runtime-mismatch", 0.3)],
        lang="cxx", text=r"Vulkan 1.2 required|No suitable queue family|does not exist|Invalid device "
                          r"index|does not support 16-bit storage|Compute pipeline creation failed"),
]

# ---------------------------------------------------------------------------- NVIDIA Triton
# LOG_INFO << ... (core, server, the Python stub), LOG_MESSAGE(TRITONSERVER_LOG_*, ...) and
# TRITONSERVER_ErrorNew(...) (the backend API): lang "cxx"
TCORE_LIFE = "src/model_repository_manager/model_lifecycle.cc"
TPB = ["src/python_be.cc", "src/stub_launcher.cc", "src/pb_stub.cc"]
MESSAGES += [
    Msg("triton.load-failed", "triton-core", [TCORE_LIFE], "model-load-error", "state", "load",
        "Triton could not load a model version: it stays UNAVAILABLE (a server started with strict "
        "readiness never turns ready).", [("rank-died", 0.1)], lang="cxx", text=r"^failed to load"),
    Msg("triton.load", "triton-core", [TCORE_LIFE], "model-load", "progress", "load",
        "Triton's model lifecycle: a model version starts loading.", lang="cxx", text=r"^loading: "),
    Msg("triton.loaded", "triton-core", [TCORE_LIFE], "model-load", "progress", "serving",
        "Triton's model lifecycle: a model is loaded (ready to serve).", lang="cxx",
        text=r"^successfully loaded"),
    Msg("triton.unloaded", "triton-core", [TCORE_LIFE], "model-unload", "progress", "shutdown",
        "Triton's model lifecycle: a model version is unloaded.", lang="cxx",
        text=r"^successfully unloaded"),
    Msg("triton.inflight-wait", "triton-core", ["src/server.cc"], "inflight-wait", "symptom", "shutdown",
        "On exit Triton counts down (--exit-timeout-secs) while models still have in-flight "
        "inferences or requests: a request a model never finishes holds it.", [("request-deadlock", 0.15)], lang="cxx",
        text=r"^Timeout %s: Found|has %s in-flight"),
    Msg("triton.core-other", "triton-core", [TCORE_LIFE, "src/server.cc",
                                            "src/model_repository_manager/model_repository_manager.cc"],
        "triton-core-state", "state", "any", "Triton's core reports a model repository / lifecycle "
        "state or error.", lang="cxx", levels=("info", "warning", "error")),
    Msg("triton.listening", "triton-server", ["src/grpc/grpc_server.cc", "src/http_server.cc"],
        "triton-server-listening", "progress", "serving", "Triton's HTTP / gRPC / metrics front end "
        "started.", lang="cxx", text=r"^Started "),
    Msg("triton.frontend-exit-wait", "triton-server", ["src/grpc/grpc_server.cc", "src/http_server.cc"],
        "inflight-wait", "symptom", "shutdown", "On exit a Triton front end waits for its open "
        "connections / requests.", [("request-deadlock", 0.1), ("frontend-hang", 0.1)], lang="cxx",
        text=r"^Timeout %s: Found"),
    Msg("triton.stub-unhealthy", "triton-python-backend", TPB, "stub-unhealthy", "symptom", "any",
        "The Python backend found its stub process not alive (waitpid) or its health mutex not taken "
        "in time: the stub was killed (OOM killer, a crash) or is stuck holding the lock.",
        [("rank-died", 0.2), ("host-oom-or-swap", 0.1)], lang="cxx",
        text=r"not healthy|health mutex|waitpid failed|Non-graceful termination"),
    Msg("triton.stub-launch-failed", "triton-python-backend", TPB, "stub-launch-failed", "mechanism", "load",
        "The Python backend could not start or initialise its stub process.", [("rank-died", 0.25)],
        lang="cxx", levels=("error", "info"),
        text=r"Launch stub process failed|Failed to fork the stub|Failed to (pre)?initialize Python stub|"
             r"unexpected response from Python backend stub"),
    Msg("triton.stub-launch", "triton-python-backend", TPB, "stub-launch", "progress", "load",
        "The Python backend starts a stub process and waits for its health thread and init reply.",
        lang="cxx", text=r"Starting Python backend stub|Waiting for the stub|ModelInstanceInitialize"),
    Msg("triton.python-backend-other", "triton-python-backend", TPB, "python-backend-state", "state", "any",
        "Triton's Python backend reports an error.", lang="cxx", levels=("error",)),
]

# ---------------------------------------------------------------------------- ollama (Go)
OLLAMA_OLD = "ollama==c1149875234a51aa1e5e60b74f3807f5982c60fa"  # v0.12.11: the Go runners
OLLAMA_2024 = "ollama==f2890a4494f9fb3722ee7a4c506252362d1eab65"  # v0.3.14: C++ runner, vendored llama.cpp
MESSAGES += [
    Msg("ollama.runner-timeout", "ollama*", ["llm/server.go", "llm/llama_server.go"], "runner-start-timeout",
        "symptom", "load", "The runner (llama runner / llama-server) did not report ready within "
        "OLLAMA_LOAD_TIMEOUT with no load progress: ollama gives up the load.",
        [("io-stall", 0.15), ("driver-or-runtime-mismatch", 0.1)], lang="go",
        text=r"timed out waiting for llama(-server| runner) to start"),
    Msg("ollama.runner-died", "ollama*", ["llm/server.go", "llm/llama_server.go"], "runner-died",
        "mechanism", "any", "The runner process exited (its exit status / last error follow) while "
        "loading or serving.", [("rank-died", 0.35), ("gpu-oom", 0.05)], lang="go",
        text=r"(llama runner|llama-server) (process )?(has terminated|terminated|no longer running)|"
             r"model runner has unexpectedly stopped|an unknown error was encountered while running the model"),
    Msg("ollama.runner-oom", "ollama*", ["llm/server.go", "llm/llama_server.go"], "runner-oom", "mechanism",
        "load", "The model does not fit: the memory layout cannot be allocated, or the runner "
        "reported out of memory at start-up.", [("gpu-oom", 0.3)], lang="go",
        text=r"failed to allocate memory for model|memory layout cannot be allocated|failed to commit "
             r"memory|out-of-memory during startup|unable to load full model on GPU"),
    Msg("ollama.runner-host-memory", OLLAMA_OLD, ["llm/server.go"], "runner-oom", "mechanism", "load",
        "The model needs more system memory than is free.", [("host-oom-or-swap", 0.3)], lang="go",
        text=r"more system memory|too large for system"),
    Msg("ollama.no-slot", "ollama*", ["llm/server.go", "llm/llama_server.go"], "no-free-slot", "symptom",
        "serving", "The runner answered 'no slot available' to every retry: all its parallel slots are "
        "busy.", [("request-deadlock", 0.15)], lang="go", text=r"no slots available after"),
    Msg("ollama.runner-start", "ollama*", ["llm/server.go"], "ollama-runner-start", "progress", "load",
        "ollama starts its runner and polls its health until it reports ready.", lang="go",
        text=r"waiting for llama runner to start responding|waiting for server to become available|"
             r"^starting runner|^loading model|using llama-server for model|^starting llama server$"),
    Msg("ollama.runner-started", OLLAMA_OLD, ["llm/server.go"], "ollama-runner-start", "progress", "serving",
        "The runner reported ready: the model is loaded and requests go to it.", lang="go",
        text=r"llama runner started in"),
    Msg("ollama.runner-main", OLLAMA_OLD, ["runner/llamarunner/runner.go", "runner/ollamarunner/runner.go"],
        "ollama-runner-start", "progress", "load", "The runner process starts and loads the model.",
        lang="go", text=r"^starting (go runner|ollama engine)$|^load$"),
    Msg("ollama.context-shift", OLLAMA_OLD, ["runner/llamarunner/cache.go", "runner/ollamarunner/cache.go"],
        "context-shift", "state", "serving", "The runner's slot reached num_ctx and shifts (or cannot "
        "shift) its context to keep generating.", lang="go", text=r"shift"),
    Msg("ollama.pull-stalled", "ollama*", ["server/download.go"], "pull-part-stalled", "symptom", "load",
        "A blob part of 'ollama pull' made no progress for the stall timeout; the part is retried.",
        [("io-stall", 0.2)], lang="go", text=r"part %d stalled|^part stalled$"),
    Msg("ollama.pull-retry", "ollama*", ["server/download.go"], "pull-part-retry", "state", "load",
        "A blob part download failed and is retried with back-off, or ran out of retries.",
        [("io-stall", 0.1)], lang="go", text=r"attempt %d failed|max retries exceeded|backing off"),
    Msg("ollama.pull", "ollama*", ["server/download.go"], "pull-progress", "progress", "load",
        "ollama pull downloads a blob in parts.", lang="go", text=r"^downloading %s in"),
    Msg("ollama.sched", "ollama*", ["server/sched.go"], "ollama-scheduler", "state", "any",
        "ollama's scheduler reports a load, an eviction, the memory it predicts, or a failure.",
        lang="go", levels=("info", "warning", "error")),
    Msg("ollama.runner", "ollama*", ["llm/server.go"], "ollama-runner", "state", "any",
        "ollama reports starting / waiting for its llama runner, or its failure.",
        [("rank-died", 0.05)], lang="go", levels=("info", "warning", "error")),
]

# ---------------------------------------------------------------------------- ollama 2024 (C++)
# v0.3.14 still builds its C++ runner from llm/ext_server/server.cpp (llama.cpp's server of early
# 2024, adapted): LOG_INFO("text", {json fields}) prints one JSON object a line,
# {"function":...,"level":"INFO",...,"msg":"slot context shift",...}; LOG_WRN / LOG_INF come from
# llama.cpp's common/log.h. llama/llama.cpp is the llama.cpp of that time vendored as a file:
# LLAMA_LOG_INFO("%s: ...", __func__) prints "llm_load_print_meta: ...", "llm_load_tensors: ...",
# "llama_model_loader: ...", "llama_new_context_with_model: ...".
OLD_SERVER_MACROS = dict(LLAMA_MACROS, **{f"LOG_{lv}": (level, 0) for lv, level in (
    ("INFO", "info"), ("WARNING", "warning"), ("ERROR", "error"), ("DEBUG", "debug"), ("VERBOSE", "debug"))})
OSRV = ["llm/ext_server/server.cpp"]
OLLAMA_LLAMA = ["llama/llama.cpp"]
MESSAGES += [
    Msg("ollama.cpp-context-shift", OLLAMA_2024, OSRV, "context-shift", "state", "serving",
        "A slot of the C++ runner filled its context: update_slots discards n_discard tokens after "
        "n_keep and the slot goes on generating (a request with no stop and no num_predict can run "
        "on like this).", lang="c", macros=OLD_SERVER_MACROS, text=r"^slot context shift$"),
    Msg("ollama.cpp-no-slot", OLLAMA_2024, OSRV, "no-free-slot", "symptom", "serving",
        "Every slot of the C++ runner is busy: the task is deferred and waits in the queue until a "
        "slot is released.", [("request-deadlock", 0.1)], lang="c", macros=OLD_SERVER_MACROS,
        text=r"^no slot is available"),
    Msg("ollama.cpp-kv-full", OLLAMA_2024, OSRV, "kv-cache-full", "symptom", "serving",
        "llama_decode found no room in the KV cache for the batch: the C++ runner halves the batch "
        "and retries, and at a batch of 1 gives up the decode.", [("request-deadlock", 0.1), ("gpu-oom", 0.05)],
        lang="c", macros=OLD_SERVER_MACROS, text=r"failed to find free space in the KV cache|failed to decode the batch"),
    Msg("ollama.cpp-load-failed", OLLAMA_2024, OSRV, "model-load-error", "mechanism", "load",
        "The C++ runner could not load the model (or its projector) and exits before it serves.",
        [("rank-died", 0.2), ("gpu-oom", 0.1)], lang="c", macros=OLD_SERVER_MACROS, levels=("error",),
        text=r"^unable to load (clip )?model"),
    Msg("ollama.cpp-idle", OLLAMA_2024, OSRV, "slots-idle", "state", "serving",
        "Every slot of the C++ runner is idle: no request is in flight, the KV cache is cleared.",
        lang="c", macros=OLD_SERVER_MACROS, text=r"^all slots are idle"),
    Msg("ollama.cpp-slot-progress", OLLAMA_2024, OSRV, "slot-progress", "progress", "serving",
        "A slot of the C++ runner takes a task, ingests the prompt, generates and is released: "
        "requests are moving.", lang="c", macros=OLD_SERVER_MACROS,
        text=r"^slot is processing task|^slot released|^slot progression|^prompt ingested|^kv cache rm|"
             r"^slot with common prefix|^input truncated|^we have to evaluate"),
    Msg("ollama.cpp-start", OLLAMA_2024, OSRV, "ollama-runner-start", "progress", "load",
        "The C++ runner starts, loads the model and initialises its slots.", lang="c",
        macros=OLD_SERVER_MACROS, text=r"^starting c\+\+ runner|^initializing slots|^system info|^build info"),
    Msg("ollama.cpp-ready", OLLAMA_2024, OSRV, "ollama-runner-start", "progress", "serving",
        "The C++ runner has the model loaded and its HTTP server listens: ollama's health poll sees "
        "it ready.", lang="c", macros=OLD_SERVER_MACROS, text=r"^HTTP server listening|^model loaded"),
    Msg("ollama.cpp-other", OLLAMA_2024, OSRV, "ollama-runner", "state", "any",
        "ollama's C++ runner reports a warning or an error.", lang="c", macros=OLD_SERVER_MACROS,
        levels=("warning", "error"), min_literal=20),
    Msg("ollama.llama-load-failed", OLLAMA_2024, OLLAMA_LLAMA, "model-load-error", "mechanism", "load",
        "The vendored llama.cpp could not load the model or create its context: the runner exits.",
        [("rank-died", 0.2), ("gpu-oom", 0.1)], lang="c", macros=LLAMA_MACROS, levels=("error",),
        text=r"error loading model|failed to load model|llama_kv_cache_init\(\) failed"),
    Msg("ollama.llama-alloc-failed", OLLAMA_2024, OLLAMA_LLAMA, "gpu-alloc-failed", "mechanism", "load",
        "A buffer for the KV cache, the outputs or the compute graph could not be allocated.",
        [("gpu-oom", 0.35)], lang="c", macros=LLAMA_MACROS, levels=("error",),
        text=r"failed to allocate|failed to reserve"),
    Msg("ollama.llama-backend-failed", OLLAMA_2024, OLLAMA_LLAMA, "gpu-init-failed", "mechanism", "init",
        "The vendored llama.cpp could not initialise a GPU backend (CUDA, Vulkan, Metal, SYCL...) "
        "for the context.", [("driver-or-runtime-mismatch", 0.3)], lang="c", macros=LLAMA_MACROS,
        levels=("error",), text=r"failed to initialize (CUDA|Vulkan|Metal|SYCL|CANN|Kompute|RPC)|Row split not supported"),
    Msg("ollama.llama-load", OLLAMA_2024, OLLAMA_LLAMA, "model-load", "progress", "load",
        "The vendored llama.cpp loads the model: GGUF metadata (llama_model_loader), hyper-parameters "
        "(llm_load_print_meta), tensors and GPU offload (llm_load_tensors), the context and its "
        "buffers (llama_new_context_with_model).", lang="c", macros=LLAMA_MACROS, levels=("info",),
        text=r"^%s: "),
]
