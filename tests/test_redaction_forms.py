"""One redaction pass over every sink (red-team round 2, class 3): every form of
hangdoctor.redact.FORMS is planted in every input channel and every output is searched for its
secret.

Channels: free text (one line, and among log lines), a server's command line, its environment,
its stdout log, the target's stderr in an error line (``via:``), a host spec, a pasted log and a
pasted snapshot (``analyze``), ``watch``'s log lines. Outputs: the snapshot, the report (Markdown
and JSON), the bundle's members, stdout and stderr.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from hangdoctor import redact
from tests.faults.helpers import no_traceback, run_cli

FORMS = redact.FORMS
IDS = [f[0] for f in FORMS]
SLEEPER = "import time, sys\nprint(sys.argv[1:] and 'ready', flush=True)\ntime.sleep(120)\n"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    redact.forget_known()


@pytest.mark.parametrize("name, text, secret", FORMS, ids=IDS)
def test_each_form_alone_in_text_lines_argv_env_and_objects(name: str, text: str,
                                                            secret: str) -> None:
    """Each form by pattern alone (nothing learnt before), in every in-process channel."""
    outs = {
        "text": redact.redact_text(text),
        "line-in-log": "\n".join(redact.redact_lines(["INFO a", text, "INFO b"])),
        "argv-element": " ".join(redact.redact_argv(["python", "-c", text])),
        "env-value": json.dumps(redact.redact_env({"HD_NOTE": text})),
        "object": json.dumps(redact.redact_obj({"detail": text, "list": [1, text]})),
        "deep": json.dumps(redact.redact_deep({"a": [{"b": text}]})),
    }
    for channel, out in outs.items():
        redact.forget_known()
        assert secret not in out, (channel, out)


def test_known_values_are_scrubbed_wherever_they_recur() -> None:
    """A value met once in a secret position is masked in any later text, bare."""
    redact.redact_argv(["vllm", "serve", "m", "--api-key", "KnownOnce0042xyz"])
    assert "KnownOnce0042xyz" not in redact.redact_text("client sent key KnownOnce0042xyz today")
    assert "KnownOnce0042xyz" not in redact.scrub_known("x KnownOnce0042xyz")


def test_what_a_report_needs_is_kept() -> None:
    kept = [
        "Namespace(tokenizer='meta/llama', max_num_batched_tokens=8192, api_key=None)",
        "INFO 127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200",
        "git@github.com:org/repo.git", "max token 4096", "http://host:8000/v1/models",
        "Digest sha256:abcdef0123", "token count 5", "bypass=1",
    ]
    for line in kept:
        assert redact.redact_text(line) == line


def _all_lines() -> str:
    return "\n".join(t for _, t, _ in FORMS) + "\n"


def _search(outputs: dict[str, str]) -> list[tuple[str, str]]:
    return [(form, channel) for form, _, secret in FORMS for channel, text in outputs.items()
            if secret in text]


def _bundle_text(path: Path) -> str:
    out = []
    with tarfile.open(path) as tar:
        for m in tar:
            if m.isfile():
                out.append(tar.extractfile(m).read().decode("utf-8", "replace"))
    return "\n".join(out)


def test_every_form_in_every_live_channel_of_a_real_server(tmp_path: Path) -> None:
    """A real process whose command line, environment and stdout log carry every form;
    diagnose writes the snapshot, a Markdown and a JSON report and a bundle. Not one secret in
    any output."""
    log = tmp_path / "server.log"
    env = {**os.environ}
    for i, (_n, text, _s) in enumerate(FORMS):
        env[f"HD_FORM_{i}"] = text
    for _n, text, _s in FORMS:
        if text.split("=", 1)[0].isupper() and "=" in text and " " not in text.split("=", 1)[0]:
            k, v = text.split("=", 1)
            env[k] = v.split(" ")[0]
    with open(log, "w") as f:
        f.write(_all_lines())
        f.flush()
        server = subprocess.Popen([sys.executable, "-c", SLEEPER, *[t for _, t, _ in FORMS]],
                                  stdout=f, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        snap, md, js, bundle = (tmp_path / n for n in ("s.json", "r.md", "r.json", "b.tar.gz"))
        proc, _ = run_cli("diagnose", "localhost", "--pid", str(server.pid), "--window", "0",
                          "--no-gpu", "--save-snapshot", str(snap), "-o", str(md), "--json")
        js.write_text(proc.stdout)
        no_traceback(proc)
        outputs = {"snapshot": snap.read_text(), "markdown": md.read_text(),
                   "json": js.read_text(), "stdout": proc.stdout, "stderr": proc.stderr}
        assert any("ready" in ln for ln in json.loads(snap.read_text())["log"]["tail"])
        proc2, _ = run_cli("snapshot", "localhost", "--pid", str(server.pid), "--window", "0",
                           "--no-gpu", "-o", str(bundle))
        no_traceback(proc2)
        if bundle.exists():
            outputs["bundle"] = _bundle_text(bundle)
            outputs["bundle-stderr"] = proc2.stderr
        leaks = _search(outputs)
        print(f"FIGURES live: planted {len(FORMS)} forms x 3 channels, searched "
              f"{len(outputs)} outputs, leaked {len(leaks)}")
        assert not leaks, leaks
    finally:
        server.kill()
        server.wait()


def test_every_form_pasted_to_analyze_as_a_log_and_as_a_snapshot(tmp_path: Path) -> None:
    pasted = tmp_path / "vllm.log"
    pasted.write_text("INFO vLLM API server version 0.6.3\n" + _all_lines())
    snap = {"schema_version": 1, "origin": "live", "notes": [t for _, t, _ in FORMS],
            "manifest": [{"source": "log", "status": "failed", "detail": t} for _, t, _ in FORMS],
            "processes": [], "redacted": False}
    snap_path = tmp_path / "snap.json"
    snap_path.write_text(json.dumps(snap))
    outputs = {}
    for label, arg in (("log", pasted), ("snapshot", snap_path)):
        out = tmp_path / f"{label}.md"
        proc, _ = run_cli("analyze", str(arg), "-o", str(out), "--json")
        no_traceback(proc)
        outputs[f"{label}-stdout"] = proc.stdout
        outputs[f"{label}-stderr"] = proc.stderr
        if out.exists():
            outputs[f"{label}-report"] = out.read_text()
    leaks = _search(outputs)
    print(f"FIGURES analyze: planted {len(FORMS)} forms x 2 channels, searched {len(outputs)} "
          f"outputs, leaked {len(leaks)}")
    assert not leaks, leaks


def test_every_form_in_a_via_targets_stderr_and_name(tmp_path: Path) -> None:
    """The target's stderr goes into the error line, the host table and the JSON; the via
    command is the target's name."""
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/sh\ncat <<'EOF' >&2\n" + _all_lines() + "EOF\nexit 3\n")
    script.chmod(0o755)
    forms_arg = " ".join(f"'{s}'" for _, _, s in FORMS[:0])
    out = tmp_path / "r.json"
    proc, _ = run_cli("diagnose", f"via:{script} --token FormViaName41x {forms_arg}",
                      "--deadline", "15", "--no-gpu", "-o", str(out))
    no_traceback(proc)
    outputs = {"stdout": proc.stdout, "stderr": proc.stderr,
               "json": out.read_text() if out.exists() else ""}
    leaks = _search(outputs)
    assert "FormViaName41x" not in proc.stderr + proc.stdout + outputs["json"]
    print(f"FIGURES via-stderr: planted {len(FORMS)}, searched {len(outputs)}, leaked {len(leaks)}")
    assert not leaks, leaks


