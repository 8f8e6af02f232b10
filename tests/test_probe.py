"""``hangdoctor probe`` against a real plain HTTP server (tests/plain_server.py): idle, busy,
a request that never finishes, a sick or slow health path, a server gone; the state file
across calls; the exit codes of the plugin convention; every --json against its schema.

The verdict rules themselves (pure, :mod:`hangdoctor.triage.progress_verdict`) get a case
where each state fires and one where it does not, on looks made by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import schema_check

from hangdoctor.triage import progress_verdict

HERE = Path(__file__).resolve().parent
PROBE_TIMEOUT_S = 60.0
# a slow /health is a warning by design; where a test is not about slowness, this machine's
# speed must not make it one
CALM = ("--slow", "20", "--timeout", "20")


class Plain:
    def __init__(self, tmp: Path) -> None:
        self.flags = tmp / "flags"
        self.flags.mkdir()
        self.log = tmp / "server.log"
        port_file = tmp / "port"
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "plain_server.py"), str(port_file), str(self.log), str(self.flags)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "plain server did not start"
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.state = tmp / "probe-state.json"

    def flag(self, name: str, on: bool = True) -> None:
        path = self.flags / name
        if on:
            path.write_text("1")
        else:
            path.unlink(missing_ok=True)

    def get_in_thread(self, path: str) -> threading.Thread:
        def run() -> None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=120).read()
            except OSError:
                pass  # the server was stopped under it: fine

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Plain]:
    server = Plain(tmp_path)
    try:
        yield server
    finally:
        server.flag("block", False)
        server.stop()


def probe(*args: str, state: Path | None = None, check_json: bool = True) -> tuple[int, str, str]:
    """Run ``hangdoctor probe ARGS``; the --json document (when asked) is checked against its
    schema."""
    argv = [sys.executable, "-m", "hangdoctor", "probe", *args]
    if state is not None:
        argv += ["--state", str(state)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if "--json" in args and check_json and proc.stdout.strip():
        schema_check.record("probe", json.loads(proc.stdout))
    return proc.returncode, proc.stdout, proc.stderr


def probe_json(*args: str, state: Path | None = None) -> tuple[int, dict[str, Any]]:
    rc, out, err = probe(*args, "--json", state=state)
    assert out.count("\n") == 1, (out, err)
    return rc, json.loads(out)


def wait_for_log(path: Path, text: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"no {text!r} in {path}"
        time.sleep(0.05)


# ------------------------------------------------------------------ the command, on a real server


def test_idle_is_ok_on_every_call_and_says_one_line(plain: Plain) -> None:
    for _ in range(3):
        rc, out, err = probe(str(plain.port), "--log", str(plain.log), *CALM, state=plain.state)
        assert rc == 0, (out, err)
        assert out.startswith("OK idle") and out.count("\n") == 1, out
        assert err == ""
    doc = json.loads(plain.state.read_text())
    assert doc["looks"] == 3 and doc["target"] == f"127.0.0.1:{plain.port}"


def test_request_that_never_finishes_is_critical_after_after(plain: Plain) -> None:
    plain.flag("block")
    plain.get_in_thread("/work")
    wait_for_log(plain.log, "work started")
    args = (str(plain.port), "--log", str(plain.log), "--after", "4", "--warn-after", "1.5", *CALM)
    rc, first = probe_json(*args, state=plain.state)
    assert rc == 0 and first["state"] == "pending" and first["first_look"], first
    assert first["connections"] == 1 and first["work_pending"]
    # each call's state follows from its own seconds without progress (whatever this machine's
    # speed); our own /health requests in the log are no progress
    expected = {"pending": 0, "stalling": 1, "hung": 2}
    seen = []
    deadline = time.monotonic() + 60
    while True:
        time.sleep(0.5)
        rc, doc = probe_json(*args, state=plain.state)
        stalled = doc["seconds_since_progress"]
        want = "hung" if stalled >= 4 else "stalling" if stalled >= 1.5 else "pending"
        assert doc["state"] == want and rc == expected[want], doc
        seen.append(want)
        if want == "hung" or time.monotonic() > deadline:
            break
    assert seen[-1] == "hung", seen
    assert "1 client connection" in doc["summary"]
    rc, out, _ = probe(*args, state=plain.state)
    assert rc == 2 and out.startswith("CRITICAL hung: 1 client connection and no progress for")
    rc, out, _ = probe(*args, "--critical-only", state=plain.state)
    assert rc == 2
    plain.flag("block", False)
    wait_for_log(plain.log, "work done")
    time.sleep(0.3)
    rc, after = probe_json(*args, state=plain.state)
    assert rc == 0 and after["state"] == "idle", after


def test_without_a_progress_signal_a_stall_stays_a_warning(plain: Plain) -> None:
    plain.flag("block")
    plain.get_in_thread("/work")
    wait_for_log(plain.log, "work started")
    probe(str(plain.port), "--after", "0.5", state=plain.state)
    time.sleep(0.8)
    rc, doc = probe_json(str(plain.port), "--after", "0.5", state=plain.state)
    assert rc == 1 and doc["state"] == "stalling", doc
    assert "progress is not visible" in doc["summary"]
    rc, _, _ = probe(str(plain.port), "--after", "0.5", "--critical-only", state=plain.state)
    assert rc == 0


def test_busy_and_moving_is_never_critical(plain: Plain) -> None:
    t = plain.get_in_thread("/stream?s=6")
    wait_for_log(plain.log, "token")
    codes = []
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        rc, doc = probe_json(str(plain.port), "--log", str(plain.log), "--after", "1", *CALM, state=plain.state)
        codes.append((rc, doc["state"]))
        time.sleep(0.3)
    t.join(10)
    assert len(codes) >= 3
    assert all(rc == 0 for rc, _ in codes), codes
    assert ("progressing" in {s for _, s in codes}), codes


def test_sick_health_is_critical_and_slow_health_a_warning(plain: Plain) -> None:
    plain.flag("sick")
    rc, doc = probe_json(str(plain.port), state=plain.state)
    assert rc == 2 and doc["state"] == "unhealthy" and doc["health"]["code"] == 503, doc
    plain.flag("sick", False)
    plain.flag("slow")
    rc, doc = probe_json(str(plain.port), "--slow", "0.5", "--timeout", "5", state=plain.state)
    assert rc == 1 and doc["state"] == "slow", doc
    rc, doc = probe_json(str(plain.port), "--timeout", "0.3", "--after", "60", state=plain.state)
    assert rc == 1 and doc["state"] == "not-answering", doc
    rc, doc = probe_json(str(plain.port), "--timeout", "0.3", "--after", "0", state=plain.state)
    assert rc == 2 and doc["state"] == "hung", doc
    plain.flag("slow", False)
    rc, doc = probe_json(str(plain.port), *CALM, state=plain.state)
    assert rc == 0 and doc["state"] == "idle", doc


def test_gone_server_and_gone_process_are_critical(plain: Plain) -> None:
    rc, doc = probe_json(str(plain.port), "--pid", str(plain.proc.pid), state=plain.state)
    assert rc == 0 and doc["processes"][0]["alive"], doc
    assert doc["processes"][0]["pid"] == plain.proc.pid
    plain.stop()
    rc, doc = probe_json(str(plain.port), "--pid", str(plain.proc.pid), state=plain.state)
    assert rc == 2 and doc["state"] == "dead", doc
    rc, out, _ = probe(f"http://127.0.0.1:{plain.port}/health", state=plain.state)
    assert rc == 2 and out.startswith("CRITICAL dead: nothing answers on port"), out
    rc, out, _ = probe(str(plain.port), "--health-path", "", "--no-state")  # /metrics alone says it
    assert rc == 2 and out.startswith("CRITICAL dead: nothing answers on port"), out


def test_bad_usage_and_unusable_state_are_unknown(plain: Plain, tmp_path: Path) -> None:
    for args in (["not-a-port"], ["70000"], [str(plain.port), "--after", "soon"], ["https://127.0.0.1:1/"]):
        rc, out, err = probe(*args)
        assert rc == 3 and out == "", (args, rc, out, err)
        assert "Traceback" not in err and err.strip(), err
    rc, doc = probe_json(str(plain.port), state=tmp_path / "no-such-dir" / "state.json")
    assert rc == 3 and doc["status"] == "unknown", doc
    assert "cannot write state file" in doc["problems"][0]
    (tmp_path / "garbage.json").write_text("{not json")
    rc, doc = probe_json(str(plain.port), state=tmp_path / "garbage.json")
    assert rc == 0 and doc["first_look"], doc  # starts over, and says so
    assert "unreadable" in doc["problems"][0]
    rc, doc = probe_json(str(plain.port), "--no-state")
    assert rc == 0 and doc["state_file"] is None


# ------------------------------------------------------------------ the verdict rules, pure


def look(at: float, *, code: int | None = 200, connected: bool = True, values: dict[str, float] | None = None,
         conns: int = 0, procs: list[dict[str, Any]] | None = None, latency_s: float = 0.01) -> dict[str, Any]:
    return {
        "at": at, "host": "127.0.0.1", "port": 8000,
        "health": {"path": "/health", "code": code, "latency_s": latency_s,
                   "error": None if code else ("connect failed" if not connected else "no answer"),
                   "connected": connected},
        "metrics": {"ok": values is not None, "values": values or {}, "error": None},
        "connections": conns, "processes": procs or [], "log": None, "took_s": 0.01,
    }


VLLM = {"vllm:num_requests_running": 1.0, "vllm:num_requests_waiting": 0.0,
        "vllm:generation_tokens_total": 10.0, "vllm:prompt_tokens_total": 5.0,
        "vllm:request_success_total": 1.0}


def run_looks(*looks: dict[str, Any], after_s: float = 10.0) -> list[dict[str, Any]]:
    state, out = None, []
    for one in looks:
        verdict, state = progress_verdict.judge(one, state, after_s=after_s)
        out.append(verdict)
    return out


def test_gauges_pending_and_counters_still_is_hung_moving_is_not() -> None:
    still = run_looks(look(0, values=VLLM), look(6, values=VLLM), look(11, values=VLLM))
    assert [v["state"] for v in still] == ["pending", "stalling", "hung"]
    assert still[-1]["engine"] == "vllm" and still[-1]["exit_code"] == 2
    moving = run_looks(look(0, values=VLLM), look(6, values=dict(VLLM, **{"vllm:generation_tokens_total": 11.0})),
                       look(11, values=dict(VLLM, **{"vllm:generation_tokens_total": 12.0})))
    assert [v["state"] for v in moving] == ["pending", "progressing", "progressing"]


def test_gauges_at_zero_but_a_client_waiting_is_still_pending() -> None:
    """The wedge that leaves vLLM's running gauge at 0: the connection shows the work."""
    zero = dict(VLLM, **{"vllm:num_requests_running": 0.0})
    v = run_looks(look(0, values=zero, conns=1), look(11, values=zero, conns=1))
    assert v[-1]["state"] == "hung" and "1 client connection" in v[-1]["summary"]
    v = run_looks(look(0, values=zero), look(11, values=zero))
    assert v[-1]["state"] == "idle"
    v, _ = progress_verdict.judge(look(11, values=zero, conns=1), None, after_s=10, use_connections=False)
    assert v["state"] == "idle"


