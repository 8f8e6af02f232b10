"""The generated knowledge (hangdoctor/knowledge/generated): its schema, its regexes, that the
committed files are what the generator makes from the sources, and the reader.

No downloads: ``tests/fixtures/gen_knowledge/`` holds a few source files exactly as the
generator read them (from the wheels and sdists on PyPI and the interpreter's Lib, named in
manifest.json); the generator's pure part runs on them and must reproduce, entry for entry, what
the committed files say about those files. Sources read from git snapshots (NCCL, TGI, ollama,
Triton …) are covered by hand-written snippets in their forms instead: no code of a fetched
repository is committed here.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from hangdoctor.knowledge import generated as G
from hangdoctor.knowledge.causes import CAUSES
from tools.gen_knowledge import build as B
from tools.gen_knowledge import extract_native as N
from tools.gen_knowledge import extract_py as P
from tools.gen_knowledge import selectors as S
from tools.gen_knowledge import templates as T
from tools.gen_knowledge.sources import DirSource

ROOT = Path(__file__).resolve().parent.parent
GEN = ROOT / "hangdoctor" / "knowledge" / "generated"
FIX = ROOT / "tests" / "fixtures" / "gen_knowledge"
WDOC = json.loads((GEN / "wait_points.json").read_text(encoding="utf-8"))
MDOC = json.loads((GEN / "messages.json").read_text(encoding="utf-8"))

WP_KEYS = {"id": str, "package": str, "version": str, "file": str, "line": int,
           "function": str, "native": bool, "wait_class": str, "phase": str,
           "waits_for": str, "released_by": str}
MSG_KEYS = {"id": str, "package": str, "version": str, "file": str, "line": int, "level": str,
            "template": str, "regex": str, "event": str, "phase": str, "kind": str,
            "causes": list, "meaning": str}


# ------------------------------------------------------------------ schema of the committed files
@pytest.mark.parametrize("doc", [WDOC, MDOC], ids=["wait_points", "messages"])
def test_header_names_every_source(doc: dict) -> None:
    assert doc["schema"] == 1 and doc["generated_by"].startswith("tools/gen_knowledge")
    origins = {(s["package"], s["version"]) for s in doc["sources"]}
    for s in doc["sources"]:
        assert re.fullmatch(r"pip:\S+==\S+|git:\S+@[0-9a-f]{40}|stdlib:\d+\.\d+\.\d+", s["origin"]), s
    entries = doc.get("wait_points") or doc.get("messages")
    assert entries
    for e in entries:
        assert (e["package"], e["version"]) in origins, e["id"]


def test_wait_points_schema() -> None:
    wps = WDOC["wait_points"]
    assert len({w["id"] for w in wps}) == len(wps)
    for w in wps:
        for k, t in WP_KEYS.items():
            assert isinstance(w[k], t), (w["id"], k)
            if t is str:
                assert w[k], (w["id"], k)
        assert w["module"] is None or isinstance(w["module"], str)
        assert w["wait_class"] in B.WAIT_CLASSES, w["id"]
        assert w["phase"] in B.PHASES, w["id"]
        assert w["native"] or (w["module"] and w["file"].endswith(".py") and w["line"] > 0), w["id"]


def test_messages_schema() -> None:
    msgs = MDOC["messages"]
    assert len({m["id"] for m in msgs}) == len(msgs)
    for m in msgs:
        for k, t in MSG_KEYS.items():
            assert isinstance(m[k], t), (m["id"], k)
        assert m["level"] in B.LEVELS and m["phase"] in B.PHASES and m["kind"] in B.KINDS, m["id"]
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", m["event"]), m["event"]
        for c in m["causes"]:
            assert c["cause"] in CAUSES, (m["id"], c)
            cap = 0.5 if m["kind"] == "mechanism" else 0.2
            assert 0 < c["weight"] <= cap, (m["id"], c)
        if m["kind"] in ("progress", "state"):
            assert all(c["weight"] <= 0.2 for c in m["causes"]), m["id"]
        re.compile(m["regex"])


def test_every_regex_matches_its_own_template_rendered() -> None:
    """A template with each field filled in ('7', 'x', a path) is a line the regex must find."""
    for m in MDOC["messages"]:
        assert m["syntax"] in T.TOKENIZERS, (m["id"], m["syntax"])
        toks = _tokens(m)
        for value in ("7", "x", "/tmp/a b.lock"):
            line = T.render_sample(toks, value)
            assert re.search(m["regex"], line), (m["id"], m["regex"], line)
            assert m["literal"] in line and m["key"] in re.findall(r"\w+", line), m["id"]


def _tokens(m: dict) -> list[T.Token]:
    """The template's tokens, read back with the grammar the generator recorded."""
    return T.TOKENIZERS[m["syntax"]](m["template"])


