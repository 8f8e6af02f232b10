"""Issue 8: no secret of a real target process reaches any byte of any output.

A real process (tests/faults/secret_target.py) carries secrets in its environment, its command
line, the Python locals of the frame it waits in (read with ``--locals``) and its log. Every
output hangdoctor can write is read back whole: the HTML / Markdown / JSON reports, the saved
snapshot, stdout and stderr, an ``analyze`` of the same evidence pasted as text, a ``report``
re-rendered from the snapshot, and the ``snapshot`` bundle (untarred) when that command exists.
``--no-redact`` keeps them, and then the report says so.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import find_pyspy, in_ci
from tests.faults import secret_target
from tests.faults.helpers import Helper, no_traceback, run_cli, start_helper, stop_helper

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJoYW5nZG9jdG9yLXRlc3QifQ."
    "c2lnbmF0dXJlU2VjcmV0VmFsdWUxMjM"
)
ENV_SECRETS = {
    "HF_TOKEN": "hf_EnvTokenAbCdEfGhIjKlMnOpQrStUv12",
    "OPENAI_API_KEY": "sk-proj-EnvKeyQ8xT2mZr7LwVb3Nc5Kd9Hf1",
    "AWS_ACCESS_KEY_ID": "AKIAQ3EXAMPLEZ7K4M2N",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY",
    "MY_PASSWORD": "Tr0ub4dorHorseBattery9",
    "DATABASE_URL": "postgres://dbuser:S3cretDbPassw0rd@db.internal:5432/app",
    "NCCL_DEBUG_FILE": JWT,  # a secret in a variable whose name looks harmless (and is kept)
    "GITHUB_TOKEN": "ghp_EnvGithubTokenAbcdefghijklmnopqrstuv12",
}
ARG_SECRETS = {
    "--api-key": "ArgApiKeyZq9Xw8Cv7Bn6Ml5",
    "--hf-token": "hf_ArgTokenPo9Iu8Yt7Re6Wq5As4Df3",
    "--password": "ArgPassw0rdLk3Jh2Gf1",
    "url": "UrlPassw0rdMn4Bv5Cx6",
}
# What must never appear. For each secret also a distinctive core, so a partly masked value or
# an escaped variant (HTML entities, JSON escapes) is caught too.
SECRETS = {
    **{k: v for k, v in ENV_SECRETS.items() if k != "DATABASE_URL"},
    "DATABASE_URL password": "S3cretDbPassw0rd",
    **ARG_SECRETS,
    "local api_key": secret_target.LOCAL_API_KEY,
    "local bearer": secret_target.LOCAL_BEARER,
    "log bearer": secret_target.LOG_BEARER,
    "log hf token": secret_target.LOG_HF_TOKEN,
}


def _cores(value: str) -> list[str]:
    core = value.split("_", 1)[-1] if value.startswith(("hf_", "ghp_")) else value
    core = core.removeprefix("sk-proj-").removeprefix("sk-")
    if value == JWT:
        return [value, value.split(".")[1], value.split(".")[2]]
    return [value, core[2:14]]


def leaks(text: str) -> list[str]:
    """Names of the secrets found in ``text`` (raw, or after HTML unescaping)."""
    found = []
    for variant in (text, html.unescape(text)):
        for name, value in SECRETS.items():
            if any(c in variant for c in _cores(value)) and name not in found:
                found.append(name)
    return found


def _assert_clean(label: str, data: bytes | str) -> None:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found = leaks(text)
    assert not found, f"{label} leaks {found}"


def _assert_all_files_clean(folder: Path) -> int:
    n = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            _assert_clean(str(path.relative_to(folder)), path.read_bytes())
            n += 1
    return n


@pytest.fixture(scope="module")
def secret_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Helper, Path]]:
    """The target, with its log, running for the whole module."""
    folder = tmp_path_factory.mktemp("secret-target")
    log = folder / "server.log"
    env = {**os.environ, **ENV_SECRETS}
    args = [
        "--api-key",
        ARG_SECRETS["--api-key"],
        f"--hf-token={ARG_SECRETS['--hf-token']}",
        "--password",
        ARG_SECRETS["--password"],
        f"https://admin:{ARG_SECRETS['url']}@models.example.com/v1",
        "--log",
        str(log),
        "--lifetime",
        "150",
    ]
    helper = start_helper("secret_target.py", *args, env=env)
    yield helper, log
    stop_helper(helper)


def _diagnose(helper: Helper, log: Path, out: Path, *extra: str):
    proc, _wall = run_cli(
        "diagnose",
        "localhost",
        "--pid",
        str(helper.pid),
        "--locals",
        "--log",
        str(log),
        "--window",
        "0.5",
        "--deadline",
        "20",
        *extra,
        cwd=str(out),
    )
    no_traceback(proc)
    assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
    return proc


def test_the_target_really_carries_the_secrets(secret_process) -> None:
    """The yardstick: every planted secret is visible where a diagnosis looks."""
    helper, log = secret_process
    environ = Path(f"/proc/{helper.pid}/environ").read_bytes().decode()
    cmdline = Path(f"/proc/{helper.pid}/cmdline").read_bytes().decode()
    pyspy = find_pyspy()
    assert pyspy
    dump = subprocess.run(
        [pyspy, "dump", "--locals", "--pid", str(helper.pid)],
        capture_output=True,
        text=True,
        timeout=20,
    ).stdout
    seen = leaks(environ + cmdline + dump + log.read_text())
    assert sorted(seen) == sorted(SECRETS), set(SECRETS) - set(seen)


def test_diagnose_outputs_hold_no_secret(secret_process, tmp_path: Path) -> None:
    helper, log = secret_process
    out = tmp_path / "out"
    out.mkdir()
    p1 = _diagnose(helper, log, out, "-o", "report.html", "--save-snapshot", "s.json")
    p2 = _diagnose(helper, log, out, "-o", "report.md", "--save-snapshot", "s2.json")
    p3 = _diagnose(helper, log, out, "--json", "-o", "report.json")
    for label, proc in (("html run", p1), ("md run", p2), ("json run", p3)):
        _assert_clean(f"{label} stdout", proc.stdout)
        _assert_clean(f"{label} stderr", proc.stderr)
    assert {"report.html", "report.md", "report.json", "s.json", "s2.json"} <= {
        p.name for p in out.iterdir()
    }
    assert _assert_all_files_clean(out) >= 5
    # the evidence really was collected (else "no leak" proves nothing)
    snap = json.loads((out / "s.json").read_text())
    assert snap["redacted"] is True
    stack = snap["stacks"][str(helper.pid)]
    assert stack["status"] == "ok", stack
    local_names = {
        loc.get("name")
        for s in stack["samples"]
        for t in s["threads"]
        for f in t["frames"]
        for loc in (f.get("locals") or [])
    }
    assert {"api_key", "headers"} <= local_names, local_names
    proc_rec = {p["pid"]: p for p in snap["processes"]}[helper.pid]
    assert "NCCL_DEBUG_FILE" in proc_rec["env"] and "HF_TOKEN" in proc_rec["env"]
    assert any(a == "--api-key" for a in proc_rec["cmdline"])
    assert snap["log"]["tail"], "the log was read"
    analysis = json.loads(p3.stdout)
    assert analysis["verdict"] in ("hung", "healthy", "progressing", "inconclusive", "dead")


def test_report_rerendered_from_the_snapshot_holds_no_secret(
    secret_process, tmp_path: Path
) -> None:
    helper, log = secret_process
    out = tmp_path / "out"
    out.mkdir()
    _diagnose(helper, log, out, "--save-snapshot", "s.json", "-q")
    for name in ("again.html", "again.md", "again.json"):
        proc, _ = run_cli("report", str(out / "s.json"), "-o", str(out / name))
        no_traceback(proc)
        assert proc.returncode == 0, proc.stderr
        _assert_clean(f"report {name} stderr", proc.stderr + proc.stdout)
    assert _assert_all_files_clean(out) == 4


def _pasted_evidence(helper: Helper, log: Path, folder: Path) -> list[Path]:
    """What a user pastes in a ticket: py-spy text with locals, the env, ps, the log."""
    pyspy = find_pyspy()
    assert pyspy
    dump = subprocess.run(
        [pyspy, "dump", "--locals", "--pid", str(helper.pid)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert dump.returncode == 0, dump.stderr
    environ = Path(f"/proc/{helper.pid}/environ").read_bytes().replace(b"\0", b"\n")
    ps = subprocess.run(["ps", "-ef"], capture_output=True, text=True, timeout=20).stdout
    ps_lines = [ps.splitlines()[0]] + [ln for ln in ps.splitlines() if str(helper.pid) in ln]
    files = {
        "pyspy.txt": dump.stdout,
        "env.txt": environ.decode(),
        "ps.txt": "\n".join(ps_lines) + "\n",
        "server.log": log.read_text(),
        "ticket.md": "Our server hangs.\n\n```\n"
        + dump.stdout
        + "```\n\nlog:\n```\n"
        + log.read_text()
        + "```\n",
    }
    paths = []
    for name, text in files.items():
        path = folder / name
        path.write_text(text)
        paths.append(path)
    assert len(leaks("".join(files.values()))) == len(SECRETS), "the paste carries them all"
    return paths


def test_analyze_of_pasted_evidence_holds_no_secret(secret_process, tmp_path: Path) -> None:
    helper, log = secret_process
    pasted = tmp_path / "pasted"
    pasted.mkdir()
    inputs = [str(p) for p in _pasted_evidence(helper, log, pasted)]
    out = tmp_path / "out"
    out.mkdir()
    runs = [
        run_cli("analyze", *inputs, "-o", str(out / "a.html"))[0],
        run_cli("analyze", *inputs, "-o", str(out / "a.md"))[0],
        run_cli("analyze", *inputs, "--json", "-o", str(out / "a.json"))[0],
    ]
    stdin_text = (pasted / "ticket.md").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "analyze", "-", "--json"],
        input=stdin_text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    runs.append(proc)
    for i, proc in enumerate(runs):
        no_traceback(proc)
        assert proc.returncode in (0, 3, 5, 6, 7), proc.stderr
        _assert_clean(f"analyze run {i} stdout", proc.stdout)
        _assert_clean(f"analyze run {i} stderr", proc.stderr)
    assert _assert_all_files_clean(out) == 3
    analysis = json.loads(runs[2].stdout)
    assert analysis["stacks"], "the pasted dump was parsed"


def _has_snapshot_command() -> bool:
    proc, _ = run_cli("snapshot", "--help", timeout_s=30)
    return proc.returncode == 0


def test_snapshot_bundle_holds_no_secret(secret_process, tmp_path: Path) -> None:
    if not _has_snapshot_command():
        if in_ci():
            pytest.fail("`hangdoctor snapshot` is missing, but CI must test its bundle")
        pytest.skip("`hangdoctor snapshot` (the bundle command) does not exist yet")
    helper, log = secret_process
    bundle = tmp_path / "b.tar.gz"
    proc, _ = run_cli(
        "snapshot",
        "localhost",
        "--pid",
        str(helper.pid),
        "--locals",
        "--log",
        str(log),
        "--window",
        "0.5",
        "-o",
        str(bundle),
        timeout_s=90,
    )
    no_traceback(proc)
    _assert_clean("snapshot stdout", proc.stdout)
    _assert_clean("snapshot stderr", proc.stderr)
    assert bundle.is_file(), proc.stderr
    _assert_clean("the bundle's bytes", bundle.read_bytes())
    n = 0
    with tarfile.open(bundle, "r:*") as tar:
        for member in tar.getmembers():
            assert not member.name.startswith("/") and ".." not in member.name.split("/")
            _assert_clean(f"bundle member name {member.name}", member.name)
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                _assert_clean(f"bundle member {member.name}", f.read())
                n += 1
    assert n >= 1


def test_no_redact_keeps_secrets_and_says_so(secret_process, tmp_path: Path) -> None:
    helper, log = secret_process
    out = tmp_path / "out"
    out.mkdir()
    proc = _diagnose(
        helper, log, out, "--no-redact", "-o", "report.html", "--save-snapshot", "s.json", "--json"
    )
    snap_text = (out / "s.json").read_text()
    html_text = (out / "report.html").read_text()
    assert json.loads(snap_text)["redacted"] is False
    # the evidence keeps them: environment, command line, locals, log
    kept = leaks(snap_text)
    for name in ("HF_TOKEN", "NCCL_DEBUG_FILE", "--api-key", "local api_key", "log bearer"):
        assert name in kept, (name, kept)
    analysis = json.loads(proc.stdout)
    assert any("NOT REDACTED" in w for w in analysis["weakened"]), analysis["weakened"]
    assert "NOT REDACTED" in html_text
    md = out / "report.md"
    proc_md = _diagnose(helper, log, out, "--no-redact", "-o", "report.md")
    assert proc_md.returncode in (0, 3, 5, 6, 7)
    assert "NOT REDACTED" in md.read_text()


def test_secret_key_names_and_the_harmless_look_alikes() -> None:
    from hangdoctor.redact import is_secret_key, redact_env

    for key in ("HF_TOKEN", "DB_PWD", "API_KEY", "AWS_SECRET_ACCESS_KEY", "MY_PASSWORD"):
        assert is_secret_key(key), key
    for key in ("PWD", "OLDPWD", "NCCL_IB_HCA", "TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES"):
        assert not is_secret_key(key), key
    env = redact_env({"PWD": "/srv/vllm", "DB_PWD": "hunter2"})
    assert env == {"PWD": "/srv/vllm", "DB_PWD": "[REDACTED]"}
