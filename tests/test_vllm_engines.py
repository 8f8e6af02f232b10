"""Engine models (hangdoctor/engines) and the engine-progress sources, without vLLM: roles and
phases from titles and frames, requests in flight from the kernel's socket table (real sockets
on 127.0.0.1), /metrics parsing, the canary against a small local HTTP server, the verdict."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from hangdoctor.collect import canary, inflight, metrics
from hangdoctor.engines import BY_NAME, detect
from hangdoctor.engines import spec as eb
from hangdoctor.evidence.engine_view import in_flight
from hangdoctor.triage.engine_verdict import engine_verdict


def fr(name: str, file: str, line: int = 1) -> Any:
    return SimpleNamespace(name=name, file=file, line=line, native=False)


# ------------------------------------------------------------------ roles


@pytest.mark.parametrize(
    "engine,cmdline,role,rank",
    [
        ("vllm", "VLLM::EngineCore", eb.ENGINE_CORE, None),
        ("vllm", "VLLM::EngineCore_DP1", eb.ENGINE_CORE, 1),
        ("vllm", "VLLM::Worker_TP3", eb.WORKER, 3),
        ("vllm", "VLLM::Worker_PP1_TP0", eb.WORKER, 0),
        ("vllm", "VLLM::Worker", eb.WORKER, None),
        ("vllm", "VLLM::Worker_TP", eb.WORKER, None),  # a zombie's comm: 15 characters
        ("vllm", "python3 -m vllm.entrypoints.openai.api_server --model m", eb.API_SERVER, None),
        ("vllm", "/usr/bin/python3 /usr/local/bin/vllm serve m --tp 2", eb.API_SERVER, None),
        ("vllm", "python -c from multiprocessing.resource_tracker import main;main(31)",
         eb.RESOURCE_TRACKER, None),
        ("vllm", "VLLM::DPCoordinator", eb.DP_CONTROLLER, None),
        ("sglang", "sglang::scheduler_TP1", eb.WORKER, 1),
        ("sglang", "sglang::scheduler_DP1_TP0", eb.WORKER, 0),
        ("sglang", "sglang::detokenizer", eb.DETOKENIZER, None),
        ("sglang", "sglang::data_parallel_controller", eb.DP_CONTROLLER, None),
        ("sglang", "python3 -m sglang.launch_server --model-path m --tp 2", eb.API_SERVER, None),
        ("tgi", "text-generation-launcher --model-id m --num-shard 2", eb.LAUNCHER, None),
        ("tgi", "text-generation-router --max-concurrent-requests 128", eb.API_SERVER, None),
        ("tgi", "/opt/conda/bin/python3 /opt/conda/bin/text-generation-server serve m",
         eb.WORKER, None),
        ("trtllm", "/usr/bin/python3 /usr/local/bin/trtllm-serve m --tp_size 2",
         eb.API_SERVER, None),
        ("trtllm", "python3 -m mpi4py.futures.server", eb.WORKER, None),
        ("trtllm", "/opt/tritonserver/bin/tritonserver --model-repository=/m", eb.API_SERVER, None),
    ],
)
def test_roles_from_titles(engine: str, cmdline: str, role: str, rank: int | None) -> None:
    got_role, got_rank, _ = BY_NAME[engine].role_of(cmdline)
    assert (got_role, got_rank) == (role, rank)


def test_detect_names_the_engine_of_a_tree_and_nothing_else() -> None:
    assert detect(["python -m vllm.entrypoints.openai.api_server", "VLLM::EngineCore"]).name == "vllm"
    assert detect(["python -m sglang.launch_server", "sglang::scheduler_TP0"]).name == "sglang"
    assert detect(["text-generation-launcher", "text-generation-router"]).name == "tgi"
    assert detect(["python train.py --rank 0", "sleep 10"]) is None


def test_health_semantics_per_engine() -> None:
    assert not BY_NAME["vllm"].health.proves_generation
    assert BY_NAME["sglang"].health.proves_generation
    assert "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0" in BY_NAME["sglang"].health.text
    assert "router" in BY_NAME["tgi"].health.text
    assert not BY_NAME["trtllm"].health.proves_generation


# ------------------------------------------------------------------ phases

VLLM = BY_NAME["vllm"]


def test_compiling_and_running_compiled_code_are_told_apart() -> None:
    compiling = [fr("compile_fx", "torch/_inductor/compile_fx.py"),
                 fr("_compile", "torch/_dynamo/convert_frame.py"),
                 fr("GPUModelRunner.profile_run", "vllm/v1/worker/gpu_model_runner.py")]
    assert VLLM.phase_of_frames(compiling, eb.WORKER)[0] == eb.COMPILING
    running = [fr("OpOverload.__call__", "torch/_ops.py"),
               fr("Runner.call", "abc123.py"),
               fr("CompiledFxGraph.__call__", "torch/_inductor/output_code.py"),
               fr("DisableContext.__call__.<locals>._fn", "torch/_dynamo/eval_frame.py"),
               fr("LlamaModel.forward", "vllm/model_executor/models/llama.py"),
               fr("GPUModelRunner.execute_model", "vllm/v1/worker/gpu_model_runner.py"),
               fr("WorkerProc.worker_busy_loop", "vllm/v1/executor/multiproc_executor.py")]
    assert VLLM.phase_of_frames(running, eb.WORKER)[0] == eb.STEP
    warmup = running[:4] + [fr("GPUModelRunner._dummy_run", "vllm/v1/worker/gpu_model_runner.py"),
                            fr("GPUModelRunner.profile_run", "vllm/v1/worker/gpu_model_runner.py")]
    assert VLLM.phase_of_frames(warmup, eb.WORKER)[0] == eb.WARMING_UP


def test_idle_event_loop_only_when_the_loop_is_innermost() -> None:
    idle = [fr("Runner.run", "asyncio/runners.py"), fr("run", "uvloop/__init__.py")]
    assert VLLM.phase_of_frames(idle, eb.API_SERVER)[0] == eb.SERVING
    blocked = [fr("sleep", "mymiddleware.py"), fr("Mw.__call__", "mymiddleware.py")] + idle
    assert VLLM.phase_of_frames(blocked, eb.API_SERVER)[0] != eb.SERVING


def test_sglang_scheduler_phases() -> None:
    sg = BY_NAME["sglang"]
    idle = [fr("Socket.recv_pyobj", "zmq/sugar/socket.py"),
            fr("Scheduler.recv_requests", "sglang/srt/managers/scheduler.py"),
            fr("Scheduler.event_loop_overlap", "sglang/srt/managers/scheduler.py")]
    assert sg.phase_of_frames(idle, eb.WORKER)[0] == eb.IDLE
    coll = [fr("broadcast_pyobj", "sglang/srt/utils.py"),
            fr("RequestReceiver._broadcast_reqs_across_ranks",
               "sglang/srt/managers/scheduler_components/request_receiver.py")]
    assert sg.phase_of_frames(coll, eb.WORKER)[0] == eb.IN_COLLECTIVE


def test_phases_from_log_lines() -> None:
    lines = ["(Worker pid=7) INFO Starting to load model /m...",
             "(Worker pid=7) INFO Loading weights took 0.00 seconds",
             "(EngineCore pid=6) INFO init engine (profile, create kv cache, warmup model) took 27.1 seconds"]
    assert VLLM.phase_of_log(lines[:1])[0] == eb.LOADING
    assert VLLM.phase_of_log(lines[:2])[0] == eb.WARMING_UP
    assert VLLM.phase_of_log(lines)[0] == eb.IDLE
    assert VLLM.is_stats_line("Engine 000: Avg prompt throughput: 0.3 tokens/s, Avg generation "
                              "throughput: 0.4 tokens/s, Running: 0 reqs, Waiting: 0 reqs")


def test_deaths_from_log_lines_name_the_process() -> None:
    lines = ["(Worker_TP1 pid=29702) INFO ready",
             "(EngineCore pid=28834) ERROR [multiproc_executor.py:315] Worker proc VllmWorker-1 "
             "died unexpectedly (exit code: None), shutting down executor."]
    [d] = VLLM.deaths_in_log(lines)
    assert (d["role"], d["pid"]) == (eb.WORKER, 29702)
    assert VLLM.deaths_in_log(["INFO all fine"]) == []


# ------------------------------------------------------------------ requests in flight


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    yield srv
    srv.close()


def test_a_request_that_gets_no_answer_is_in_flight(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    server_side, _ = listener.accept()
    try:
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.4)
        got = inflight.connections([port])
        assert got["source"] == "sock_diag"
        [conn] = got["connections"]  # the server side only: local port is the API port
        assert conn["bytes_received"] > 0 and conn["bytes_acked"] == 0
        assert in_flight(conn, window_ms=300.0) is True
        server_side.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        time.sleep(0.05)
        [conn] = inflight.connections([port])["connections"]
        assert in_flight(conn, window_ms=300.0) is False  # answered within the window
        # keep-alive, answered, quiet since: not in flight either
        time.sleep(0.4)
        [conn] = inflight.connections([port])["connections"]
        assert in_flight(conn, window_ms=300.0) is False
    finally:
        client.close()
        server_side.close()


def test_proc_net_fallback_lists_the_connection_without_timings(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    server_side, _ = listener.accept()
    try:
        conns = inflight._proc_net("/proc", {port})
        assert len(conns) == 1 and conns[0]["local_port"] == port
        assert in_flight(conns[0], 1000.0) is None  # no timings: unknown, not "idle"
    finally:
        client.close()
        server_side.close()


# ------------------------------------------------------------------ /metrics and the canary

METRICS_TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:generation_tokens_total{engine="0",model_name="m"} 4.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_bucket{le="0.3"} 5.0
python_gc_objects_collected_total{generation="0"} 120.0
"""