def test_counts_are_what_the_docs_say_roughly() -> None:
    """Enough to be worth reading: every wait class and most packages are represented."""
    classes = {w["wait_class"] for w in WDOC["wait_points"]}
    assert classes == set(B.WAIT_CLASSES)
    pkgs = {m["package"] for m in MDOC["messages"]}
    assert {"torch", "nccl", "vllm", "sglang", "huggingface_hub", "text-generation-inference",
            "llama-cpp-python", "ollama", "triton-core", "triton-python-backend"} <= pkgs


# ------------------------------------------------------------------ committed == generated
def _fixture_sources() -> list[DirSource]:
    manifest = json.loads((FIX / "manifest.json").read_text(encoding="utf-8"))
    return [DirSource(FIX / d, v["package"], v["version"], v["origin"]) for d, v in sorted(manifest.items())]


@pytest.mark.parametrize("src", _fixture_sources(), ids=lambda s: s.origin)
def test_committed_entries_are_what_the_generator_makes_from_the_sources(src: DirSource) -> None:
    files = set(src.names())
    waits = [w for w in S.WAITS if B.pick_sources(w.src, [src])]
    msgs = [m for m in S.MESSAGES if B.pick_sources(m.src, [src])]
    wdoc, mdoc, _errors = B.build([src], waits, msgs)  # files absent from the fixture: errors

    # a fixture may be the head of a long file (manifest.json says "cut"): what lies past its
    # last line is not compared
    lines = {f: src.read(f).count(b"\n") + 1 for f in files}

    def mine(entries: list[dict]) -> list[dict]:
        return [e for e in entries if e["package"] == src.package and e["version"] == src.version
                and e["file"] in files and e["line"] <= lines[e["file"]]]

    want_w, got_w = mine(WDOC["wait_points"]), mine(wdoc["wait_points"])
    want_m, got_m = mine(MDOC["messages"]), mine(mdoc["messages"])
    assert got_w or got_m, f"the fixture {src.origin} yields nothing"
    assert got_w == want_w
    assert got_m == want_m


def test_output_is_deterministic() -> None:
    srcs = _fixture_sources()
    a = B.build(srcs, S.WAITS, S.MESSAGES)
    b = B.build(list(reversed(srcs)), S.WAITS, S.MESSAGES)
    assert B.dumps(a[0]) == B.dumps(b[0]) and B.dumps(a[1]) == B.dumps(b[1])


def test_a_selector_that_finds_nothing_is_an_error() -> None:
    src = _fixture_sources()[0]
    bad = B.Wait("x", src.package, ["no/such/file.py"], "lock", "any", "w", "r", name="nope")
    _, _, errors = B.build([src], [bad], [])
    assert any("no file matching" in e for e in errors) and any("found nothing" in e for e in errors)


# ------------------------------------------------------------------ the extractors, on snippets
def test_templates_to_regex() -> None:
    toks = T.percent_tokens("rank %d waited %.2f s on %s (%zu bytes, 100%%) at %p")
    rx = T.to_regex(toks)
    assert re.search(rx, "rank 3 waited 1.50 s on store (12 bytes, 100%) at 0x7f00")
    assert not re.search(rx, "rank x waited 1.50 s on store (12 bytes, 100%) at 0x7f00")
    assert T.to_regex(T.brace_tokens("took {:.2f}s for {name} {{literal}}")) == (
        r"took\ " + r"(?:[-+]?[\d.]+(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf))" + r"s\ for\ .*?\ \{literal\}")
    assert T.key_word(T.percent_tokens("%sfoo bar baz_qux%d")) == "bar"


