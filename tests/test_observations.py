"""The observation model's general readings, each with a case where it speaks and one where it
must not: native lock waits, stacks as people paste them (no line numbers, a cut frame, bare
faulthandler frames), records printed one field a line, lines that name no phase, the teardown
wait, a compiler in the process list, thread panics, what a poster says hangs (also in Chinese),
an error quoted inline, sizes that disagree beside a collective, a loop's repeated line, a table
of working and failing configurations, and "the command, then its output"."""

from __future__ import annotations

from hangdoctor.evidence.model import Evidence
from hangdoctor.parsers.assemble import analyze_inputs
from hangdoctor.parsers.prose import is_prose
from hangdoctor.parsers.unwrap import unwrap
from hangdoctor.triage import differential
from hangdoctor.triage.analyze import analyze


def _ev(text: str, name: str = "paste.txt") -> Evidence:
    return Evidence([analyze_inputs([(name, text)])])


def _obs(text: str, name: str = "paste.txt") -> differential.Observations:
    return differential.observe(_ev(text, name))


def _ids(text: str, name: str = "paste.txt") -> list[str]:
    return [c["id"] for c in analyze([analyze_inputs([(name, text)])])["causes"]]


def _waits(text: str) -> list[str]:
    return [t.wait_kind for ps in _ev(text).stacks.values() for t in ps.threads]


# --- native lock waits, gdb without "in" -------------------------------------------------

GDB_MUTEX = """```
#0  0x0000ffffb3ea32bc __lll_lock_wait
#1  0x0000ffffb3e9acd8 __pthread_mutex_lock
#2  0x0000ffffb412fd54 mylib::Logger::Log(std::string const&)
#3  0x0000ffffb407b04c mylib_LogMessage
```"""
GDB_ABSL = """```
#1  0x00007fa43044020e in absl::lts_20211102::synchronization_internal::Waiter::Wait(absl::lts_20211102::synchronization_internal::KernelTimeout) () from /x/_raylet.so
#2  0x00007fa430440143 in AbslInternalPerThreadSemWait_lts_20211102 () from /x/_raylet.so
#3  0x00007fa43043ea73 in absl::lts_20211102::Mutex::Block(absl::lts_20211102::base_internal::PerThreadSynch*) () from /x/_raylet.so
#4  0x00007fa43043f7f4 in absl::lts_20211102::Mutex::LockSlowLoop(absl::lts_20211102::SynchWaitParams*, int) () from /x/_raylet.so
```"""
GDB_CONDVAR = """```
#0  0x00007f0 in futex_wait () from /lib/libc.so.6
#1  0x00007f1 in pthread_cond_wait () from /lib/libc.so.6
#2  0x00007f2 in worker_loop () from /x/libpool.so
```"""


def test_a_native_thread_taking_a_mutex_waits_on_a_lock_and_a_condition_wait_does_not() -> None:
    assert _waits(GDB_MUTEX) == ["lock"]  # gdb frames without " in " still name their function
    assert _waits(GDB_ABSL) == ["lock"]
    assert "lock" not in _waits(GDB_CONDVAR)
    assert "lock-contention" in _ids(GDB_MUTEX)[:3]


# --- py-spy frames as pasted ---------------------------------------------------------------

LABELLED = """```
Thread "SchedulerMain"    (3 of 4 DP ranks)
    sanity_check (mem_cache/radix_cache.py)
    on_idle (managers/scheduler.py)
    event_loop_overlap (managers/scheduler.py)

Thread "SchedulerMain"    (4th DP rank)
    broadcast (torch/distributed/distribu
```"""


def test_frames_without_line_numbers_are_python_and_a_cut_frame_keeps_its_collective() -> None:
    ev = _ev(LABELLED)
    frames = [f for ps in ev.stacks.values() for t in ps.threads for f in t.frames]
    assert frames and not any(f.native for f in frames)
    assert "collective:broadcast" in _waits(LABELLED)
    assert "nccl-desync" == _ids(LABELLED)[0]  # one rank in a collective, the others elsewhere
    # the same cut with no path separator is no frame
    assert "collective:broadcast" not in _waits(LABELLED.replace("torch/distributed/distribu", "distribu"))