def test_watch_log_lines_hide_url_credentials() -> None:
    from hangdoctor.watch import Logger

    buf = io.StringIO()
    Logger(stream=buf)("health failing: http://u:FormWatch42@127.0.0.1:9/health?access_token="
                       "FormWatch43 refused")
    assert "FormWatch42" not in buf.getvalue() and "FormWatch43" not in buf.getvalue()


CANARY_SERVER = r'''
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path.startswith("/v1/models")
        body = json.dumps({"data": [{"id": "m"}]}).encode() if ok else b"warming up"
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        # echoes the key it was sent, bare, as some front ends do
        body = ("invalid api key %s" % self.headers.get("Authorization").split()[-1]).encode()
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'''


def test_r07_the_canarys_error_body_never_carries_our_key_and_a_401_is_not_hung(
        tmp_path: Path) -> None:
    """Before: the 401 body echoing our --api-key went into the reports unredacted, and the
    refused canary was read as 'no answer' (HUNG). After: our key is scrubbed wherever it
    recurs, and an HTTP answer is an answer."""
    server = subprocess.Popen([sys.executable, "-c", CANARY_SERVER], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        assert port.isdigit()
        snap = tmp_path / "s.json"
        proc, _ = run_cli("diagnose", "localhost", "--pid", str(server.pid), "--window", "1",
                          "--no-gpu", "--probe-generate", "--api-key", "R07ourKey0099",
                          "--save-snapshot", str(snap), "--json")
        no_traceback(proc)
        for label, text in (("snapshot", snap.read_text()), ("stdout", proc.stdout),
                            ("stderr", proc.stderr)):
            assert "R07ourKey0099" not in text, label
        canary = json.loads(snap.read_text())["engine_progress"]["canary"]
        assert canary["code"] == 401 and "invalid api key" in canary["error"], canary
        # an HTTP answer is an answer: not "no answer", not work stuck in flight
        assert "no answer: HTTP 401" not in proc.stdout
        assert "canary got no answer" not in proc.stdout
        assert "refused, not hung" in proc.stdout
    finally:
        server.kill()
        server.wait()


LOCALS_SERVER = r'''
import time
def serve():
    config = {"accessToken": "L5camelLocal01x", "clientSecret": "L5camelLocal02x", "port": 8000}
    creds = ("admin", "L5tupleLocal03x")
    auth = ("svc", "L5tupleLocal04x")
    print("ready", flush=True)
    time.sleep(300)
serve()
'''


def test_l5_locals_keep_no_camelcase_or_tuple_credentials(tmp_path: Path) -> None:
    """`diagnose --locals` (py-spy's locals): a dict with camelCase secret keys and credential
    tuples under `creds` / `auth`. Before: kept in the snapshot."""
    server = subprocess.Popen([sys.executable, "-c", LOCALS_SERVER], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        snap = tmp_path / "s.json"
        proc, _ = run_cli("diagnose", "localhost", "--pid", str(server.pid), "--window", "0",
                          "--no-gpu", "--locals", "--save-snapshot", str(snap), "--json")
        no_traceback(proc)
        text = snap.read_text()
        stacks = json.loads(text)["stacks"][str(server.pid)]
        if stacks.get("status") != "ok":
            pytest.skip(f"py-spy could not dump here: {stacks.get('error')}")
        assert "serve" in text and "locals" in text
        for secret in ("L5camelLocal01x", "L5camelLocal02x", "L5tupleLocal03x", "L5tupleLocal04x"):
            assert secret not in text + proc.stdout, secret
        assert "8000" in text  # what is not a secret stays
    finally:
        server.kill()
        server.wait()


PORT_SERVER = r'''
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(300)
'''


def test_l1_a_command_line_is_redacted_before_it_is_cut(tmp_path: Path) -> None:
    """`diagnose localhost --port P` names the server by its port; its command line was cut to
    300 characters before redaction, so a token across the cut kept its first half (too short
    for its pattern). Now redacted first, then cut at a word."""
    token = "hf_" + "L1cutToken" * 4
    # the cut at 300 characters falls 12 characters into the token
    pad = "x" * (300 - 12 - len(" ".join([sys.executable, "-c", PORT_SERVER])) - 2)
    server = subprocess.Popen([sys.executable, "-c", PORT_SERVER, pad, token], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        snap = tmp_path / "s.json"
        proc, _ = run_cli("diagnose", "localhost", "--port", port, "--window", "0", "--no-gpu",
                          "--save-snapshot", str(snap), "--json")
        no_traceback(proc)
        text = snap.read_text() + proc.stdout + proc.stderr
        found = json.loads(snap.read_text())["targets"]["discovery"]
        assert found and found[0]["pid"] == server.pid, found
        assert "L1cutTok" not in text  # not even the half before the cut
    finally:
        server.kill()
        server.wait()


def test_ordinary_words_after_a_secret_label_are_not_learnt() -> None:
    """A learnt value is scrubbed everywhere: only credential-shaped ones are learnt."""
    redact.redact_text("session=interactive auth=disabled token=unlimited")
    assert redact.redact_text("an interactive session, auth disabled") == \
        "an interactive session, auth disabled"
    redact.redact_text("token=Zq81mmPq0xLL")
    assert "Zq81mmPq0xLL" not in redact.redact_text("echo Zq81mmPq0xLL")