def test_a_field_width_pads_a_number_with_spaces() -> None:
    # printf pads "%10.2f" / "%5d" on the left ("prompt eval time =     102.12 ms /     5 tokens")
    rx = T.to_regex(T.percent_tokens("eval time = %10.2f ms / %5d tokens"))
    assert re.search(rx, "eval time =     102.12 ms /     5 tokens")
    assert re.search(rx, "eval time = 102.12 ms / 5 tokens")
    assert not re.search(rx, "eval time =     x ms / 5 tokens")
    # a left-aligned text field pads on its right, inside its own wildcard: no change
    assert T.to_regex(T.percent_tokens("x %-8s y")) == T.to_regex(T.percent_tokens("x %s y"))
    from hangdoctor.knowledge.generated import match_message
    line = "print_timings: prompt eval time =     102.12 ms /     5 tokens (   20.42 ms per token,    48.97 tokens per second)"
    assert any(m["package"] == "llama-cpp-python" for m in match_message(line))


def test_python_messages_from_a_snippet() -> None:
    src = '''
import logging
logger = logging.getLogger(__name__)
class Q:
    def acquire(self, t):
        logger.info("No block found in %s seconds", t)
        logger.warning(f"Still waiting on {self.path} after {t:.1f} s")
        raise TimeoutError("RPC call to {} timed out.".format(t))
def f():
    logger.debug("plain %s text")
def g(n):
    msg = f"Rendezvous complete for {n} nodes"
    logger.info(msg)
    print(f"Autotuning kernel {n}")
    print("to a file", file=sys.stderr)
'''
    fns, msgs = P.parse(src)
    assert [f.qualname for f in fns] == ["Q.acquire", "f", "g"]
    got = [(m.function, m.level, m.via, T.to_template(m.tokens)) for m in msgs]
    assert got == [("Q.acquire", "info", "log", "No block found in %s seconds"),
                   ("Q.acquire", "warning", "log", "Still waiting on {self.path} after {t:.1f} s"),
                   ("Q.acquire", "error", "raise", "RPC call to {} timed out."),
                   ("f", "debug", "log", "plain %s text"),
                   ("g", "info", "log", "Rendezvous complete for {n} nodes"),  # through the variable
                   ("g", "info", "print", "Autotuning kernel {n}")]  # stdout prints only
    # logging substitutes %-fields only when arguments follow: a lone "%s" is literal text
    assert msgs[3].tokens == [("lit", "plain %s text")]


def test_c_messages_join_adjacent_literals_and_pri_macros() -> None:
    src = 'x;\n  WARN("Net : Connect to %s failed : %s"\n       " (after %" PRIu64 " tries)", a, b, n);\n' \
          '  INFO(NCCL_INIT|NCCL_NET, "Bootstrap : Using %s", name);\n  WARN(msg);\n'
    got = N.c_messages(src, S.NCCL_MACROS)
    assert [(m.line, m.level, T.to_template(m.tokens)) for m in got] == [
        (2, "warning", "Net : Connect to %s failed : %s (after %lu tries)"),
        (4, "info", "Bootstrap : Using %s")]


def test_native_names() -> None:
    assert N.qualified_name("_ZN4c10d8TCPStore6doWaitEN3c108ArrayRefINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEEENSt6chrono8durationIlSt5ratioILl1ELl1000EEEE") == "c10d::TCPStore::doWait"
    assert N.qualified_name("_ZNK4c10d16ProcessGroupNCCL8WorkNCCL11isCompletedEv") == "c10d::ProcessGroupNCCL::WorkNCCL::isCompleted"
    assert N.qualified_name("ncclCommInitRank") == "ncclCommInitRank"
    assert N.qualified_name("_ZN4c10d8TCPStoreC2ESsRKNS_15TCPStoreOptionsE") == "c10d::TCPStore::TCPStore"
    assert N.qualified_name("_ZTVN4c10d8TCPStoreE") is None
    hdr = "extern __host__ cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream);\n" \
          "CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned int f);\n"
    assert N.header_functions(hdr, r"cuda\w+|cu\w+") == [("cudaStreamSynchronize", 1), ("cuIpcOpenMemHandle", 2)]
    assert N.printable_strings(b"\x00\x01Socket Timeout\x00ab\x00Watchdog caught\xff", 8) == ["Socket Timeout", "Watchdog caught"]