FAULTHANDLER_BARE = """```
File "torch/distributed/distributed_c10d.py", line 3151 in broadcast
File ".../srt/utils/common.py", line 2256 in broadcast_pyobj
File ".../srt/managers/scheduler.py", line 1738 in event_loop_overlap
```"""


def test_faulthandler_frames_without_their_thread_line_are_a_stack() -> None:
    assert _waits(FAULTHANDLER_BARE) == ["collective:broadcast"]
    # a traceback's frames (", in") are not read as a faulthandler dump
    tb = FAULTHANDLER_BARE.replace(" in ", ", in ")
    assert _waits(tb) == []


# --- records printed one field a line --------------------------------------------------------

def test_a_record_printed_one_field_a_line_is_folded_back() -> None:
    text, said = unwrap("WorkNCCL(\n  SeqNum=6,\n  OpType=ALLREDUCE,\n  NumelIn=57344,\n  Timeout(ms)=600000\n)\n")
    assert "WorkNCCL(SeqNum=6, OpType=ALLREDUCE, NumelIn=57344, Timeout(ms)=600000)" in text.splitlines()
    assert any("folded" in s for s in said)
    # source code with a call over several lines is left alone (its lines are no key=value fields)
    code = "result = compute(\n    first_argument,\n    second_argument,\n)\n"
    assert unwrap(code)[0] == code


# --- what names a phase and what does not ------------------------------------------------

def test_version_listings_stack_frames_and_command_lines_name_no_phase() -> None:
    for line in ("NVCC: Cuda compilation tools, release 13.0, V13.0.88",
                 "    _read_thread (torch/_inductor/compile_worker/subproc_pool.py:195)",
                 "    --master_addr=$MASTER_ADDR \\",
                 "text-generation-benchmark --tokenizer-name x --sequence-length 12",
                 "- FlashInfer: 0.6.12"):
        assert differential._says_no_phase(line), line
    for line in ("INFO 06-27 19:49:53 [gpu_model_runner.py:6483] Capturing CUDA graphs (mixed prefill-decode): 40%",
                 "Loading safetensors checkpoint shards:  50% Completed | 1/2"):
        assert not differential._says_no_phase(line), line
    assert _obs("NVCC: Cuda compilation tools, release 13.0, V13.0.88\n").phase is None
    assert _obs("INFO 01-01 00:00:00 [compilation/backends.py:1] Compiling a graph for dynamic shape takes 20 s\n").phase == "compile"


def test_a_finished_progress_bar_moves_the_phase_on() -> None:
    assert _obs("Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00]\n").phase == "warmup"
    assert _obs("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03]\n").phase == "load"


# --- teardown ----------------------------------------------------------------------------------

TEARDOWN = """Thread 0x7F81445A8440 (active): "MainThread"
    destroy_process_group (torch/distributed/distributed_c10d.py:2184)
    <module> (train.py:554)
"""


def test_tearing_a_process_group_down_is_a_teardown_wait() -> None:
    assert "teardown" in _obs(TEARDOWN).positions
    assert "teardown" not in _obs(TEARDOWN.replace("distributed_c10d.py", "mytool.py")
                                  .replace("torch/distributed", "mypkg")).positions


# --- a compiler in the process list ------------------------------------------------------------

PS = """$ ps aux | grep cicc
root  1413  0.0  0.0   2796  1104 ?  S  02:51  0:00 /bin/dash -c -- "$CICC_PATH/cicc" --c++17 --orig_src_file_name cascade.cu
"""


def test_a_compiler_in_the_process_list_is_a_build_running() -> None:
    assert "compile" in _obs(PS, "ps.txt").positions
    assert _ids(PS, "ps.txt")[0] == "compile-in-progress"
    assert "compile" not in _obs(PS.replace("cicc", "sleep"), "ps.txt").positions


# --- errors -----------------------------------------------------------------------------------

def test_a_thread_panic_is_its_own_error_and_a_runtime_panic_is_a_death() -> None:
    obs = _obs("thread '<unnamed>' panicked at toktrie/src/toktree.rs:1101:13:\nassertion failed: num_parents < 0xff\n")
    assert "panic" in obs.errors
    assert _ids("thread '<unnamed>' panicked at src/x.rs:1:1:\nboom\n")[0] == "request-deadlock"
    assert "killed" in _obs("panic: runtime error: index out of range\n\ngoroutine 12 [running]:\n").errors
    assert "killed" in _obs("terminate called after throwing an instance of 'std::runtime_error'\n").errors
    assert "panic" not in _obs("the thread that panicked at startup was restarted by hand\n").errors