def test_idle_between_looks_resets_the_stall_clock() -> None:
    idle = dict(VLLM, **{"vllm:num_requests_running": 0.0})
    v = run_looks(look(0, values=VLLM), look(9, values=idle), look(15, values=VLLM), after_s=20)
    assert v[-1]["state"] == "pending" and v[-1]["seconds_since_progress"] == 6.0


def test_state_of_another_target_or_a_clock_gone_back_is_not_used() -> None:
    _, state = progress_verdict.judge(look(0, values=VLLM), None, after_s=10)
    other = look(20, values=VLLM)
    other["port"] = 9000
    assert progress_verdict.judge(other, state, after_s=10)[0]["first_look"]
    assert progress_verdict.judge(look(-5, values=VLLM), state, after_s=10)[0]["first_look"]
    assert not progress_verdict.judge(look(20, values=VLLM), state, after_s=10)[0]["first_look"]


def test_counter_reset_is_a_change_and_dead_is_dead() -> None:
    v = run_looks(look(0, values=VLLM), look(11, values=dict(VLLM, **{"vllm:request_success_total": 0.0})))
    assert v[-1]["state"] == "progressing"
    v = run_looks(look(0, code=None, connected=False))
    assert v[0]["state"] == "dead" and v[0]["exit_code"] == 2
    gone = [{"pid": 7, "alive": False, "state": None, "name": None, "cpu_s": None}]
    assert run_looks(look(0, procs=gone))[0]["state"] == "dead"
    alive = [{"pid": 7, "alive": True, "state": "S", "name": "x", "cpu_s": 1.0}]
    assert run_looks(look(0, procs=alive))[0]["state"] == "idle"


def test_not_answering_turns_critical_after_after() -> None:
    v = run_looks(look(0, code=None), look(5, code=None), look(10, code=None), look(11))
    assert [x["state"] for x in v] == ["not-answering", "not-answering", "hung", "idle"]