def test_rust_and_go_messages() -> None:
    rs = 'tracing::info!("Waiting for shard to be ready...", rank = rank);\n' \
         'tracing::error!("Shard {rank} failed to start");\n'
    assert [T.to_template(m.tokens) for m in N.rust_messages(rs)] == [
        "Waiting for shard to be ready...", "Shard {rank} failed to start"]
    go = 'slog.Info("waiting for llama runner to start responding")\nreturn fmt.Errorf("timed out waiting for llama runner to start: %w", err)\n'
    assert [(m.level, T.to_template(m.tokens)) for m in N.go_messages(go)] == [
        ("info", "waiting for llama runner to start responding"),
        ("error", "timed out waiting for llama runner to start: %w")]


def test_llama_cpp_macros() -> None:
    """llama.cpp's log macros: the format argument (SLT_* after the slot), a lone "%s" whose
    text is the next literal, a macro name pasted before the first literal, PRI macros."""
    src = ('        SRV_INF("%s", "model loaded\\n");\n'
           '    SLT_WRN(slot, "slot context shift, n_keep = %d, n_left = %d, n_discard = %d\\n", k, l, d);\n'
           '    SLT_INF(*this,\n            "prompt processing, n_tokens = %6d\\n", n);\n'
           '    LLAMA_LOG_INFO("%s: offloaded %d/%d layers to GPU\\n", __func__, a, b);\n'
           '    GGML_LOG_ERROR(GGML_CUDA_NAME " error: %s\\n", msg);\n'
           '    SRV_INF("n_pre_decode = %" PRId64 "\\n", n);\n'
           '    LOG_WRN("%s\\n", ss.str().c_str());\n')
    got = [(m.line, m.level, T.to_template(m.tokens)) for m in N.c_messages(src, S.LLAMA_MACROS)]
    assert got == [(1, "info", "model loaded\n"),
                   (2, "warning", "slot context shift, n_keep = %d, n_left = %d, n_discard = %d\n"),
                   (3, "info", "prompt processing, n_tokens = %6d\n"),
                   (5, "info", "%s: offloaded %d/%d layers to GPU\n"),
                   (6, "error", "%s error: %s\n"),
                   (7, "info", "n_pre_decode = %ld\n"),
                   (8, "warning", "%s\n")]


def test_ollama_2024_cpp_runner_macros() -> None:
    """ollama's C++ runner (llm/ext_server/server.cpp, 2024): LOG_INFO("text", {json fields}) is
    the text; a format held in a buffer is skipped; llama.cpp's LLAMA_LOG_INFO is not LOG_INFO."""
    src = ('                    LOG_INFO("slot context shift", {\n'
           '                        {"id_slot", slot.id}, {"n_keep", n_keep}});\n'
           '    LOG_VERBOSE("no slot is available", {{"task_id", task.id}});\n'
           '        LOG_DEBUG(buffer, {{"id_slot", id}});\n'
           '    LOG_WRN("%s : failed to find free space in the KV cache, retrying with smaller n_batch = %d\\n", __func__, n);\n'
           '    LLAMA_LOG_INFO("%s: offloaded %d/%d layers to GPU\\n", __func__, a, b);\n')
    got = [(m.line, m.level, T.to_template(m.tokens)) for m in N.c_messages(src, S.OLD_SERVER_MACROS)]
    assert got == [(1, "info", "slot context shift"),
                   (3, "debug", "no slot is available"),
                   (5, "warning", "%s : failed to find free space in the KV cache, retrying with smaller n_batch = %d\n"),
                   (6, "info", "%s: offloaded %d/%d layers to GPU\n")]