def test_an_error_quoted_inline_in_a_report_counts_by_its_class() -> None:
    report = "模型一直正常运行，但是一旦遇到某个图片报错`OSError: image file is truncated`，就会卡住，不能接收任何请求\n"
    obs = _obs(report, "ticket.md")
    assert obs.errors.get("exception", "").startswith("OSError")
    assert obs.phase == "serving" and obs.phase_said
    assert _ids(report, "ticket.md")[0] == "request-deadlock"
    assert not _obs("模型一直正常运行，我们很满意这个版本，谢谢大家的帮助和支持\n", "ticket.md").errors


def test_cjk_sentences_are_prose_and_a_cjk_log_line_is_not() -> None:
    assert is_prose("模型一直正常运行，但是一旦遇到某个图片报错就会卡住，不能接收任何请求")
    assert not is_prose("2024-01-01 10:00:00 INFO 加载模型 model.py:12")


def test_what_the_poster_says_hangs_names_the_phase() -> None:
    assert _obs("4. Onboarding from disk to device fails and the request hangs.\n", "ticket.md").phase == "serving"
    assert _obs("Importing tensorrt_llm hangs forever on our DGX, nothing is printed.\n", "ticket.md").phase == "import"
    assert _obs("We upgraded the driver last week and everything is fine now, thanks.\n", "ticket.md").phase is None


def test_calls_that_are_answered_put_a_hang_without_a_phase_word_in_serving() -> None:
    hang = "However, our agent integrations consistently hang indefinitely with the same models.\n"
    works = "The native API works correctly when calling it with curl, and returns a normal response.\n"
    said = _obs("I run the server on my laptop.\n" + hang + works, "ticket.md")
    assert said.phase == "serving" and said.phase_said and "hang" in said.phase_line
    assert _obs("I run the server on my laptop.\n" + hang, "ticket.md").phase is None  # no call answered
    assert _obs("I run the server on my laptop.\n" + works, "ticket.md").phase is None  # nothing hangs


# --- sizes beside a collective, a loop's line, versions that split --------------------------

def test_sizes_that_differ_beside_a_collective_are_ranks_that_disagree() -> None:
    log = ("[DEBUG] Before ALL-to-ALL: dispatched_input shape torch.Size([4, 3, 32])\n"
           "[DEBUG] Before ALL-to-ALL: dispatched_input shape torch.Size([4, 4, 32])\n")
    assert "size-mismatch" in _obs(log).positions
    assert _ids(log)[0] == "nccl-desync"
    same = log.replace("[4, 4, 32]", "[4, 3, 32]")
    assert "size-mismatch" not in _obs(same).positions
    # sizes that differ with no collective beside them are just different tensors
    assert "size-mismatch" not in _obs(log.replace("ALL-to-ALL", "forward")).positions


LOOP = "\n".join(f"2026-06-17 20:01:{s:02d} INFO [1:MainThread] policy.py:809 total_tokens(4096) rem_total_tokens: 4096"
                 for s in range(6)) + "\n"


def test_a_loop_printing_one_line_again_and_again_is_seen_and_a_throughput_line_is_not() -> None:
    assert "log-repeats" in _obs(LOOP).positions
    assert _ids(LOOP)[0] == "request-deadlock"
    two_then_elided = "\n".join(LOOP.splitlines()[:2] + ["..."]) + "\n"
    assert "log-repeats" in _obs(two_then_elided).positions
    metrics = "\n".join(f"INFO 08-09 03:03:{s:02d} metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs"
                        for s in range(6)) + "\n"
    assert "log-repeats" not in _obs(metrics).positions
    assert "log-repeats" not in _obs("\n".join(LOOP.splitlines()[:3]) + "\n").positions



