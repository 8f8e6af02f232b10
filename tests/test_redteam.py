"""Issue 15: the red-team round. One test (or a few) per finding F1..F21, each against the real
thing: real processes, real files, a real hung FUSE mount (tests/faults/fuse_wedge.py), a real
loopback sshd with a hostile forced command (tests/test_redteam_ssh.py).

Each test failed before its fix; the figures quoted in the docstrings were measured on the
development machine (2 shared cores) before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need

from tests.faults import fuse_wedge
from tests.faults.helpers import manifest, no_traceback, run_cli

SLEEPER = (
    "import os, sys, time\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "time.sleep(float(os.environ.get('HD_LIFETIME', '60')))\n"
)


def _start(argv: list[str], stdout: object = subprocess.DEVNULL, **kw: object) -> subprocess.Popen:
    env = {**os.environ, "HD_LIFETIME": "90"}
    return subprocess.Popen(
        argv, stdout=stdout, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, **kw
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _wait_for_file_text(path: Path, text: str, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{path} never got {text!r}")


# ---------------------------------------------------------------- F1 discovery records


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A real process whose command line is a vLLM server's, with its API key."""
    out = tmp_path / "fake-vllm.out"
    with open(out, "w") as f:
        proc = _start(
            [
                sys.executable,
                "-c",
                SLEEPER,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m",
                "--api-key",
                "XSECRETdiscovery0042",
            ],
            stdout=f,
        )
    try:
        _wait_for_file_text(out, "ready")
        yield proc
    finally:
        _stop(proc)


def test_f1_discovered_server_command_line_is_redacted(fake_vllm, tmp_path: Path) -> None:
    """`diagnose localhost` without --pid: the discovery record held `--api-key` in full."""
    proc, _ = run_cli(
        "diagnose",
        "localhost",
        "--window",
        "0",
        "--deadline",
        "20",
        "--no-gpu",
        "-o",
        str(tmp_path / "r.json"),
        "--save-snapshot",
        str(tmp_path / "s.json"),
        "--json",
        timeout_s=90,
    )
    no_traceback(proc)
    snap_text = (tmp_path / "s.json").read_text()
    doc = json.loads(snap_text)
    snaps = doc["hosts"] if "hosts" in doc else [doc]
    found = [d for s in snaps for d in s["targets"]["discovery"] if d["pid"] == fake_vllm.pid]
    assert found, "the fake server was discovered"
    assert "--api-key [REDACTED]" in found[0]["cmdline"], found[0]
    for label, text in (
        ("snapshot", snap_text),
        ("analysis", (tmp_path / "r.json").read_text()),
        ("stdout", proc.stdout),
        ("stderr", proc.stderr),
    ):
        assert "XSECRETdiscovery0042" not in text, label


# ---------------------------------------------------------------- F6 a log on a hung mount


@pytest.fixture
def wedge_dir(tmp_path: Path) -> Path:
    why = fuse_wedge.why_unavailable()
    need(why is None, f"a wedged FUSE mount ({why})")  # under CI=true: a failure, not a hole
    d = tmp_path / "logs"
    d.mkdir()
    return d