def test_metrics_parse_sums_label_sets_and_keeps_engine_families() -> None:
    v = metrics.parse(METRICS_TEXT)
    assert v["vllm:request_success_total"] == 5.0
    assert v["vllm:num_requests_running"] == 1.0
    assert not any(k.endswith("_bucket") or k.startswith("python_") for k in v)
    pair = metrics.pair({"ok": True, "values": {"a": 1.0}}, {"ok": True, "values": {"a": 3.0}})
    assert pair["delta"] == {"a": 2.0}


class _Api(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
        if self.path == "/metrics":
            self._send(200, METRICS_TEXT.encode())
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "tiny"}]}).encode())
        else:
            self._send(404, b"")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "body": body})
        self._send(200, json.dumps({"choices": [{"text": " x"}]}).encode())


@pytest.fixture
def api() -> Iterator[int]:
    _Api.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_metrics_fetch_and_canary_against_an_openai_style_server(api: int) -> None:
    m = metrics.fetch(api, "127.0.0.1", 2.0)
    assert m["ok"] and m["values"]["vllm:generation_tokens_total"] == 4.0
    res = canary.generate(api, "127.0.0.1", "sk-test-123", 3.0)
    assert res["sent"] and res["ok"] and res["model"] == "tiny"
    post = next(s for s in _Api.seen if s["path"] == "/v1/completions")
    assert post["body"]["max_tokens"] == 1 and post["body"]["model"] == "tiny"
    assert post["auth"] == "Bearer sk-test-123"
    assert "sk-test" not in json.dumps(res)  # the key is in the header only