def test_a_listing_that_counts_up_is_no_loop_and_a_retry_with_a_clock_is() -> None:
    gpus = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3\n" for i in range(8))  # collect_env, nvidia-smi -L
    assert "log-repeats" not in _obs(gpus).positions
    pairs = "".join(f"Device={a} CANNOT Access Peer Device={b}\n" for a in range(3) for b in range(3) if a != b)
    assert "log-repeats" not in _obs(pairs).positions
    assert "log-repeats" in _obs("scheduler: no batch formed, retry (rank 0)\n" * 5).positions
    retries = "".join(f"2025-06-01 10:00:{10 * i:02d} WARNING connect to 10.0.0.2:29500 failed, attempt {i + 1}\n"
                      for i in range(5))
    assert "log-repeats" in _obs(retries).positions


TABLE = """✅ GPU: L40     Driver Version: 525.116.04     CUDA Version: 12.0
✅ GPU: 2x4090  Driver Version: 525.125.06     CUDA Version: 12.0
❌ GPU: 2x4090  Driver Version: 545.29.06      CUDA Version: 12.3
❌ GPU: 2x4090  Driver Version: 545.23.08    CUDA Version: 12.3
✅ GPU: A30     Driver Version: 545.23.08    CUDA Version: 12.3
✅ GPU: 2x4090  Driver Version: 550.54.15      CUDA Version: 12.4
"""


def test_a_version_that_separates_failing_from_working_configurations() -> None:
    pos = _obs(TABLE).positions
    assert "version-split" in pos and "2x4090" in pos["version-split"].frame
    assert _ids(TABLE)[0] == "driver-or-runtime-mismatch"
    # when a working row has everything the failing rows share, no version separates them
    also_works = TABLE + "✅ GPU: 2x4090  Driver Version: 545.29.06      CUDA Version: 12.3\n"
    assert "version-split" not in _obs(also_works).positions


# --- the command, then its output ---------------------------------------------------------------

SCRIPT = """```python
import asyncio
from engine import Engine

def run():
    engine = Engine(model_path="m")
    print("method 1")
    print(engine.generate("1+1="))
    print("method 2")
    print(asyncio.run(engine.async_generate("1+1=")))
```
"""


def test_the_last_line_a_script_printed_places_the_stop_at_its_next_statement() -> None:
    pos = _obs(SCRIPT + "```\nmethod 1\n{'text': '2'}\nmethod 2\n```\n", "ticket.md").positions
    assert "event-loop" in pos and "asyncio.run" in pos["event-loop"].frame
    pos = _obs(SCRIPT + "```\nmethod 1\n```\n", "ticket.md").positions
    assert "event-loop" not in pos and "serving-call" in pos
    assert not _obs(SCRIPT, "ticket.md").positions  # the script alone says nothing of where it stopped


# --- the position joins weak mechanisms ------------------------------------------------------

def test_the_position_joins_below_a_weak_mechanism_and_never_beside_a_strong_one() -> None:
    prior = {"rank-died": [{"text": "x", "weight": 0.2, "check": "differential", "refs": ["prior"]}]}
    weak = [{"id": "nccl-desync", "score": 0.3, "symptom_only": False}]
    differential.join_priors(weak, prior, {}, 0.1, lambda cid: [])
    assert [c["id"] for c in weak] == ["nccl-desync", "rank-died"] and weak[1]["prior"]
    strong = [{"id": "nccl-desync", "score": 0.7, "symptom_only": False}]
    differential.join_priors(strong, prior, {}, 0.1, lambda cid: [])
    assert [c["id"] for c in strong] == ["nccl-desync"]


def test_two_folded_watchdog_records_with_different_sequence_numbers_are_a_desync() -> None:
    rec = "WorkNCCL(\n  SeqNum={n},\n  OpType=ALLREDUCE,\n  NumelIn=4096,\n  NumelOut=4096,\n  Timeout(ms)=600000\n)\n"
    a = analyze([analyze_inputs([("paste.txt", rec.format(n=12) + rec.format(n=13))])])
    assert a["causes"][0]["id"] == "nccl-desync"
    assert any("disagree" in e["text"] for e in a["causes"][0]["evidence"])
    same = analyze([analyze_inputs([("paste.txt", rec.format(n=12) + rec.format(n=12))])])
    assert not any("disagree" in e["text"] for c in same["causes"] for e in c["evidence"])


BLOCKED_LOOP = """```
proxy         (router/router.py:127)
do_proxy      (router/router.py:149)
request       (httpx/_client.py:1527)
build_request (httpx/_client.py:367)
__call__      (weakref.py:590)
_cleanup      (wandb/apis/public/service_api.py:31)
```"""


