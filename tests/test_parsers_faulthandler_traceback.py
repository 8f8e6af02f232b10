"""faulthandler dumps and tracebacks, recorded from real processes."""

from __future__ import annotations

from pathlib import Path

from hangdoctor.parsers.faulthandler import parse_faulthandler
from hangdoctor.parsers.traceback import dumps_from_tracebacks, parse_tracebacks

SAMPLES = Path(__file__).parent / "samples"


def _text(name: str) -> list[str]:
    return (SAMPLES / name).read_text().splitlines()


def test_faulthandler_all_threads() -> None:
    (d,) = parse_faulthandler(_text("faulthandler_threads.txt"))
    assert d.pid is None and d.kind == "faulthandler"
    assert [hex(t["thread_id"]) for t in d.threads] == [
        "0x7fd1a37fe6c0",
        "0x7fd1a3fff6c0",
        "0x7fd1a8f966c0",
        "0x7fd1a9dd8b80",
    ]
    assert [t["is_current"] for t in d.threads] == [False, False, False, True]
    # most recent call first == innermost first
    hb = d.threads[0]["frames"]
    assert [(f["name"], f["line"]) for f in hb[:3]] == [
        ("wait", 327),
        ("wait", 629),
        ("heartbeat", 9),
    ]
    assert hb[0]["short_filename"] == "threading.py"
    assert [f["name"] for f in d.threads[1]["frames"][:3]] == ["wait", "get", "output_handler"]
    assert [f["name"] for f in d.threads[3]["frames"]] == ["run_engine_loop", "<module>"]


def test_faulthandler_fatal_and_repeat() -> None:
    (d,) = parse_faulthandler(_text("faulthandler_fatal.txt"))
    assert d.notes == ["Fatal Python error: Aborted"]
    assert d.threads[-1]["frames"][0] == {
        "name": "run_engine_loop",
        "filename": "/tmp/hd_samples_oz6kmdve/engine.py",
        "short_filename": "engine.py",
        "line": 16,
        "native": False,
        "locals": None,
    }
    lines = _text("faulthandler_threads.txt")
    twice = parse_faulthandler(lines + [""] + lines)
    assert len(twice) == 2 and twice[0].group == twice[1].group  # same process, two samples
    single = parse_faulthandler(
        ["Stack (most recent call first):", '  File "/a.py", line 3 in f', "  <no Python frame>"]
    )
    assert [f["name"] for f in single[0].threads[0]["frames"]] == ["f"]


def test_traceback_ctrl_c_is_a_stack() -> None:
    tbs = parse_tracebacks(_text("traceback_ctrl_c.txt"))
    (tb,) = tbs
    assert tb.exc_type == "KeyboardInterrupt" and tb.complete
    assert [(f["name"], f["short_filename"], f["line"]) for f in tb.frames] == [
        ("_recv", "multiprocessing/connection.py", 395),
        ("_recv_bytes", "multiprocessing/connection.py", 430),
        ("recv", "multiprocessing/connection.py", 250),
        ("wait_until_ready", "api_server.py", 8),
        ("run_server", "api_server.py", 12),
        ("<module>", "api_server.py", 13),
    ]
    (d,) = dumps_from_tracebacks(tbs)
    assert d.threads[0]["name"] == "MainThread"
    assert d.threads[0]["exception"] == "KeyboardInterrupt"


def test_chained_and_crash_tracebacks() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/srv/a.py", line 10, in load',
        "    x = f()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/srv/a.py", line 20, in main',
        '  File "/srv/a.py", line 12, in load',
        "RuntimeError: loading failed",
        "some log line after it",
        "Traceback (most recent call last):",
        '  File "/srv/b.py", line 1, in <module>',
    ]
    tbs = parse_tracebacks(lines)
    assert [(t.exc_type, t.chained, t.complete) for t in tbs] == [
        ("RuntimeError", 1, True),
        (None, 0, False),
    ]
    assert [f["name"] for f in tbs[0].frames] == ["load", "main"]
    assert dumps_from_tracebacks(tbs) == []  # crash reports are not stacks of a waiting process
