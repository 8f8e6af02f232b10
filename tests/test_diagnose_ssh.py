"""Issue 3: the local scenarios diagnosed over a real OpenSSH server on loopback, through the
real CLI, give the same verdicts and top causes as locally; several hosts in one report."""

from __future__ import annotations

import json
import time

import pytest

from tests import sshd_fixture

sshd = sshd_fixture.sshd
pytestmark = [pytest.mark.ssh, pytest.mark.slow]

EXPECTED = [
    ("postload", {"workers": 4}, "hung", "post-load-deadlock"),
    ("postload", {"workers": 4, "die_rank": 1}, "hung", "rank-died"),
    ("healthy", {"workers": 2}, "healthy", None),
    ("compile", {"workers": 2}, "progressing", "compile-in-progress"),
]


def _ssh_args(server) -> list[str]:
    return ["--ssh-config", server.ssh_config]


@pytest.mark.parametrize("name,opts,verdict,top", EXPECTED, ids=[f"{e[0]}-{e[3]}" for e in EXPECTED])
def test_scenarios_over_ssh_match_local(sshd, run_scenario, hangdoctor_cli, name, opts, verdict, top):
    info = run_scenario(name, **opts)
    proc = hangdoctor_cli("diagnose", sshd.alias, "--pid", str(info.launcher_pid), "--log", info.log,
                          "--window", "2", "--json", *_ssh_args(sshd))
    assert proc.stdout.strip(), proc.stderr
    a = json.loads(proc.stdout)
    assert a["verdict"] == verdict, (a["verdict_reason"], proc.stderr)
    if top:
        assert a["causes"][0]["id"] == top
    else:
        assert all(c["score"] < 0.3 for c in a["causes"])
    ssh = [m for m in a["collection"] if m["source"] == "ssh"]
    assert ssh and ssh[0]["status"] == "ok"


@pytest.mark.torch
def test_gloo_desync_over_ssh(sshd, run_scenario, hangdoctor_cli):
    info = run_scenario("gloo_desync")
    proc = hangdoctor_cli("diagnose", sshd.alias, "--pid", str(info.launcher_pid), "--window", "2",
                          "--json", *_ssh_args(sshd))
    a = json.loads(proc.stdout)
    assert a["verdict"] == "hung" and a["causes"][0]["id"] == "nccl-desync", proc.stderr


def test_two_hosts_one_report_with_a_dead_host(sshd, run_scenario, hangdoctor_cli, tmp_path):
    info = run_scenario("postload", workers=2)
    out = tmp_path / "r.html"
    t0 = time.monotonic()
    proc = hangdoctor_cli("diagnose", sshd.alias, "localhost", "root@127.0.0.1:1",
                          "--pid", f"{sshd.alias}:{info.launcher_pid}", "--pid", f"localhost:{info.launcher_pid}",
                          "--window", "1", "--deadline", "20", "--json", "-o", str(out), *_ssh_args(sshd))
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 4, proc.stderr  # one host could not be collected
    a = json.loads(proc.stdout)
    statuses = {h["name"]: h["status"] for h in a["hosts"]}
    assert statuses[sshd.alias] == "ok" and statuses["localhost"] == "ok"
    assert statuses["root@127.0.0.1:1"] == "failed"
    assert a["causes"][0]["id"] == "post-load-deadlock"
    assert "root@127.0.0.1:1" in out.read_text()
    assert "refused" in proc.stderr.lower()