def test_code_that_does_not_wait_inside_an_async_http_call_blocks_the_event_loop() -> None:
    assert "event-loop" in _obs(BLOCKED_LOOP).positions
    assert _ids(BLOCKED_LOOP)[0] == "frontend-hang"
    # the same code outside any HTTP stack says nothing of an event loop
    assert "event-loop" not in _obs(BLOCKED_LOOP.replace("httpx/", "mylib/")).positions


IDLE_LOOP = """Thread 94384 (idle): "MainThread"
    run (uvloop/__init__.py:69)
    cmd (vllm/entrypoints/cli/serve.py:148)
    main (vllm/entrypoints/cli/main.py:95)
"""
ENGINE_IDLE = """Process 96637: VLLM::EngineCore
Thread 96637 (idle): "MainThread"
    wait (threading.py:320)
    get (queue.py:171)
    _process_input_queue (vllm/v1/engine/core.py:1249)
    run_busy_loop (vllm/v1/engine/core.py:1227)
"""


def test_an_idle_loop_and_an_engine_waiting_for_requests_are_idle_not_blocked() -> None:
    # uvloop's own run innermost is a loop waiting for events, not code that blocks it
    assert "event-loop" not in _obs(IDLE_LOOP).positions
    # a queue wait where the library idles for work (vLLM's _process_input_queue) is idle ...
    assert _waits(ENGINE_IDLE) == ["serving-idle"]
    assert set(_obs(IDLE_LOOP + "\n" + ENGINE_IDLE).positions) == {"serving-idle"}
    # ... and the same queue wait in code the libraries do not name stays a pipe/queue wait
    mine = ENGINE_IDLE.replace("vllm/v1/engine/core.py", "myapp/worker.py")
    assert _waits(mine) == ["ipc-wait"]


def test_requests_waiting_while_none_runs_is_a_scheduler_that_cannot_admit() -> None:
    stuck = ("INFO 04-15 09:40:01 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
             "Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 1 reqs\n")
    assert "queue-stuck" in _obs(stuck).positions
    assert _ids(stuck)[0] == "request-deadlock"
    busy = stuck.replace("Running: 0 reqs", "Running: 4 reqs")
    assert "queue-stuck" not in _obs(busy).positions
    # the last stats line counts: the queue drained afterwards
    assert "queue-stuck" not in _obs(stuck + stuck.replace("Waiting: 1 reqs", "Waiting: 0 reqs")).positions


def test_a_text_shaped_by_a_bug_report_template_is_a_report() -> None:
    from hangdoctor.parsers.prose import is_report
    body = ["When deploying the server, the initialization process hangs indefinitely at the model download step.",
            "The process never prints an error and it never times out either, which makes it hard to debug.",
            "Expected: it should either succeed or fail with an error that says what is missing."]
    assert is_report(["### What happened + What you expected to happen", "", *body])
    assert not is_report(["## Design", "", *body])
    ticket = "### What happened + What you expected to happen\n\n" + "\n".join(body) + "\n"
    assert _obs(ticket, "ticket.md").phase == "load"
    assert _obs(ticket.replace("### What happened + What you expected to happen", "## Design"), "ticket.md").phase is None


def test_a_statement_the_poster_marks_as_hanging_places_the_stop() -> None:
    script = "```\nimport ray\nray.init()\na = Actor.remote()\nray.get(a.f.remote())  # this hangs forever\n```\n"
    pos = _obs(script, "ticket.md").positions
    assert "remote-wait" in pos
    assert _ids(script, "ticket.md")[0] == "rank-died"
    assert not _obs(script.replace("# this hangs forever", "# returns 'ACTOR OK'"), "ticket.md").positions
    # a comment that denies the hang marks nothing
    for denied in ("# this never hangs", "# doesn't hang any more", "# no longer stuck here"):
        assert not _obs(script.replace("# this hangs forever", denied), "ticket.md").positions


REPRO = ("```python\nimport os, torch\nimport torch.distributed as dist\n\n"
         "def init_distributed():\n    return None\n\n"
         "path = os.path.join('/tmp', 'x')\n"
         "dist.init_process_group('nccl')\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
         "dist.barrier()  # first collective\ndist.all_reduce(torch.ones(1).cuda())\nprint('done')\n```\n")


