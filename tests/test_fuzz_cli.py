"""Issue 8: bad input to ``hangdoctor analyze`` and ``report`` never crashes, hangs or balloons.

Mostly in-process through click's CliRunner on ``hangdoctor.cli.main`` (fast enough for
hypothesis); inputs that could block (a FIFO, /dev/zero) or that measure memory run the real
CLI in a subprocess with a timeout. The rule for every input: exit 0/2/3/5/6/7 (never 1, an
internal error, which means the input reached code that did not expect it), no ``Traceback``,
and when the exit code is 2 a one-line ``hangdoctor: ...`` error on stderr.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hangdoctor.cli import main

SAMPLES = sorted(
    p
    for p in (Path(__file__).parent / "samples").iterdir()
    if p.is_file() and p.suffix in (".txt", ".log", ".json", ".md")
)
ANALYSES = sorted((Path(__file__).parent / "samples_analysis").glob("*.json"))
OK_CODES = {0, 2, 3, 5, 6, 7}
FUZZ = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SUBPROCESS_TIMEOUT_S = 30.0


def _invoke(args: list[str], stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(main, args, input=stdin, catch_exceptions=True)


def _assert_handled(result: Result, what: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what}: {type(result.exception).__name__}: {result.exception}"
    )
    assert "Traceback" not in result.stderr, f"{what}: {result.stderr[-2000:]}"
    assert result.exit_code in OK_CODES, (
        f"{what}: exit {result.exit_code}: {result.stderr.strip()[-600:]}"
    )
    if result.exit_code == 2:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith(("hangdoctor:", "Error:"))]
        assert len(errors) == 1 and len(errors[0]) < 400, f"{what}: {result.stderr!r}"


def _analyze_file(tmp: Path, data: bytes, name: str = "input.txt") -> Result:
    path = tmp / name
    path.write_bytes(data)
    result = _invoke(["analyze", str(path), "--json", "-q"])
    _assert_handled(result, f"analyze {name} ({len(data)} bytes: {data[:60]!r})")
    if result.exit_code != 2:
        json.loads(result.stdout)  # a (partial) analysis, as pure JSON
    return result


# ------------------------------------------------------------------ random and spliced text


@FUZZ
@given(data=st.binary(max_size=4096))
def test_random_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    _analyze_file(tmp_path_factory.mktemp("fz"), data)


@FUZZ
@given(
    picks=st.lists(
        st.tuples(st.sampled_from(SAMPLES), st.floats(0, 1), st.floats(0, 1)),
        min_size=1,
        max_size=4,
    ),
    junk=st.binary(max_size=64),
)
def test_truncated_and_spliced_samples(
    tmp_path_factory: pytest.TempPathFactory, picks: list[tuple[Path, float, float]], junk: bytes
) -> None:
    parts = []
    for path, a, b in picks:
        raw = path.read_bytes()
        lo, hi = sorted((int(a * len(raw)), int(b * len(raw))))
        parts.append(raw[lo:hi])
    _analyze_file(tmp_path_factory.mktemp("fz"), junk.join(parts))


@FUZZ
@given(data=st.binary(max_size=2048))
def test_random_bytes_on_stdin(data: bytes) -> None:
    result = _invoke(["analyze", "-", "--json", "-q"], stdin=data)
    _assert_handled(result, f"analyze - ({data[:60]!r})")


# ------------------------------------------------------------------ JSON documents

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
SNAPSHOT_KEYS = [
    "processes",
    "stacks",
    "manifest",
    "gpus",
    "log",
    "http",
    "host",
    "targets",
    "kernel_log",
    "host_memory",
    "shm",
    "window_s",
    "origin",
    "redacted",
]


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(SNAPSHOT_KEYS), json_value, max_size=6))
def test_snapshot_with_random_sections(
    tmp_path_factory: pytest.TempPathFactory, fields: dict[str, Any]
) -> None:
    doc = {"schema_version": 1, **fields}
    _analyze_file(tmp_path_factory.mktemp("fz"), json.dumps(doc).encode(), "snap.json")


process_like = st.fixed_dictionaries(
    {"pid": st.one_of(st.integers(-5, 10**6), st.text(max_size=5), st.none())},
    optional={
        k: json_value
        for k in (
            "name",
            "cmdline",
            "status",
            "threads",
            "env",
            "rank",
            "role",
            "alive",
            "cpu_delta_s",
            "listen",
            "ppid",
        )
    },
)


@FUZZ
@given(
    procs=st.lists(process_like, max_size=4),
    stacks=st.dictionaries(st.text(max_size=6), json_value, max_size=3),
)
def test_snapshot_with_odd_processes_and_stacks(
    tmp_path_factory: pytest.TempPathFactory, procs: list[dict[str, Any]], stacks: dict[str, Any]
) -> None:
    doc = {"schema_version": 1, "processes": procs, "stacks": stacks, "manifest": []}
    _analyze_file(tmp_path_factory.mktemp("fz"), json.dumps(doc).encode(), "snap.json")


def test_deeply_nested_json(tmp_path: Path) -> None:
    depth = 10000
    for name, text in {
        "list.json": "[" * depth + "]" * depth,
        "snap.json": '{"schema_version": 1, "processes": ' + "[" * depth + "]" * depth + "}",
        "dict.json": '{"a":' * depth + "1" + "}" * depth,
        "analysis.json": '{"analysis_version": 1, "causes": ' + "[" * depth + "]" * depth + "}",
    }.items():
        _analyze_file(tmp_path, text.encode(), name)
        path = tmp_path / name
        result = _invoke(["report", str(path), "-o", str(tmp_path / "r.html")])
        _assert_handled(result, f"report {name}")


def test_schema_version_from_the_future(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"schema_version": 99, "processes": []}))
    for args in (
        ["analyze", str(path), "--json"],
        ["report", str(path), "-o", str(tmp_path / "r.html")],
    ):
        result = _invoke(args)
        _assert_handled(result, " ".join(args[:1]))
        assert result.exit_code == 2
        assert "99" in result.stderr and "upgrade" in result.stderr.lower(), result.stderr


@pytest.mark.parametrize(
    "doc",
    [
        {"schema_version": 1, "processes": "not a list"},
        {"schema_version": 1, "processes": {"1": {}}},
        {"schema_version": 1, "stacks": []},
        {"schema_version": 1, "manifest": "x"},
        {"schema_version": "1"},
        {"schema_version": 1, "hosts": "x"},
        {"schema_version": 1, "hosts": [1, 2]},
    ],
    ids=lambda d: json.dumps(d)[:40],
)
def test_malformed_snapshot(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    result = _invoke(["analyze", str(path), "--json", "-q"])
    _assert_handled(result, json.dumps(doc))
    result = _invoke(["report", str(path), "-o", str(tmp_path / "r.html")])
    _assert_handled(result, "report " + json.dumps(doc))


# ------------------------------------------------------------------ report with garbage


@FUZZ
@given(
    doc=st.dictionaries(
        st.sampled_from(
            [
                "causes",
                "checks",
                "ranks",
                "stacks",
                "hosts",
                "verdict",
                "headline",
                "gpus",
                "log",
                "collection",
                "weakened",
                "env_diff",
                "facts",
                "problems",
            ]
        ),
        json_value,
        max_size=5,
    )
)
def test_report_of_a_garbled_analysis(
    tmp_path_factory: pytest.TempPathFactory, doc: dict[str, Any]
) -> None:
    tmp = tmp_path_factory.mktemp("fz")
    path = tmp / "analysis.json"
    path.write_text(json.dumps({"analysis_version": 1, **doc}))
    for suffix in (".html", ".md"):
        result = _invoke(["report", str(path), "-o", str(tmp / f"r{suffix}")])
        _assert_handled(result, f"report{suffix} of {json.dumps(doc)[:200]}")


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("sample", ANALYSES, ids=lambda p: p.name)
def test_report_of_truncated_analyses(tmp_path: Path, sample: Path) -> None:
    raw = sample.read_bytes()
    rng = random.Random(sample.name)
    for cut in sorted(
        {0, 1, len(raw) // 2, len(raw) - 1, *(rng.randrange(len(raw)) for _ in range(5))}
    ):
        path = tmp_path / "a.json"
        path.write_bytes(raw[:cut])
        result = _invoke(["report", str(path), "-o", str(tmp_path / "r.html")])
        _assert_handled(result, f"report of {sample.name}[:{cut}]")
        assert result.exit_code == 2 or _is_json(raw[:cut])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 1000,
        b"\xff\xfe" + "ok".encode("utf-16-le"),
        b"\n" * 100000,
        "\u202e\u0000é".encode() * 100,
    ],
)
def test_report_with_garbage(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(data)
    result = _invoke(["report", str(path), "-o", str(tmp_path / "r.html")])
    _assert_handled(result, f"report {data[:20]!r}")
    assert result.exit_code == 2


# ------------------------------------------------------------------ files that are not files


def test_empty_file(tmp_path: Path) -> None:
    _analyze_file(tmp_path, b"", "empty.txt")


def test_directory_and_missing_file(tmp_path: Path) -> None:
    for args in (
        ["analyze", str(tmp_path)],
        ["analyze", str(tmp_path / "nope.txt")],
        ["report", str(tmp_path), "-o", str(tmp_path / "r.html")],
        ["report", str(tmp_path / "nope.json"), "-o", str(tmp_path / "r.html")],
    ):
        result = _invoke(args)
        _assert_handled(result, " ".join(args))
        assert result.exit_code == 2, result.stderr


def _cli_subprocess(
    args: list[str], timeout_s: float = SUBPROCESS_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "hangdoctor", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hangdoctor {' '.join(args)} did not finish within {timeout_s:.0f} s")


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_dev_zero_is_refused_or_capped(tmp_path: Path, command: str) -> None:
    args = [command, "/dev/zero"] + (
        ["-o", str(tmp_path / "r.html")] if command == "report" else ["--json"]
    )
    proc = _cli_subprocess(args, timeout_s=20)
    assert "Traceback" not in proc.stderr
    assert proc.returncode in OK_CODES, proc.stderr


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_fifo_without_a_writer_does_not_block(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "evidence.txt"
    os.mkfifo(fifo)
    args = [command, str(fifo)] + (
        ["-o", str(tmp_path / "r.html")] if command == "report" else ["--json"]
    )
    try:
        proc = _cli_subprocess(args, timeout_s=10)
    finally:
        try:  # release a reader stuck in open(), if the test failed
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr


MEMORY_PROBE = textwrap.dedent("""
    import json, resource, sys
    from click.testing import CliRunner
    from hangdoctor.cli import main
    path, kind = sys.argv[1], sys.argv[2]
    with open(path, "wb") as f:
        if kind == "one-line":
            f.write(b"INFO " + b"x" * (50 * 1024 * 1024) + b"\\n")
        elif kind == "pyspy-frame":
            f.write(b"Thread 0x7F (idle): \\"MainThread\\"\\n    " + b"f" * (50 * 1024 * 1024)
                    + b" (a.py:1)\\n")
        else:
            f.write(b"[" + b"1," * (25 * 1024 * 1024) + b"1]")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(main, ["analyze", path, "--json", "-q"])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"exit": result.exit_code, "growth_kib": after - before,
                      "stderr": result.stderr[-500:], "out_bytes": len(result.stdout)}))
""")


@pytest.mark.parametrize("kind", ["one-line", "pyspy-frame", "json-array"])
def test_huge_single_line_is_memory_bounded(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "huge.txt"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", MEMORY_PROBE, str(path), kind],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"analyze of a 50 MB {kind} did not finish within 90 s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["exit"] in OK_CODES, report
    assert "Traceback" not in report["stderr"]
    assert report["growth_kib"] < 500 * 1024, f"RSS grew by {report['growth_kib'] // 1024} MiB"
    assert report["out_bytes"] < 5 * 1024 * 1024, "the 50 MB line is not copied into the output"
