"""The redaction corpus (issue 15): every planted secret form, in every place, through every
output, locally and over SSH: zero leaks.

A real process (tests/faults/corpus_target.py) carries every form of tests/faults/corpus.py in
its environment, its argv, the locals of the frame it waits in (``--locals``), its log, and the
answer of its HTTP endpoint. It is diagnosed for real: on this host and through the loopback
sshd, with and without ``--pid`` (discovery), as a ``snapshot`` bundle, re-rendered with
``report``, and pasted as text into ``analyze``. Every byte of every output is searched:
HTML, Markdown, JSON reports, saved snapshots, every bundle member, stdout and stderr (the
terminal). The yardstick test proves the secrets are really there to leak.
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

from tests import sshd_fixture
from tests.conftest import find_pyspy
from tests.faults import corpus
from tests.faults.helpers import Helper, no_traceback, run_cli, start_helper, stop_helper

sshd = sshd_fixture.sshd
SECRETS = corpus.secrets()
EXIT_OK = (0, 3, 5, 6, 7)


def leaks(text: str) -> list[str]:
    """Names of the corpus secrets found in ``text`` (raw, or HTML-unescaped)."""
    found = []
    for variant in (text, html.unescape(text)):
        for name, value in SECRETS.items():
            if value in variant and name not in found:
                found.append(name)
    return found


class Outputs:
    """Every output collected, by label; checked at the end, counted for the README."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, label: str, data: bytes | str) -> None:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        self.items.append((label, text))

    def add_run(self, label: str, proc: subprocess.CompletedProcess) -> None:
        no_traceback(proc)
        assert proc.returncode in EXIT_OK, f"{label}: exit {proc.returncode}: {proc.stderr[-2000:]}"
        self.add(f"{label} stdout", proc.stdout)
        self.add(f"{label} stderr (terminal)", proc.stderr)

    def add_folder(self, label: str, folder: Path) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.add(f"{label}/{path.relative_to(folder)}", path.read_bytes())

    def add_tar(self, label: str, path: Path) -> None:
        self.add(f"{label} (archive bytes)", path.read_bytes())
        with tarfile.open(path, "r:*") as tar:
            for member in tar.getmembers():
                self.add(f"{label} member name", member.name)
                if member.isfile():
                    f = tar.extractfile(member)
                    assert f is not None
                    self.add(f"{label}/{member.name}", f.read())

    def assert_clean(self) -> None:
        dirty = {label: leaks(text) for label, text in self.items}
        dirty = {k: v for k, v in dirty.items() if v}
        print(f"CORPUS {len(self.items)} outputs x {len(SECRETS)} secrets searched")
        assert not dirty, f"leaks: {json.dumps(dirty, indent=1)[:4000]}"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Helper, Path]]:
    folder = tmp_path_factory.mktemp("corpus")
    log = folder / "server.log"
    env = {**os.environ, **corpus.ENV_BY_NAME}
    for i, (_name, text, _secret) in enumerate(corpus.FREE_TEXT):
        env[f"CORPUS_V{i}"] = text
    args = ["-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    for flag, value in corpus.ARGV:
        args += [flag, value]
    args += ["--note", corpus.FREE_TEXT[7][1], "--note", corpus.FREE_TEXT[10][1]]
    args += ["--log", str(log), "--lifetime", "400"]
    helper = start_helper("corpus_target.py", *args, env=env)
    yield helper, log
    stop_helper(helper)


def _pyspy_locals(pid: int) -> str:
    pyspy = find_pyspy()
    assert pyspy
    dump = subprocess.run(
        [pyspy, "dump", "--locals", "--pid", str(pid)], capture_output=True, text=True, timeout=30
    )
    assert dump.returncode == 0, dump.stderr
    return dump.stdout


def _http_body(port: int) -> str:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/health", timeout=10) as resp:
        return resp.read().decode()


def test_the_target_really_carries_every_form(target) -> None:
    """The yardstick: each planted secret is visible in the raw places a diagnosis reads."""
    helper, log = target
    environ = Path(f"/proc/{helper.pid}/environ").read_bytes().decode()
    cmdline = Path(f"/proc/{helper.pid}/cmdline").read_bytes().decode()
    dump = _pyspy_locals(helper.pid)
    raw = {
        "env": environ,
        "argv": cmdline,
        "locals": dump,
        "log": log.read_text(),
        "http": _http_body(helper.info["port"]),
    }
    missing = set(SECRETS) - set(leaks("\n".join(raw.values())))
    assert not missing, missing
    # where each kind was planted
    for name, _text, secret in corpus.FREE_TEXT:
        assert secret in environ and secret in raw["log"], name
        assert secret in dump or secret[:12] in dump, f"locals: {name}"
    for _flag, value in corpus.ARGV:
        assert value in cmdline
    for i in corpus.HTTP_BODY_FORMS:
        assert corpus.FREE_TEXT[i][2] in raw["http"]


def _diagnose_runs(
    out: Outputs, where: str, host_args: list[str], pid: int, log: Path, folder: Path
) -> None:
    common = [
        "--pid",
        str(pid),
        "--locals",
        "--log",
        str(log),
        "--window",
        "0.5",
        "--deadline",
        "30",
        "--no-gpu",
    ]
    runs = [
        ("html", ["-o", str(folder / "r.html"), "--save-snapshot", str(folder / "s.json")]),
        ("md", ["-o", str(folder / "r.md")]),
        ("json", ["--json", "-o", str(folder / "r.json")]),
    ]
    for label, extra in runs:
        proc, _ = run_cli("diagnose", *host_args, *common, *extra, timeout_s=120)
        out.add_run(f"{where} diagnose {label}", proc)
    snap = json.loads((folder / "s.json").read_text())
    stack = snap["stacks"][str(pid)]
    assert stack["status"] == "ok", stack
    assert any(
        f.get("locals") for s in stack["samples"] for t in s["threads"] for f in t["frames"]
    ), "the locals were read"
    assert snap["log"]["tail"] and any(h.get("body") for h in snap["http"]), "log and HTTP read"
    bundle = folder / "b.tar.gz"
    proc, _ = run_cli("snapshot", *host_args, *common[:-1], "-o", str(bundle), timeout_s=120)
    out.add_run(f"{where} snapshot", proc)
    out.add_tar(f"{where} bundle", bundle)
    out.add_folder(f"{where} files", folder)


def test_no_form_leaks_locally(target, tmp_path: Path) -> None:
    helper, log = target
    out = Outputs()
    local = tmp_path / "local"
    local.mkdir()
    _diagnose_runs(out, "local", ["localhost"], helper.pid, log, local)
    # discovery (no --pid): the discovered server's command line is in the records
    proc, _ = run_cli(
        "diagnose",
        "localhost",
        "--log",
        str(log),
        "--window",
        "0",
        "--no-gpu",
        "--json",
        "-o",
        str(tmp_path / "d.md"),
        "--save-snapshot",
        str(tmp_path / "ds.json"),
        timeout_s=120,
    )
    out.add_run("local discovery", proc)
    found = json.loads((tmp_path / "ds.json").read_text())
    hosts = found["hosts"] if "hosts" in found else [found]
    assert any(d["pid"] == helper.pid for h in hosts for d in h["targets"]["discovery"])
    # re-rendered from the saved snapshot
    for name in ("again.html", "again.md", "again.json"):
        proc, _ = run_cli("report", str(local / "s.json"), "-o", str(tmp_path / name))
        out.add_run(f"report {name}", proc)
    for name in ("d.md", "ds.json", "again.html", "again.md", "again.json"):
        out.add(name, (tmp_path / name).read_bytes())
    out.assert_clean()
    assert len(out.items) >= 40, len(out.items)


def test_no_form_leaks_from_pasted_evidence(target, tmp_path: Path) -> None:
    helper, log = target
    paste = tmp_path / "paste"
    paste.mkdir()
    environ = Path(f"/proc/{helper.pid}/environ").read_bytes().replace(b"\0", b"\n").decode()
    dump = _pyspy_locals(helper.pid)
    ps = subprocess.run(
        ["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True, timeout=20
    ).stdout
    ps_lines = [ps.splitlines()[0]] + [ln for ln in ps.splitlines() if str(helper.pid) in ln]
    files = {
        "pyspy.txt": dump,
        "env.txt": environ,
        "ps.txt": "\n".join(ps_lines) + "\n",
        "server.log": log.read_text(),
        "http.txt": _http_body(helper.info["port"]),
        "ticket.md": "It hangs.\n\n```\n" + dump + "```\n\nlog:\n```\n" + log.read_text() + "```\n",
    }
    for name, text in files.items():
        (paste / name).write_text(text)
    assert not set(SECRETS) - set(leaks("".join(files.values()))), "the paste carries them all"
    out = Outputs()
    inputs = [str(paste / n) for n in files]
    for label, extra in (
        ("html", ["-o", str(tmp_path / "a.html")]),
        ("md", ["-o", str(tmp_path / "a.md")]),
        ("json", ["--json", "-o", str(tmp_path / "a.json")]),
    ):
        proc, _ = run_cli("analyze", *inputs, *extra, timeout_s=120)
        out.add_run(f"analyze {label}", proc)
    stdin = subprocess.run(
        [sys.executable, "-m", "hangdoctor", "analyze", "-", "--json"],
        input=files["ticket.md"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    out.add_run("analyze stdin", stdin)
    for name in ("a.html", "a.md", "a.json"):
        out.add(name, (tmp_path / name).read_bytes())
    out.assert_clean()
    assert json.loads((tmp_path / "a.json").read_text())["stacks"], "the dump was parsed"


def test_no_form_leaks_over_ssh(target, sshd, tmp_path: Path) -> None:
    helper, log = target
    out = Outputs()
    folder = tmp_path / "ssh"
    folder.mkdir()
    _diagnose_runs(
        out, "ssh", [sshd.alias, "--ssh-config", sshd.ssh_config], helper.pid, log, folder
    )
    snap = json.loads((folder / "s.json").read_text())
    assert any(m.get("source") == "ssh" for m in snap["manifest"]), "it went over SSH"
    out.assert_clean()