def test_canary_gives_up_in_time_on_a_server_that_never_answers(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    t0 = time.monotonic()
    res = canary.generate(port, "127.0.0.1", None, 1.0)
    assert time.monotonic() - t0 < 3.0
    assert not res["ok"] and not res["sent"] and "v1/models" in res["error"]


# ------------------------------------------------------------------ the verdict


def test_engine_verdict() -> None:
    stuck = {"engine": {"state": "stuck", "reason": "work in flight, no progress"},
             "answering": True}
    v, why = engine_verdict(stuck)
    assert v == "hung" and "/health answers" in why
    assert engine_verdict({"engine": {"state": "idle", "reason": "idle"}, "answering": True}) == \
        ("healthy", "idle")
    assert engine_verdict({"engine": {"state": "moving", "reason": "serving"},
                           "answering": True})[0] == "healthy"
    # moving without an answering API (starting, compiling): the general rules decide
    assert engine_verdict({"engine": {"state": "moving", "reason": "x"}, "answering": False}) is None
    assert engine_verdict({"engine": {"state": "dead", "reason": "lost"}})[0] == "dead"
    assert engine_verdict({}) is None


def test_the_rank_stuck_in_user_code_is_named_not_its_spinning_peer() -> None:
    """TP=2 recorded with rank 1 stopped, rewritten so that rank 1 is running (not stopped)
    but parked in user code: the peer spinning in the compiled graph is not the one named."""
    import copy
    from pathlib import Path

    from hangdoctor.triage.analyze import analyze

    snap = json.loads((Path(__file__).parent / "fixtures" / "snapshots" /
                       "vllm-tp2-rank-stopped.json").read_text())
    snap = copy.deepcopy(snap)
    tp1 = next(p for p in snap["processes"] if (p.get("cmdline") or [""])[0] == "VLLM::Worker_TP1")
    tp1["status"] = tp1["status_end"] = "S"
    user_code = [{"name": "_wait_while", "short_filename": "my_plugin.py", "line": 28},
                 {"name": "FlagLogitsProcessor.apply", "short_filename": "my_plugin.py", "line": 48},
                 {"name": "GPUModelRunner.sample_tokens",
                  "short_filename": "vllm/v1/worker/gpu_model_runner.py", "line": 4340},
                 {"name": "WorkerProc.worker_busy_loop",
                  "short_filename": "vllm/v1/executor/multiproc_executor.py", "line": 1041}]
    for sample in snap["stacks"][str(tp1["pid"])]["samples"]:
        for t in sample["threads"]:
            if t["name"] == "MainThread":
                t["frames"] = copy.deepcopy(user_code)
    a = analyze([snap])
    assert a["verdict"] == "hung"
    top = a["causes"][0]
    assert top["id"] == "nccl-desync", [(c["id"], c["score"]) for c in a["causes"]]
    assert [o["pid"] for o in top["odd_ones_out"]] == [tp1["pid"]]


def _fixture(name: str) -> dict[str, Any]:
    from pathlib import Path

    return json.loads((Path(__file__).parent / "fixtures" / "snapshots" / f"vllm-{name}.json")
                      .read_text())


def test_a_health_check_that_runs_no_step_does_not_speak_for_the_step() -> None:
    """port.health: vLLM's 200 still rules out start-up causes, never a stuck step; for an
    engine whose /health generates (SGLang) the 200 does speak against it."""
    from hangdoctor.checkapi.registry import builtin_checks
    from hangdoctor.evidence.model import Evidence

    port_health = next(c for c in builtin_checks() if c.id == "port.health")
    snap = _fixture("stuck-step")
    against = {s.cause for s in port_health(Evidence([snap])).signals if s.weight < 0}
    assert "post-load-deadlock" in against and "request-deadlock" not in against
    for p in snap["processes"]:  # the same tree, titled as SGLang's
        argv = p.get("cmdline") or []
        if argv and "vllm.entrypoints.openai.api_server" in argv:
            p["cmdline"] = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]
        elif argv and argv[0].startswith("VLLM::"):
            p["cmdline"] = ["sglang::scheduler_TP0"]
    against = {s.cause for s in port_health(Evidence([snap])).signals if s.weight < 0}
    assert "request-deadlock" in against


def test_probe_requests_and_stats_lines_in_the_log_are_not_movement() -> None:
    from hangdoctor.checks.activity import _only_probe_lines

    from hangdoctor.engines import BY_NAME

    probe = ['INFO:     127.0.0.1:1 - "GET /health HTTP/1.0" 200 OK',
             'INFO:     127.0.0.1:2 - "GET /metrics HTTP/1.0" 200 OK']
    stats = ("(APIServer pid=1) INFO [loggers.py:335] Engine 000: Avg prompt throughput: 4.2 "
             "tokens/s, Avg generation throughput: 48.3 tokens/s, Running: 0 reqs")
    work = 'INFO:     127.0.0.1:3 - "POST /v1/completions HTTP/1.1" 200 OK'

    def log(lines: list[str]) -> dict[str, Any]:
        return {"tail": ["older line"] + lines,
                "grew_bytes": sum(len(x) + 1 for x in lines)}

    assert _only_probe_lines(log(probe))
    assert _only_probe_lines(log(probe + [stats]), BY_NAME["vllm"])
    assert not _only_probe_lines(log(probe + [stats]))  # no engine model: a line is a line
    assert not _only_probe_lines(log(probe + [work]), BY_NAME["vllm"])