def test_a_reproducer_pasted_without_its_output_names_its_waits_as_candidates() -> None:
    hangs = REPRO.replace("\n\npath", "\n# reproduces the hang on two nodes\npath")
    pos = _obs("How to reproduce\n" + hangs, "ticket.md").positions
    assert list(pos) == ["rendezvous", "collective"]  # in the script's order; os.path.join is no wait
    # the definition "def init_distributed():" is no call: the rendezvous is init_process_group's line
    assert all(p.factor < 1 for p in pos.values()) and "init_process_group" in pos["rendezvous"].frame
    ranked = analyze([analyze_inputs([("ticket.md", "How to reproduce\n" + hangs)])])["causes"]
    assert ranked[0]["id"] == "rendezvous-stall" and ranked[0]["confidence"] == "low"
    # a report of one's own hang around the same script: candidates too
    report = ("When I run this on our two nodes with four GPUs each, my job hangs and the GPUs sit idle; "
              "we waited an hour and nothing more was printed.\n")
    assert "rendezvous" in _obs(report + REPRO, "ticket.md").positions
    # a script nobody says hangs, or one whose output places the stop, gives no candidates
    assert not _obs("How to reproduce\n" + REPRO, "ticket.md").positions
    pos = _obs(hangs + "```\ndone\n```\n", "ticket.md").positions
    assert all(p.factor == 1 for p in pos.values())


def test_works_and_does_not_work_in_words_split_versions_too() -> None:
    text = ("* Driver Version: 535.161.08 ,  CUDA Version: 12.2 : **works**\n"
            "* Driver Version: 550.54.15,    CUDA Version: 12.4 : **doesn't work**\n")
    assert "version-split" in _obs(text).positions
    assert "version-split" not in _obs(text.replace("doesn't work", "works too")).positions
    assert "version-split" in _obs(text.replace("doesn't work", "not working")).positions


def test_an_f_string_print_places_the_stop_and_the_wait_after_an_async_launch_shows() -> None:
    script = ("```python\nfor it in range(100):\n    x = make_inputs()\n    print(f\"iter {it}\", flush=True)\n"
              "    out = fused_kernel(x)\n    torch.cuda.synchronize()\n```\n")
    pos = _obs(script + "```\niter 0\niter 1\niter 2\n```\n", "ticket.md").positions
    assert "cuda-sync" in pos and "synchronize" in pos["cuda-sync"].frame
    assert "cuda-sync" not in _obs(script + "```\nsomething else\n```\n", "ticket.md").positions


def test_torchruns_banner_as_the_last_line_is_the_rendezvous() -> None:
    banner = ("W0130 23:09:58.895000 1396 torch/distributed/run.py:779] *****************************************\n"
              "W0130 23:09:58.895000 1396 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment variable "
              "for each process to be 1 in default, to avoid your system being overloaded\n")
    assert _obs(banner).phase == "rendezvous"
    after = banner + "INFO 01-30 23:10:30 [loader.py:10] Loading weights took 30.2 seconds\n"
    assert _obs(after).phase != "rendezvous"


def test_a_parent_blocked_on_its_child_stubs_answer_is_a_child_wait() -> None:
    gdb = ("```\n#2  0x00007f311438d633 in triton::backend::python::StubLauncher::ModelInstanceStubProcess() () "
           "from /opt/tritonserver/backends/python/libtriton_python.so\n"
           "#3  0x00007f311438fa08 in triton::backend::python::StubLauncher::Launch() () "
           "from /opt/tritonserver/backends/python/libtriton_python.so\n```\n")
    assert _waits(gdb) == ["child-wait"]
    assert _ids(gdb)[0] == "rank-died"
    assert "child-wait" not in _waits(gdb.replace("StubLauncher", "ModelLoader"))


def test_a_traceback_behind_a_logger_prefix_or_cut_to_its_frames_is_an_exception() -> None:
    log = ('(EngineCore pid=1146) ERROR 09-05 01:24:34 [core.py:1403]   File "/x/vllm/v1/executor/multiproc_executor.py", '
           'line 103, in _wait_for_response\n(EngineCore pid=1146) ERROR 09-05 01:24:34 [core.py:1403]     raise self._exception\n')
    assert "exception" in _obs(log).errors
    # faulthandler's frames (no comma before "in") are a stack, not an error
    assert "exception" not in _obs('File "/x/y.py", line 3 in wait\nFile "/x/z.py", line 9 in main\n').errors