def _diagnose_bounded(pid: int, deadline_s: float, tmp_path: Path, *extra: str):
    snap = tmp_path / "snap.json"
    cmd = [
        sys.executable,
        "-m",
        "hangdoctor",
        "diagnose",
        "localhost",
        "--pid",
        str(pid),
        "--window",
        "0.5",
        "--deadline",
        str(deadline_s),
        "--no-gpu",
        "--json",
        "--save-snapshot",
        str(snap),
        *extra,
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        out, err = proc.communicate(timeout=deadline_s + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(
            f"hangdoctor still running {deadline_s + 30:.0f} s after its "
            f"{deadline_s:.0f} s deadline (a thread in D state holds its exit)"
        )
    wall_s = time.monotonic() - t0
    return proc.returncode, out, err, wall_s, snap


@pytest.mark.parametrize("how", ["auto-detected", "--log"])
def test_f6_log_on_a_hung_mount_keeps_the_deadline_and_the_evidence(
    wedge_dir: Path, tmp_path: Path, how: str
) -> None:
    """The server's stdout is a file on a FUSE mount that stopped answering.

    Before: the probe's stat() of the auto-detected log sat in D state; hangdoctor never exited
    (killed by this test after deadline + 30 s). After: the log is given up on after its
    timeout, in a child left behind, and the stacks and processes are reported."""
    log = wedge_dir / "server.log"
    with open(log, "w") as f:
        server = _start([sys.executable, "-c", SLEEPER], stdout=f)
    try:
        _wait_for_file_text(log, "ready")
        deadline_s = 8.0
        with fuse_wedge.wedged_mount(str(wedge_dir)):
            extra = ("--log", str(log)) if how == "--log" else ()
            rc, out, err, wall_s, snap_path = _diagnose_bounded(
                server.pid, deadline_s, tmp_path, *extra
            )
        assert "Traceback" not in err, err
        print(f"WALL f6-{how} {wall_s:.2f} s deadline {deadline_s:g} s")
        if snap_path.exists():
            print(snap_path.read_text()[-3000:])
        # generous: a loaded CI machine starts Python slowly; before, it never finished at all
        assert wall_s < deadline_s + 15, f"{wall_s:.1f} s against --deadline {deadline_s:.0f}"
        assert rc != 4, err
        snap = json.loads(snap_path.read_text())
        entry = manifest(snap)["log"]
        if how == "auto-detected":
            # read through /proc/PID/fd/1 (round 2, R02): the file the server holds, which a
            # mount over its folder does not stand in front of
            assert entry["status"] == "ok", entry
        else:
            assert entry["status"] == "timeout", entry
            assert "hung network or FUSE" in entry["detail"]
            assert "log" not in snap
        # the other evidence is all there
        assert [p for p in snap["processes"] if p["pid"] == server.pid and p["alive"]]
        assert snap["stacks"][str(server.pid)]["status"] == "ok"
        assert json.loads(out)["verdict"]
    finally:
        _stop(server)


# ---------------------------------------------------------------- F2 / F17 the forms that leaked

# (planted text, the secret in it that must go)
FREE_TEXT_FORMS = [
    ("OPENAI_API_KEY=sk-NotOpenAiShaped_F2a1", "sk-NotOpenAiShaped_F2a1"),
    ("export OPENAI_API_KEY=F2plainValue01", "F2plainValue01"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnF2MIK7MDENGbPxRfiCY", "wJalrXUtnF2MIK7MDENGbPxRfiCY"),
    ("HUGGING_FACE_HUB_TOKEN=F2hubTokenValue02", "F2hubTokenValue02"),
    ("oauth client_secret=F2clientSecret03 scope=x", "F2clientSecret03"),
    ('{"refresh_token": "F2refreshTok04", "expires": 3600}', "F2refreshTok04"),
    ("Namespace(model='m', openai_api_key='F2namespaceKey05', port=8000)", "F2namespaceKey05"),
    ("args: serve m --api-key F2flagInLog06 --port 8000", "F2flagInLog06"),
    ("Cookie: session=F2cookieSess07; theme=dark", "F2cookieSess07"),
    ("Set-Cookie: sid=F2setCookie08; Path=/; HttpOnly", "F2setCookie08"),
    ("cache at redis://:F2redisPass09@cache.internal:6379/0", "F2redisPass09"),
    ("git clone https://F2ghUrlToken10@github.com/org/repo.git", "F2ghUrlToken10"),
    (
        "GET https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=F2sasSig11%2Bx%3D&se=1",
        "F2sasSig11",
    ),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=x&X-Amz-Signature=f2abcdef1234567890",
        "f2abcdef1234567890",
    ),
    ("https://storage.googleapis.com/b/k?X-Goog-Signature=f2deadbeef0011", "f2deadbeef0011"),
    (
        "hook https://hooks.slack.com/services/T0F2AAAA/B0F2BBBB/F2slackWebhook12xyz",
        "F2slackWebhook12xyz",
    ),
    ("stripe key sk_live_F2stripeLive13abcd", "sk_live_F2stripeLive13abcd"),
    ("google oauth ya29.F2googleOauth14abcdefghij", "ya29.F2googleOauth14abcdefghij"),
    ("npm_F2npmTokenAbcdefghijklmnopqrstuvwx15", "npm_F2npmTokenAbcdefghijklmnopqrstuvwx15"),
    (
        "pypi-AgEIcHlwaS5vcmcF2pypiTokenAbcdefghijklmnopqrstuvwxyz16",
        "pypi-AgEIcHlwaS5vcmcF2pypiTokenAbcdefghijklmnopqrstuvwxyz16",
    ),
    ("databricks dapi0123456789abcdef0123456789abcdef", "dapi0123456789abcdef0123456789abcdef"),
]

ARGV_FORMS = [
    ["--openai-key", "F17openaiKey01"],
    ["--hf-key", "F17hfKey02"],
    ["--key", "F17key03"],
    ["--signing-key", "F17signingKey04"],
    ["--jwt", "F17jwt05"],
    ["--bearer", "F17bearer06"],
    ["--session", "F17session07"],
    ["-p", "F17mysqlPass08"],
]


@pytest.mark.parametrize("text, secret", FREE_TEXT_FORMS)
def test_f2_free_text_forms_are_redacted(text: str, secret: str) -> None:
    from hangdoctor.redact import redact_text

    out = redact_text(text)
    assert secret not in out and secret[2:14] not in out, out
    assert "[REDACTED]" in out


def test_f2_what_a_report_needs_is_kept() -> None:
    """Counts and model names under token-ish names are not secrets."""
    from hangdoctor.redact import redact_argv, redact_text

    line = "Namespace(tokenizer='meta/llama', max_num_batched_tokens=8192, api_key=None)"
    assert redact_text(line) == line
    argv = ["--tokenizer", "meta/llama", "--max-num-batched-tokens", "8192", "--port", "8000"]
    assert redact_argv(argv) == argv


@pytest.mark.parametrize("pair", ARGV_FORMS, ids=[p[0] for p in ARGV_FORMS])
def test_f17_argv_flags_are_redacted(pair: list[str]) -> None:
    from hangdoctor.redact import redact_argv

    out = redact_argv(["serve", *pair, "--port", "8000"])
    assert pair[1] not in out and out[2] == "[REDACTED]", out
    assert pair[1] not in " ".join(redact_argv([f"{pair[0]}={pair[1]}"]))


# ---------------------------------------------------------------- F3 a PEM key across lines

PEM_BODY = [
    "MIIEowIBAAKCAQEA0F3bodyLineOneAbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "F3bodyLineTwoAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghijklmnopq",
    "F3lastShortLine==",
]


def _pem_log(path: Path) -> None:
    path.write_text(
        "INFO starting\n"
        "DEBUG loaded key:\n-----BEGIN RSA PRIVATE KEY-----\n"
        + "\n".join(PEM_BODY)
        + "\n-----END RSA PRIVATE KEY-----\nINFO after the key\n"
    )


def test_f3_pem_key_over_lines_in_the_live_tail_and_in_a_paste(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _pem_log(log)
    with open(tmp_path / "out", "w") as f:
        server = _start([sys.executable, "-c", SLEEPER], stdout=f)
    try:
        _wait_for_file_text(tmp_path / "out", "ready")
        proc, _ = run_cli(
            "diagnose",
            "localhost",
            "--pid",
            str(server.pid),
            "--log",
            str(log),
            "--window",
            "0",
            "--no-gpu",
            "--save-snapshot",
            str(tmp_path / "s.json"),
            "-o",
            str(tmp_path / "r.md"),
            timeout_s=90,
        )
        no_traceback(proc)
        pasted, _ = run_cli("analyze", str(log), "--json", "-o", str(tmp_path / "a.html"))
        no_traceback(pasted)
    finally:
        _stop(server)
    snap = json.loads((tmp_path / "s.json").read_text())
    assert "INFO after the key" in snap["log"]["tail"], "the tail was read"
    for label, text in (
        ("snapshot", (tmp_path / "s.json").read_text()),
        ("markdown", (tmp_path / "r.md").read_text()),
        ("pasted json", pasted.stdout),
        ("pasted html", (tmp_path / "a.html").read_text()),
    ):
        for body in PEM_BODY:
            assert body[4:30] not in text, (label, body)


# ---------------------------------------------------------------- F4 bounded regex work


def test_f4_a_200_kb_prompt_line_keeps_the_deadline(tmp_path: Path) -> None:
    """One logged prompt of 200 KB of ``a.a.a.``: `snapshot --deadline 10` took 78 s (the URL
    pattern was quadratic and held the GIL). Now the work is linear, the line is cut before
    redaction, and the redaction is timed inside the deadline."""
    log = tmp_path / "server.log"
    log.write_text(
        "INFO prompt: " + "a." * 100_000 + "\n" + "INFO token hf_F4tailTokenAbCdEfGhIj0123\n"
    )
    with open(tmp_path / "out", "w") as f:
        server = _start([sys.executable, "-c", SLEEPER], stdout=f)
    try:
        _wait_for_file_text(tmp_path / "out", "ready")
        deadline_s = 10
        proc, wall_s = run_cli(
            "snapshot",
            "localhost",
            "--pid",
            str(server.pid),
            "--log",
            str(log),
            "--window",
            "0.5",
            "--deadline",
            str(deadline_s),
            "--no-gpu",
            "-o",
            str(tmp_path / "b.tar.gz"),
            timeout_s=200,
        )
    finally:
        _stop(server)
    no_traceback(proc)
    print(f"WALL f4-200kb-line {wall_s:.2f} s deadline {deadline_s:g} s")
    assert wall_s < deadline_s + 15, f"{wall_s:.1f} s against --deadline {deadline_s}"  # was 78 s
    import tarfile

    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        snap_member = next(m for m in tar.getmembers() if m.name.endswith("/snapshot.json"))
        snap = json.loads(tar.extractfile(snap_member).read())
    tail = snap["log"]["tail"]
    assert max(len(x) for x in tail) <= 16384 + 64, "the long line was cut"
    assert "F4tailToken" not in json.dumps(snap)
    assert manifest(snap)["redaction"]["status"] == "ok"


def test_f4_every_pattern_is_linear_on_hostile_lines() -> None:
    """Each hostile shape costs the same per character at 50 KB and at 200 KB (x4 input, well
    under x8 work; the quadratic URL pattern was x16)."""
    from hangdoctor.redact import redact_text

    shapes = ["a.", "{", "eyJ", "sk-", "http://", "a=", "--api-key ", "a:", "@", "hf_", "x_key "]
    for shape in shapes:
        costs = []
        for n in (50_000, 200_000):
            text = (shape * (n // len(shape) + 1))[:n]
            t0 = time.process_time()
            for _ in range(3):
                redact_text(text)
            costs.append(time.process_time() - t0)
        assert costs[1] < max(costs[0] * 8, 0.05), (shape, costs)


# ---------------------------------------------------------------- output paths: F7 F8 F9 F20


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen]:
    out = tmp_path / "sleeper.out"
    with open(out, "w") as f:
        proc = _start([sys.executable, "-c", SLEEPER], stdout=f)
    try:
        _wait_for_file_text(out, "ready")
        yield proc
    finally:
        _stop(proc)


def _quick(pid: int, *extra: str, cwd: str | None = None, env: dict | None = None):
    proc, _ = run_cli(
        "diagnose",
        "localhost",
        "--pid",
        str(pid),
        "--window",
        "0",
        "--no-gpu",
        "--deadline",
        "15",
        *extra,
        cwd=cwd,
        env=env,
        timeout_s=90,
    )
    no_traceback(proc)
    return proc


@pytest.mark.skipif(os.geteuid() != 0, reason="a device node is made with mknod (root)")
def test_f7_output_to_a_device_or_a_symlink_to_one_is_written_not_replaced(
    sleeper, tmp_path: Path
) -> None:
    """`-o /dev/null` as root replaced the device node with a regular 0644 file. The test uses
    its own null device (mknod 1,3 in its folder) and its own link to /proc/self/fd/1 (what
    /dev/stdout is), never the host's."""
    import stat

    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    proc = _quick(sleeper.pid, "-o", str(null), "--format", "md")
    assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
    assert stat.S_ISCHR(os.lstat(null).st_mode), "the device node was replaced"
    assert not list(tmp_path.glob("null.snapshot.json")), "no companion file beside a device"
    stdout_link = tmp_path / "stdout"
    os.symlink("/proc/self/fd/1", stdout_link)
    proc = _quick(sleeper.pid, "-o", str(stdout_link), "--format", "md", "-q")
    assert os.path.islink(stdout_link), "the symlink was replaced"
    assert proc.stdout.startswith("# hangdoctor"), proc.stdout[:200]


def test_f8_a_planted_companion_symlink_is_never_written_through(sleeper, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "r.snapshot.json")  # NAME.snapshot.json is predictable
    proc = _quick(sleeper.pid, "-o", str(out / "r.html"))
    assert victim.read_text() == "precious\n"
    assert os.path.islink(out / "r.snapshot.json")
    assert (out / "r.html").is_file(), "the report is still written"
    assert "snapshot not saved" in proc.stderr and "symbolic link" in proc.stderr


def test_f8_bundle_staging_never_follows_a_planted_name(tmp_path: Path) -> None:
    """The old staging names (``.NAME.partial-PID``) were predictable: a symlink planted there
    (or a ``raw/stacks`` link inside a planted folder) was written through."""
    from hangdoctor import bundle

    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("b", "b.tar.gz"):
        os.symlink(victim, tmp_path / f".{name}.partial-{os.getpid()}")
    files = {"snapshot.json": b"{}", "raw/stacks/1.txt": b"stack\n"}
    bundle.write_folder(files, str(tmp_path / "b"))
    bundle.write_tar(files, str(tmp_path / "b.tar.gz"))
    assert list(victim.iterdir()) == []
    assert (tmp_path / "b" / "raw" / "stacks" / "1.txt").read_bytes() == b"stack\n"
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name and not p.is_symlink()]


def test_f9_umask_is_honoured_for_reports_snapshots_and_tar_members(
    sleeper, tmp_path: Path
) -> None:
    import stat
    import tarfile

    base = [sys.executable, "-m", "hangdoctor"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    script = (
        "umask 077; "
        + " ".join(base)
        + f" diagnose localhost --pid {sleeper.pid} --window 0 --no-gpu -q -o r.html; "
        + " ".join(base)
        + f" snapshot localhost --pid {sleeper.pid} --window 0.2 --no-gpu -o b.tar.gz; "
        + " ".join(base)
        + f" snapshot localhost --pid {sleeper.pid} --window 0.2 --no-gpu -o bdir"
    )
    subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, timeout=180, capture_output=True)
    for name in ("r.html", "r.snapshot.json", "b.tar.gz"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        modes = {m.name: (m.mode, m.isdir()) for m in tar.getmembers()}
    assert modes and all(mode == (0o700 if d else 0o600) for mode, d in modes.values()), modes
    for p in [tmp_path / "bdir", *(tmp_path / "bdir").rglob("*")]:
        assert stat.S_IMODE(os.stat(p).st_mode) == (0o700 if p.is_dir() else 0o600), p


def test_f20_raw_names_that_collide_are_both_kept() -> None:
    from hangdoctor.bundle import raw_files

    snap = {
        "stacks": {"1/2": {"status": "ok", "samples": []}, "1_2": {"status": "ok", "samples": []}}
    }
    files = raw_files(snap)
    assert {"stacks/1_2.json", "stacks/1_2-2.json"} <= set(files), sorted(files)


def test_f20_dangling_symlink_output_is_refused_before_collecting(tmp_path: Path) -> None:
    link = tmp_path / "b.tar.gz"
    os.symlink(tmp_path / "missing" / "x.tar.gz", link)
    proc, wall_s = run_cli("snapshot", "localhost", "--pid", "1", "-o", str(link), "--window", "5")
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "symbolic link to nothing" in proc.stderr
    assert wall_s < 5, "refused before the 5 s window, not after"


# ---------------------------------------------------------------- F21 /proc files as a log


def test_f21_proc_environ_is_refused_as_a_log(sleeper, tmp_path: Path) -> None:
    env = {**os.environ, "F21_PLANTED": "F21secretValueInEnv"}
    proc, _ = run_cli(
        "diagnose",
        "localhost",
        "--pid",
        str(sleeper.pid),
        "--window",
        "0",
        "--no-gpu",
        "--log",
        "/proc/self/environ",
        "--save-snapshot",
        str(tmp_path / "s.json"),
        "-o",
        str(tmp_path / "r.json"),
        env=env,
    )
    no_traceback(proc)
    snap = json.loads((tmp_path / "s.json").read_text())
    entry = manifest(snap)["log"]
    assert entry["status"] == "failed" and "not a server log" in entry["detail"], entry
    assert "log" not in snap
    for path in (tmp_path / "s.json", tmp_path / "r.json"):
        assert "F21secretValueInEnv" not in path.read_text()


# ---------------------------------------------------------------- F11 JSON-lines pastes


def test_f11_json_lines_are_decoded_in_place_with_bounded_failures(monkeypatch) -> None:
    """Every "{" line used to copy the rest of the paste before decoding (9 MB of JSON lines:
    37 s in split_segments alone, now under 1 s). The decoder must get the one joined text at
    an offset, and give up after a bounded number of lines that only look like JSON."""
    from hangdoctor.parsers import detect

    seen = []
    real = detect.iter_json_documents

    def spy(text, limit=10000, start=0):
        seen.append((id(text), len(text), start))
        return real(text, limit, start)

    monkeypatch.setattr(detect, "iter_json_documents", spy)
    good = "\n".join(json.dumps({"ts": i, "msg": "done", "ms": 1.5}) for i in range(3000))
    segs = detect.split_segments(good)
    assert [s.kind for s in segs] == ["log"]
    assert len({ident for ident, _n, _s in seen}) == 1, "one text, never a slice"
    assert len(seen) == 3000
    seen.clear()
    bad = "\n".join('{"ts": %d, "msg": "cut' % i for i in range(5000))
    detect.split_segments(bad)
    assert len(seen) <= detect.JSON_FAILURES_MAX


# ---------------------------------------------------------------- F12 / F15 our own snapshots


@pytest.fixture(scope="module")
def secret_snapshot(tmp_path_factory) -> tuple[Path, dict]:
    """A real --no-redact snapshot of the secret target (tests/faults/secret_target.py)."""
    from tests.faults.helpers import start_helper, stop_helper

    folder = tmp_path_factory.mktemp("f15")
    log = folder / "server.log"
    env = {**os.environ, "HF_TOKEN": "hf_F15envTokenAbCdEfGhIjKlMnOp"}
    helper = start_helper(
        "secret_target.py",
        "--api-key",
        "F15argApiKeyZq9",
        "--log",
        str(log),
        "--lifetime",
        "60",
        env=env,
    )
    try:
        proc, _ = run_cli(
            "diagnose",
            "localhost",
            "--pid",
            str(helper.pid),
            "--window",
            "0",
            "--no-gpu",
            "--no-redact",
            "--save-snapshot",
            str(folder / "s.json"),
            "--log",
            str(log),
            "-q",
            timeout_s=90,
        )
        no_traceback(proc)
    finally:
        stop_helper(helper)
    return folder / "s.json", {
        "env": "F15envToken",
        "arg": "F15argApiKeyZq9",
        "log": "LogBearerTok3n",
    }


def test_f15_a_no_redact_snapshot_is_redacted_when_read_again(secret_snapshot, tmp_path) -> None:
    snap_path, secrets = secret_snapshot
    raw = snap_path.read_text()
    assert all(v in raw for v in secrets.values()), "the snapshot kept them (--no-redact)"
    for cmd in (
        ["report", str(snap_path), "-o", str(tmp_path / "r.html")],
        ["report", str(snap_path), "-o", str(tmp_path / "r.md")],
        ["analyze", str(snap_path), "--json", "-o", str(tmp_path / "a.json")],
    ):
        proc, _ = run_cli(*cmd)
        no_traceback(proc)
        assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
        out = Path(cmd[cmd.index("-o") + 1]).read_text() + proc.stdout + proc.stderr
        assert not [k for k, v in secrets.items() if v in out], cmd
        assert "redacted when it was read" in out, cmd
    # told otherwise: kept, and marked
    proc, _ = run_cli("report", str(snap_path), "--no-redact", "-o", str(tmp_path / "k.json"))
    kept = (tmp_path / "k.json").read_text()
    assert any(v in kept for v in secrets.values()), "kept"
    assert json.loads(kept)["weakened"][0].startswith("NOT REDACTED")
    run_cli("report", str(snap_path), "--no-redact", "-o", str(tmp_path / "k.md"))
    assert "NOT REDACTED" in (tmp_path / "k.md").read_text()


def test_f12_a_snapshot_over_64_mib_is_read_back_whole(secret_snapshot, tmp_path) -> None:
    """64 processes x 200 threads with --native is 61 MB already; past 64 MiB only the
    file's tail was read (invalid JSON). The padding is real-shaped: stacks of 64 pids."""
    snap = json.loads(secret_snapshot[0].read_text())
    frame = {
        "name": "ncclKernel_AllReduce_RING_LL_Sum_bf16",
        "filename": "libnccl.so.2",
        "short_filename": "libnccl.so.2",
        "line": 0,
        "native": True,
    }
    thread = {"thread_id": 1, "thread_name": "t", "status": "idle", "frames": [frame] * 40}
    for pid in range(100000, 100064):
        snap["stacks"][str(pid)] = {"status": "ok", "samples": [{"threads": [thread] * 200}]}
    big = tmp_path / "big.json"
    big.write_text(json.dumps(snap, indent=1))
    assert big.stat().st_size > 64 * 1024 * 1024
    proc, _ = run_cli("report", str(big), "-o", str(tmp_path / "r.json"), timeout_s=300)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"]


def test_f12_snapshots_are_written_compact(secret_snapshot) -> None:
    text = secret_snapshot[0].read_text()
    assert "\n " not in text[:10000], "no indentation"


# ---------------------------------------------------------------- F16 lone surrogates


def test_f16_a_non_utf8_log_path_still_gives_markdown_and_a_full_bundle(tmp_path: Path) -> None:
    folder = os.fsencode(tmp_path)
    log = folder + b"/srv-\xff\xfe.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        server = _start([sys.executable, "-c", SLEEPER], stdout=fd)
    finally:
        os.close(fd)
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and b"ready" not in open(log, "rb").read():
            time.sleep(0.05)
        proc = _quick(server.pid, "-o", str(tmp_path / "r.md"))
        assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
        md = (tmp_path / "r.md").read_text(encoding="utf-8")
        snap = json.loads((tmp_path / "r.snapshot.json").read_text())
        assert snap["log"]["path"].endswith(".log") and "\ufffd" in snap["log"]["path"]
        bproc, _ = run_cli(
            "snapshot",
            "localhost",
            "--pid",
            str(server.pid),
            "--window",
            "0.2",
            "--no-gpu",
            "-o",
            str(tmp_path / "b"),
            timeout_s=90,
        )
        no_traceback(bproc)
        assert (tmp_path / "b" / "report.md").is_file(), bproc.stderr
        assert md.startswith("# hangdoctor")
    finally:
        _stop(server)


# ---------------------------------------------------------------- F18 Markdown that goes live


def render_summary_line(text: str) -> str:
    """The raw-HTML <summary> escaping of the Markdown report (GitHub links mentions there)."""
    from hangdoctor.report.markdown import _summary

    return _summary(text)


def test_f18_mentions_refs_urls_are_inert_and_bidi_is_gone(sleeper, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "ERROR ping @octocat about org/repo#123 and #7, see https://evil.example/x "
        "and www.evil.example; file \u202etxt.exe\n"
    )
    outs = {}
    for suffix in ("md", "html", "json"):
        proc = _quick(sleeper.pid, "--log", str(log), "-o", str(tmp_path / f"r.{suffix}"))
        outs[suffix] = (tmp_path / f"r.{suffix}").read_text(encoding="utf-8")
        outs["terminal-" + suffix] = proc.stderr
    assert "octocat" in outs["md"], "the log line is in the report"
    # code blocks are inert on GitHub; everything outside them must be too
    import re

    outside = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1[ \t]*$", "", outs["md"])
    from hangdoctor.report.markdown import md_text

    outside += md_text(log.read_text()) + render_summary_line(log.read_text())
    for live in ("@octocat", "#123", "#7", "https://evil", "www.evil"):
        assert live not in outside, live
    for name, text in outs.items():
        assert "\u202e" not in text and "\\u202e" not in text.lower(), name


# ---------------------------------------------------------------- F13 a trickling HTTP server


@pytest.fixture
def trickle_server() -> Iterator[int]:
    """127.0.0.1: answers every connection with an HTTP head, one byte every 0.5 s, forever."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        head = b"HTTP/1.0 200 OK\r\nX-Pad: " + b"a" * 100000
        try:
            conn.recv(4096)
            for i in range(len(head)):
                if stop.wait(0.5):
                    break
                conn.sendall(head[i : i + 1])
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        srv.close()


def test_f13_every_http_exchange_has_a_total_budget(trickle_server: int) -> None:
    """Before: the probe read a byte per recv timeout (up to 4 KB: half an hour a path) and
    watch's urllib read headers for over 600 s."""
    from hangdoctor import watch
    from hangdoctor.collect import sources

    t0 = time.monotonic()
    res = sources.http_probe(trickle_server, "127.0.0.1", 1.5)
    probe_s = time.monotonic() - t0
    assert "no answer within" in (res["error"] or ""), res
    t0 = time.monotonic()
    health = watch.check_url(f"http://127.0.0.1:{trickle_server}/health", 1.5)
    url_s = time.monotonic() - t0
    assert not health.ok and "no answer within" in health.detail, health
    print(f"WALL f13-probe {probe_s:.2f} s deadline 1.5 s")
    print(f"WALL f13-watch-url {url_s:.2f} s deadline 1.5 s")
    # the budget holds: 1.5 s each (slack for a loaded machine)
    assert probe_s < 1.5 + 5 and url_s < 1.5 + 5, (probe_s, url_s)


def test_f13_watch_stops_on_the_first_sigint_while_a_poll_trickles(
    trickle_server: int, tmp_path: Path
) -> None:
    import signal

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hangdoctor",
            "watch",
            "localhost",
            "--url",
            f"http://127.0.0.1:{trickle_server}/health",
            "--interval",
            "30",
            "--after",
            "600",
            "--out-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        time.sleep(2.0)  # inside the first poll, which trickles
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
        stopped_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(f"WALL f13-watch-sigint {stopped_s:.2f} s after SIGINT")
    assert proc.returncode == 0, err
    assert "SIGINT: stopped" in err, err
    assert stopped_s < 5, f"stopped {stopped_s:.1f} s after SIGINT"


# ---------------------------------------------------------------- F14 host-wide kernel lines


def _live_snapshot_of_a_stopped_python(tmp_path: Path) -> tuple[dict, int]:
    import signal

    with open(tmp_path / "out", "w") as f:
        server = _start([sys.executable, "-c", SLEEPER], stdout=f)
    try:
        _wait_for_file_text(tmp_path / "out", "ready")
        os.kill(server.pid, signal.SIGSTOP)
        proc = _quick(server.pid, "--save-snapshot", str(tmp_path / "s.json"))
        assert proc.returncode != 4, proc.stderr
    finally:
        os.kill(server.pid, signal.SIGCONT)
        _stop(server)
    return json.loads((tmp_path / "s.json").read_text()), server.pid


def _with_kernel(snap: dict, lines: list[str], path: Path) -> Path:
    snap = dict(snap, kernel_log={"lines": lines})
    snap["manifest"] = [m for m in snap["manifest"] if m.get("source") != "kernel_log"]
    snap["manifest"].append({"source": "kernel_log", "status": "ok", "duration_s": 0.0})
    path.write_text(json.dumps(snap))
    return path


def _causes(path: Path) -> dict[str, float]:
    proc, _ = run_cli("analyze", str(path), "--json")
    no_traceback(proc)
    return {c["id"]: c["score"] for c in json.loads(proc.stdout)["causes"]}


def test_f14_unrelated_old_hung_tasks_are_context_not_the_cause(tmp_path: Path) -> None:
    """A stopped Python on a host whose dmesg has hung-task lines of another, long-gone
    process: before, io-stall (0.58) was the top cause. Lines naming the target still count."""
    snap, pid = _live_snapshot_of_a_stopped_python(tmp_path)
    start = min(p["create_time"] for p in snap["processes"])

    def stamp(epoch: float) -> str:  # dmesg -T: the host's local time
        return time.strftime("[%a %b %d %H:%M:%S %Y]", time.localtime(epoch))

    unrelated = [
        f"{stamp(start - 3600 + 120 * i)} INFO: task kworker/u8:3:4242 blocked for more than "
        "120 seconds."
        for i in range(3)
    ]
    causes = _causes(_with_kernel(snap, unrelated, tmp_path / "old.json"))
    top = max(causes, key=causes.get) if causes else None
    assert top != "io-stall" and causes.get("io-stall", 0) < 0.2, causes
    naming = [f"{stamp(start + 5)} INFO: task python3:{pid} blocked for more than 120 seconds."]
    causes = _causes(_with_kernel(snap, naming, tmp_path / "named.json"))
    assert causes.get("io-stall", 0) >= 0.3, causes


# ---------------------------------------------------------------- the deadline on a busy host


@pytest.mark.slow
def test_deadline_holds_on_a_host_whose_cores_are_all_busy(sleeper, tmp_path: Path) -> None:
    """A hung server often spins on every core. The warm-up thread (checks, templates) ran at
    nice 19 and the run joined it: 22.3 s against --deadline 8 with two spinners per core
    (measured). It goes back to normal priority once the evidence is in."""
    n = (os.cpu_count() or 1) * 2
    spin = "import time\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"
    spinners = [_start([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        time.sleep(0.5)
        deadline_s = 8
        proc, wall_s = run_cli(
            "diagnose",
            "localhost",
            "--pid",
            str(sleeper.pid),
            "--window",
            "0.5",
            "--deadline",
            str(deadline_s),
            "--no-gpu",
            "-o",
            str(tmp_path / "r.html"),
            timeout_s=120,
        )
    finally:
        for s in spinners:
            _stop(s)
    no_traceback(proc)
    print(f"WALL busy-host {wall_s:.2f} s deadline {deadline_s} s")
    assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
    assert wall_s < deadline_s + 4, f"{wall_s:.1f} s against --deadline {deadline_s}"