def test_llama_cpp_2023_server_macros() -> None:
    """llama.cpp's server of 2023 (llama-cpp-python 0.2.24): LOG_TEE(fmt, ...) has no level (info),
    LOG_INFO("text", {fields}) is the text, and the newer macros still read as before."""
    src = ('        LOG_TEE("slot %i is processing [task id: %i]\\n", slot->id, slot->task_id);\n'
           '    LOG_INFO("HTTP server listening", log_data);\n'
           '            LOG_WARNING("embedding disabled", {{"params.embedding", params.embedding}});\n'
           '    SRV_INF("%s", "model loaded\\n");\n')
    got = [(m.line, m.level, T.to_template(m.tokens)) for m in N.c_messages(src, S.LLAMA_OLD_MACROS)]
    assert got == [(1, "info", "slot %i is processing [task id: %i]\n"),
                   (2, "info", "HTTP server listening"),
                   (3, "warning", "embedding disabled"),
                   (4, "info", "model loaded\n")]


def test_triton_stream_and_concatenated_messages() -> None:
    """C++ streams and std::string concatenations: each non-literal operand is a %s field;
    std::endl is dropped; an expression with no literal, or a literal with '%', is skipped."""
    src = ('    LOG_INFO << "loading: " << model_id << ":" << version;\n'
           '  LOG_VERBOSE(1) << "Stopping backend thread for " << name_ << "..." << std::endl;\n'
           '  LOG_MESSAGE(\n      TRITONSERVER_LOG_INFO,\n'
           '      (std::string("Starting Python backend stub: ") + launch_command).c_str());\n'
           '    return TRITONSERVER_ErrorNew(\n        TRITONSERVER_ERROR_INTERNAL,\n'
           '        (std::string("Stub process \'") + instance_state->Name() +\n'
           '         "\' is not healthy.")\n            .c_str());\n'
           '  LOG_ERROR << err_msg;\n'
           '  LOG_WARNING << "at 100% of " << x;\n'
           '    std::cerr << "ggml_vulkan: Device with index " << dev_num << " does not exist." << std::endl;\n'
           '  LOG_MESSAGE(TRITONSERVER_LOG_WARN, "Forcing CPU only input tensors.");\n')
    got = [(m.line, m.level, m.macro, T.to_template(m.tokens)) for m in N.stream_messages(src)]
    assert got == [(1, "info", "LOG_INFO", "loading: %s:%s"),
                   (2, "debug", "LOG_VERBOSE", "Stopping backend thread for %s..."),
                   (3, "info", "LOG_MESSAGE", "Starting Python backend stub: %s"),
                   (6, "error", "TRITONSERVER_ErrorNew", "Stub process '%s' is not healthy."),
                   (13, "warning", "cerr", "ggml_vulkan: Device with index %s does not exist."),
                   (14, "warning", "LOG_MESSAGE", "Forcing CPU only input tensors.")]


def test_go_sprintf_and_named_format() -> None:
    go = ('const msg = "%s part %d stalled; retrying. If this persists, press ctrl-c to exit."\n'
          'slog.Info(fmt.Sprintf(msg, b.Digest[7:19], part.N))\n'
          'slog.Info(fmt.Sprintf("%s part %d attempt %d failed: %v, retrying in %s", d, n, t, err, s))\n'
          'slog.Info(other)\n')
    assert [(m.line, m.level, T.to_template(m.tokens)) for m in N.go_messages(go)] == [
        (2, "info", "%s part %d stalled; retrying. If this persists, press ctrl-c to exit."),
        (3, "info", "%s part %d attempt %d failed: %v, retrying in %s")]


def test_sdist_source_reads_the_archive_without_unpacking(tmp_path: Path) -> None:
    import io
    import tarfile

    from tools.gen_knowledge.sources import SdistSource

    path = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = b'LOG_INF("hello %s\\n", x);\n'
        info = tarfile.TarInfo("pkg-1.0/vendor/lib/a.cpp")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    src = SdistSource(path, "pkg", "1.0")
    assert src.names() == ["vendor/lib/a.cpp"] and src.match("vendor/**/*.cpp") == ["vendor/lib/a.cpp"]
    assert src.read("vendor/lib/a.cpp") == data
    assert src.describe() == {"package": "pkg", "version": "1.0", "origin": "pip:pkg==1.0", "archive": "sdist"}