# --- a death that follows the timeout it raised ---------------------------------------------

TIMEOUT_THEN_DEAD = """(EngineCore_DP0 pid=311) ERROR 10-01 12:00:00 [multiproc_executor.py:386] File "vllm/v1/executor/multiproc_executor.py", line 386, in get_response
(EngineCore_DP0 pid=311) ERROR 10-01 12:00:00 [multiproc_executor.py:386] TimeoutError: RPC call to execute_model timed out.
(EngineCore_DP0 pid=311) ERROR 10-01 12:00:00 [core.py:1138] EngineCore encountered a fatal error.
"""


def _rank_died(text: str) -> dict:
    causes = analyze([analyze_inputs([("server.log", text)])])["causes"]
    return next(c for c in causes if c["id"] == "rank-died")


def test_a_death_that_follows_the_timeout_it_raised_is_its_consequence() -> None:
    c = _rank_died(TIMEOUT_THEN_DEAD)
    assert c["symptom_only"] and any("consequence" in a["refs"] for a in c["against"])
    # a worker that died first, then the timeout: the death is no consequence, it leads
    died_first = ("(EngineCore_DP0 pid=311) ERROR 10-01 11:59:00 [multiproc_executor.py:150] "
                  "Worker proc VllmWorker-1 died unexpectedly, shutting down executor.\n" + TIMEOUT_THEN_DEAD)
    c = _rank_died(died_first)
    assert not c["symptom_only"] and not any("consequence" in a["refs"] for a in c["against"])


# --- an idle server's stats line is a heartbeat ---------------------------------------------

STATS = ("INFO 08-09 03:02:{s} metrics.py:406] Avg prompt throughput: {t} tokens/s, Avg generation throughput: "
         "{t} tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%\n")


def test_an_idle_servers_stats_line_is_a_heartbeat_and_the_phase_stays_where_it_was() -> None:
    compiling = "INFO 08-09 03:02:30 backends.py:120] Compiling a graph for dynamic shape with Inductor\n"
    idle = compiling + "".join(STATS.format(s=s, t="0.0", r=0) for s in (36, 46, 56))
    assert _obs(idle, "server.log").phase == "compile"
    assert _ids(idle, "server.log")[0] == "compile-in-progress"
    # a stats line with a request running is the engine at work: serving, and the compile is over
    busy = compiling + "".join(STATS.format(s=s, t="12.5", r=1) for s in (36, 46, 56))
    assert _obs(busy, "server.log").phase == "serving"
    assert _ids(busy, "server.log")[0] != "compile-in-progress"


def test_requests_running_and_no_token_made_for_several_intervals_is_a_step_that_does_not_return() -> None:
    stuck = "".join(STATS.format(s=s, t="0.0", r=1) for s in (36, 46, 56))
    pos = _obs(stuck, "server.log").positions
    assert "step-stuck" in pos and "3 stats lines" in pos["step-stuck"].frame
    assert "gpu-kernel-spin" in _ids(stuck, "server.log")[:3]
    # tokens made, or only two intervals without one: no stuck step
    assert "step-stuck" not in _obs(stuck.replace("0.0 tokens/s, Running", "4.2 tokens/s, Running"), "server.log").positions
    assert "step-stuck" not in _obs("".join(STATS.format(s=s, t="0.0", r=1) for s in (46, 56)), "server.log").positions


def test_a_last_line_that_announces_a_waiting_call_places_the_stop_in_it() -> None:
    out = "[rank0]: step 9 done\nCalling destroy_process_group()...\n"
    pos = _obs(out, "run.log").positions
    assert "teardown" in pos and "destroy_process_group" in pos["teardown"].frame
    assert "collective" in _obs("Running all_reduce ...\n", "run.log").positions
    # the call returned (a line after it), or the call names no wait: nothing placed
    assert "teardown" not in _obs(out + "Process group destroyed, exiting.\n", "run.log").positions
    assert not _obs("Calling load_my_config()...\n", "run.log").positions