# ------------------------------------------------------------------ the reader
@pytest.mark.parametrize("function,where,wait_class,package", [
    ("recv_bytes", "/usr/lib/python3.11/multiprocessing/connection.py", "ipc-queue", "cpython"),
    ("_recv_bytes", "multiprocessing.connection", "ipc-queue", "cpython"),
    ("acquire_read", "/opt/venv/lib/python3.12/site-packages/vllm/distributed/device_communicators/shm_broadcast.py:466",
     "ipc-queue", "vllm"),
    ("all_reduce", "torch/distributed/distributed_c10d.py", "collective", "torch"),
    ("barrier", "site-packages/torch/distributed/distributed_c10d.py", "collective", "torch"),
    ("wait", "torch/utils/file_baton.py", "lock", "torch"),
    ("c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::duration<long, std::ratio<1l, 1000l> >)",
     "libtorch_cpu.so", "store", "torch"),
    ("#4 0x00007f1c in ncclCommInitRank () from /usr/lib/libnccl.so.2", None, "comm-init", "nccl"),
    ("ncclCommInitRank+0x1f", None, "comm-init", "nccl"),
    ("cudaStreamSynchronize", None, "gpu-sync", "nvidia-cuda-runtime-cu12"),
    ("cuIpcOpenMemHandle_v2", "libcuda.so.1", "cuda-ipc", "nvidia-cuda-runtime-cu12"),
    ("c10d::ProcessGroupNCCL::WorkNCCL::synchronize()", None, "collective", "torch"),
    ("event_loop_overlap", "sglang/srt/managers/scheduler.py", "idle-wait", "sglang"),
    ("acquire", "filelock/_api.py", "lock", "filelock"),
    ("_call_with_frames_removed", "<frozen importlib._bootstrap>", "import", "cpython"),
    ("acquire", "<frozen importlib._bootstrap>", "lock", "cpython"),
])
def test_classify_frame_finds_the_wait_point(function: str, where: str | None, wait_class: str, package: str) -> None:
    wp = G.classify_frame(function, where)
    assert wp is not None, function
    assert (wp["wait_class"], wp["package"]) == (wait_class, package)


@pytest.mark.parametrize("function,where", [
    ("recv_bytes", "myapp/connection.py"),  # same name, another file
    ("all_reduce", None),  # a bare Python name without its file is not trusted
    ("main", "serve.py"),
    ("c10d::TCPStore::setTimeout", "libtorch_cpu.so"),
    ("", None),
])
def test_classify_frame_rules_out_frames_it_does_not_know(function: str, where: str | None) -> None:
    assert G.classify_frame(function, where) is None


@pytest.mark.parametrize("line,event", [
    ("[rank1]:[E1201 10:00:00.000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds", "nccl-watchdog-timeout"),
    ("INFO 12-01 10:00:00 [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds. "
     "This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation).",
     "shm-broadcast-wait"),
    ("ERROR 12-01 10:00:01 [multiproc_executor.py:154] Worker proc VllmWorker-1 died unexpectedly, shutting down executor.",
     "worker-died"),
    ("node1:123:456 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node2<5555>",
     "nccl-socket"),
    ("2024-01-01T00:00:00.000Z  INFO text_generation_launcher: Waiting for shard to be ready... rank=0", "tgi-shard-wait"),
    ("[2025-01-01 10:00:00] Watchdog timeout (self.watchdog_timeout=300)", "scheduler-watchdog-timeout"),
    # lines as the new families' format strings print them (llama-server's slot prefix, Triton's
    # glog prefix, ollama's slog text handler)
    ("slot update_slots: id  0 | task 12 | slot context shift, n_keep = 0, n_left = 4094, n_discard = 2047",
     "context-shift"),
    ("srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, "
     "off = 0, n_batch = 256, ret = 1", "kv-cache-full"),
    ("E1201 10:00:00.000123 77 python_be.cc:2684] Stub process 'model_0_0' is not healthy.", "stub-unhealthy"),
    ("I1201 10:00:00.000123 77 model_lifecycle.cc:473] loading: model_0:1", "model-load"),
    ('time=2025-01-01T00:00:00.000Z level=ERROR source=sched.go:1 msg="error loading llama server" '
     'error="timed out waiting for llama runner to start - progress 0.00 - "', "runner-start-timeout"),
    ('time=2025-01-01T00:00:00.000Z level=INFO source=download.go:1 msg="abcdef012345 part 3 stalled; '
     'retrying. If this persists, press ctrl-c to exit, then \'ollama pull\' to find a faster connection."',
     "pull-part-stalled"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
     "store-timeout"),
    # ollama of 2024: the pull's shorter wording, the C++ runner's JSON lines, the vendored llama.cpp
    ('time=2024-01-01T00:00:00.000Z level=INFO source=download.go:1 msg="0123456789ab part 7 stalled; retrying"',
     "pull-part-stalled"),
    ('{"function":"update_slots","level":"INFO","line":1,"msg":"slot context shift","n_keep":1,"tid":"1"}',
     "context-shift"),
    ('{"function":"launch_slot_with_data","level":"DEBUG","line":1,"msg":"no slot is available","task_id":3}',
     "no-free-slot"),
    ("llm_load_tensors: offloading 32 repeating layers to GPU", "model-load"),
    ("llama_model_loader: loaded meta data with 25 key-value pairs and 291 tensors from /m/blob (version GGUF V3 (latest))",
     "model-load"),
])
def test_match_message_reads_real_lines(line: str, event: str) -> None:
    events = [m["event"] for m in G.match_message(line)]
    assert event in events, events


@pytest.mark.parametrize("line,event", [
    ("slot 0 is processing [task id: 2]", "slot-progress"),
    ("slot unavailable", "no-free-slot"),
])
def test_match_message_reads_the_2023_llama_server(line: str, event: str) -> None:
    """llama.cpp's server of late 2023 (examples/server/server.cpp), read from the llama-cpp-python
    0.2.24 sdist: its lines name that version."""
    got = [(m["package"], m["version"], m["event"]) for m in G.match_message(line)]
    assert ("llama-cpp-python", "0.2.24", event) in got, got
    assert [m["event"] for m in G.match_message("slot 0 is thinking about task 2")] == []


def test_an_older_llama_cpp_adds_only_what_the_newer_does_not_print() -> None:
    by_version: dict[str, set[str]] = {}
    for m in MDOC["messages"]:
        if m["package"] == "llama-cpp-python":
            by_version.setdefault(m["version"], set()).add(m["template"])
    assert set(by_version) == {"0.3.36", "0.2.24"}
    assert not by_version["0.2.24"] & by_version["0.3.36"]


def test_match_message_reads_a_line_cut_short_and_prefers_the_whole_template() -> None:
    cut = "(EngineCore) INFO ... [shm_broadcast.py:681] No available shared memory broadcast block found in 60 seconds. This ty"
    assert [m["event"] for m in G.match_message(cut)][:1] == ["shm-broadcast-wait"]
    done = ("node1:1:2 [0] NCCL INFO ncclCommInitRank comm 0x5 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
            "busId 1000 commId 0x9 - Init COMPLETE")
    best = G.match_message(done)[0]
    assert best["template"].endswith("Init COMPLETE"), best["template"]
    assert re.search(best["regex_full"], done)


@pytest.mark.parametrize("line", [
    "INFO:     127.0.0.1:5000 - \"POST /v1/completions HTTP/1.1\" 200 OK",
    "the watchdog may time out, said the poster",
    "",
])
def test_match_message_is_quiet_on_ordinary_lines(line: str) -> None:
    assert G.match_message(line) == []


def test_match_message_is_fast() -> None:
    G.match_message("warm")
    lines = ["INFO 12-01 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
             "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%"] * 29000 + [
        "ERROR 12-01 [multiproc_executor.py:154] Worker proc VllmWorker-1 died unexpectedly, "
        "shutting down executor."] * 1000
    t = time.process_time()
    hits = sum(bool(G.match_message(line)) for line in lines)
    spent = time.process_time() - t
    assert hits >= 1000
    assert spent < 3.0, spent  # CPU time, so a loaded machine does not fail it; ~0.4 s alone


def test_generator_cli_refuses_a_bad_repo_argument(capsys: pytest.CaptureFixture[str]) -> None:
    from tools.gen_knowledge.__main__ import main

    assert main(["--repo", "nccl"]) == 2
    assert main(["--repo", "nccl=/no/such/dir"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "NAME=PATH" in err
