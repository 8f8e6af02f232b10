"""NCCL RAS, Flight Recorder and the loaded NCCL: collector, views and checks.

RAS answers are replayed by a loopback server from what a real RAS said on an H200; Flight
Recorder dumps are the real files (an NCCL watchdog's dump on the H200, gloo ranks' dumps here).
End to end: a real process that mapped a library named libnccl and serves RAS on its
NCCL_RAS_ADDR, and the real gloo desync scenario writing real Flight Recorder dumps.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nccl_fixtures as nf
import pytest
from ras_replay import RasReplay, recorded_status, with_ranks

from hangdoctor.checkapi.api import CLEARED, FIRED
from hangdoctor.checkapi.registry import builtin_checks
from hangdoctor.collect import nccl_sources as nccl
from hangdoctor.evidence.model import Evidence

FIX = Path(__file__).parent / "fixtures" / "nccl"
PROTOCOL = ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]


def _check(cid: str):
    return next(c for c in builtin_checks() if c.id == cid)


# ------------------------------------------------------------ the RAS client
def test_query_ras_reads_the_recorded_json_status_and_sends_only_the_protocol() -> None:
    with RasReplay() as ras:
        res = nccl.query_ras("127.0.0.1", ras.port, timeout_s=3)
    assert res["ok"] and res["format"] == "json", res
    doc = res["status"]
    assert doc["nccl_version"] == "2.28.9"
    assert doc["communicators"][0]["ranks"][0]["collective_counts"]["AllReduce"] == 0
    assert ras.received == PROTOCOL


def test_query_ras_keeps_the_text_table_of_an_older_ras() -> None:
    with RasReplay(json_format=False) as ras:
        res = nccl.query_ras("127.0.0.1", ras.port, timeout_s=3)
    assert res["ok"] and res["format"] == "text"
    assert "Job summary" in res["text"] and "RUNNING" in res["text"]
    assert "SET FORMAT json refused" in res["format_note"]
    assert ras.received == PROTOCOL


def test_query_ras_of_a_silent_server_ends_within_its_timeout() -> None:
    with RasReplay(silent=True) as ras:
        t0 = time.monotonic()
        res = nccl.query_ras("127.0.0.1", ras.port, timeout_s=0.5)
        elapsed = time.monotonic() - t0
    assert not res["ok"] and "did not answer" in res["error"]
    assert elapsed < 3.0  # bounded by the timeout, not by the server


def test_query_ras_of_a_non_ras_server_says_so(tmp_path: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def http_like() -> None:
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        c.close()

    import threading

    t = threading.Thread(target=http_like, daemon=True)
    t.start()
    res = nccl.query_ras("127.0.0.1", port, timeout_s=2)
    srv.close()
    assert not res["ok"] and "not an NCCL RAS server" in res["error"]


def test_query_ras_caps_a_flood() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def flood() -> None:
        c, _ = srv.accept()
        c.sendall(b"SERVER PROTOCOL 2\nOK\n")
        try:
            for _ in range(2000):
                c.sendall(b"{" * 4096)
        except OSError:
            pass
        c.close()

    import threading

    threading.Thread(target=flood, daemon=True).start()
    res = nccl.query_ras("127.0.0.1", port, timeout_s=3, cap_bytes=64 << 10)
    srv.close()
    assert res["truncated"] and not res["ok"]


def test_nothing_listening_is_an_error_not_an_exception() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = nccl.query_ras("127.0.0.1", port, timeout_s=1)
    assert not res["ok"] and "not reachable" in res["error"]


@pytest.mark.parametrize("env,loaded,want", [
    ({}, True, ("127.0.0.1", 28028)),
    ({}, False, None),
    ({"NCCL_RAS_ENABLE": "0"}, True, None),
    ({"NCCL_RAS_ADDR": "localhost:29999"}, True, ("127.0.0.1", 29999)),
    ({"NCCL_RAS_ADDR": "[::1]:29999"}, True, ("::1", 29999)),
    ({"NCCL_RAS_ADDR": "10.0.0.5:abc"}, True, None),
])
def test_ras_address(env: dict, loaded: bool, want) -> None:
    assert nccl.ras_address(env, loaded) == want


# ------------------------------------------------------------ the loaded NCCL
def test_nccl_library_from_the_recorded_maps_line_and_wheel(tmp_path: Path) -> None:
    rec = json.loads((FIX / "h200-nccl-library.json").read_text())
    path = rec["nccl_maps"][0]
    maps = f"7f00-7f10 r-xp 00000000 00:2a 123 {path}\n7f10-7f20 r--p 00000000 00:2a 9 /usr/lib/libc.so.6\n"
    assert nccl.nccl_libraries(maps) == [path]
    # the same layout under a fake root: site-packages/nvidia/nccl/lib + the wheel's dist-info
    site = tmp_path / path.split("/site-packages/")[0].lstrip("/") / "site-packages"
    (site / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF")
    (site / Path(rec["nccl_dist_info"][0]).name).mkdir()
    assert nccl.nccl_version(path, str(tmp_path)) == ("2.28.9", "pip wheel nvidia_nccl_cu13-2.28.9.dist-info")
    assert "NCCL version 2.28.9" in rec["nccl_strings"][0]  # what the library itself says


def test_nccl_version_of_a_system_library() -> None:
    assert nccl.nccl_version("/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3") == ("2.18.3", "file name")
    assert nccl.nccl_version("/nonexistent/libnccl.so.2") == (None, None)


# ------------------------------------------------------------ Flight Recorder
def test_the_real_watchdog_dump_names_the_collective_that_timed_out() -> None:
    d = nccl.read_fr_dump(str(FIX / "fr-h200-timeout-rank0.pickle"))
    s = d["summary"]
    assert s["comm_lib_version"] == "2.28.9" and s["entries_total"] == 7
    g = s["groups"][0]
    assert g["desc"] == "default_pg" and g["status"]["last_completed_collective"] == 6
    last = g["entries"][-1]
    assert (last["op"], last["collective_seq_id"], last["state"]) == ("nccl:all_reduce", 7, "scheduled")
    assert last["input_sizes"] == [[2048]] and "record_nccl.py" in last["caller"]
    view = Evidence([nf.fr_h200_timeout()]).nccl.fr_ranks[0].groups[0]
    assert view.pending.op == "all_reduce" and view.pending.seq == 7 and not view.timing_on


def test_a_pickle_with_a_global_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "nccl_trace_rank_0"
    bad.write_bytes(pickle.dumps({"entries": [Evil()]}))
    d = nccl.read_fr_dump(str(bad))
    assert "refused global" in d["error"] and "summary" not in d
    assert not marker.exists()


def test_json_dumps_and_garbage(tmp_path: Path) -> None:
    doc = pickle.loads((FIX / "fr-gloo-desync-rank1.pickle").read_bytes())
    js = tmp_path / "nccl_trace_rank_1"
    js.write_text(json.dumps(doc, default=list))
    d = nccl.read_fr_dump(str(js))
    assert d["rank"] == 1 and d["summary"]["groups"][0]["entries"][-1]["op"] == "gloo:barrier"
    junk = tmp_path / "nccl_trace_rank_2"
    junk.write_bytes(os.urandom(300))
    assert "not a Flight Recorder dump" in nccl.read_fr_dump(str(junk))["error"]
    fifo = tmp_path / "nccl_trace_rank_3"
    os.mkfifo(fifo)
    assert nccl.read_fr_dump(str(fifo))["error"] == "not a regular file"  # and it did not block


def test_find_fr_dumps_by_prefix(tmp_path: Path) -> None:
    for name in ("trace_rank_0", "trace_rank_1", "trace_rank_x", "other_0"):
        (tmp_path / name).write_bytes(b"")
    found = nccl.find_fr_dumps([str(tmp_path / "trace_rank_")])
    assert sorted(os.path.basename(p) for p in found) == ["trace_rank_0", "trace_rank_1"]
    prefixes = nccl.fr_prefixes({"TORCH_FR_DUMP_TEMP_FILE": "/x/fr_", "HOME": "/home/u"})
    assert prefixes == ["/x/fr_", "/home/u/.cache/torch/nccl_trace_rank_", "/tmp/nccl_trace_rank_"]


# ------------------------------------------------------------ checks
def test_ras_missing_rank_is_rank_died_naming_it() -> None:
    r = _check("nccl.ras")(Evidence([nf.ras_rank_missing()]))
    assert r.verdict == FIRED
    s = next(s for s in r.signals if s.cause == "rank-died")
    assert s.weight >= 0.6 and "rank 1" in s.text and s.odd[0]["rank"] == 1


def test_ras_frozen_count_skew_is_a_desync_naming_the_rank_behind() -> None:
    r = _check("nccl.ras")(Evidence([nf.ras_counts_skewed_frozen()]))
    s = next(s for s in r.signals if s.cause == "nccl-desync")
    assert s.weight >= 0.6 and [o["rank"] for o in s.odd] == [1]
    assert "AllReduce: rank 0=1204, rank 1=1203" in s.text


def test_ras_counts_that_move_are_progress() -> None:
    r = _check("nccl.ras")(Evidence([nf.ras_counts_moving()]))
    assert r.verdict == CLEARED and r.facts["moving"]
    assert any(s.cause == "nccl-desync" and s.weight < 0 for s in r.signals)


def test_ras_all_present_and_equal_speaks_against_a_dead_rank() -> None:
    r = _check("nccl.ras")(Evidence([nf.ras_all_present_frozen()]))
    assert r.verdict == CLEARED and r.facts["still"]
    assert any(s.cause == "rank-died" and s.weight < 0 for s in r.signals)


def test_ras_single_sample_skew_weighs_little() -> None:
    doc = with_ranks(recorded_status(), [ar := {"AllReduce": 10}, {"AllReduce": 9}])
    s = nf.nccl_snap([nf.ras_sample(doc)])
    r = _check("nccl.ras")(Evidence([s]))
    sig = next(x for x in r.signals if x.cause == "nccl-desync")
    assert sig.weight <= 0.3 and "one sample" in sig.text and ar


def test_fr_ranks_in_different_collectives_is_a_desync_naming_the_odd_rank() -> None:
    r = _check("nccl.flight-recorder")(Evidence([nf.fr_gloo_desync()]))
    s = next(s for s in r.signals if s.cause == "nccl-desync")
    assert s.weight >= 0.7 and [o["rank"] for o in s.odd] == [1]
    assert "rank 0: in all_reduce #2" in s.text and "rank 1: in barrier #2" in s.text


def test_fr_stale_dumps_are_not_evidence() -> None:
    r = _check("nccl.flight-recorder")(Evidence([nf.fr_stale()]))
    assert r.verdict == CLEARED and "earlier run" in r.summary


def test_fr_first_collective_points_at_the_transport() -> None:
    r = _check("nccl.flight-recorder")(Evidence([nf.fr_first_collective()]))
    assert any(s.cause == "nccl-transport" and s.weight > 0.4 for s in r.signals)


def test_analyze_ranks_the_real_dumps() -> None:
    from hangdoctor.triage.analyze import analyze

    a = analyze([nf.fr_gloo_desync()])
    assert a["causes"][0]["id"] == "nccl-desync"
    a = analyze([nf.ras_rank_missing()])
    assert a["causes"][0]["id"] == "rank-died"


# ------------------------------------------------------------ end to end, real processes
def _fake_nccl_lib(tmp_path: Path) -> Path:
    """A real shared library under the name libnccl.so.2.28.9 (a copy of libm: it loads)."""
    import ctypes.util

    libm = ctypes.util.find_library("m")
    src = next(p for p in ("/lib/x86_64-linux-gnu/" + (libm or ""), "/usr/lib/x86_64-linux-gnu/" + (libm or ""),
                           "/lib/aarch64-linux-gnu/" + (libm or ""), "/usr/lib/aarch64-linux-gnu/" + (libm or ""))
               if libm and os.path.exists(p))
    dst = tmp_path / "libnccl.so.2.28.9"
    shutil.copyfile(src, dst)
    return dst


def test_live_probe_queries_ras_and_never_sends_http_to_nccl_sockets(tmp_path: Path, hangdoctor_cli) -> None:
    """A process that mapped NCCL, with RAS on its NCCL_RAS_ADDR (replayed) and an ephemeral
    listener: diagnose reads RAS with the client protocol only, and sends no HTTP to either."""
    lib = _fake_nccl_lib(tmp_path)
    doc = with_ranks(recorded_status(), [{"AllReduce": 7}, {"AllReduce": 7}], missing=[1])
    with RasReplay(docs=[doc]) as ras:
        code = textwrap.dedent(f"""
            import ctypes, socket, time
            ctypes.CDLL({str(lib)!r})
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
            open({str(tmp_path / 'port')!r}, "w").write(str(s.getsockname()[1]))
            s.settimeout(60)
            try:
                c, _ = s.accept()
                open({str(tmp_path / 'touched')!r}, "w").write("yes")
            except OSError:
                pass
        """)
        env = dict(os.environ, NCCL_RAS_ADDR=f"127.0.0.1:{ras.port}")
        p = subprocess.Popen([sys.executable, "-c", code], env=env)
        try:
            for _ in range(100):
                if (tmp_path / "port").exists():
                    break
                time.sleep(0.1)
            out = tmp_path / "snap.json"
            res = hangdoctor_cli("diagnose", "localhost", "--pid", str(p.pid), "--window", "0.5",
                                 "--json", "--save-snapshot", str(out), "-o", str(tmp_path / "r.html"))
            snapshot = json.loads(out.read_text())
        finally:
            p.kill()
            p.wait()
    assert not (tmp_path / "touched").exists(), "an ephemeral socket of an NCCL process got a connection"
    assert set(ras.received) <= set(PROTOCOL) and ras.received.count("STATUS") == 2, ras.received
    sec = snapshot["nccl"]
    assert sec["processes"][0]["libraries"][0]["version"] == "2.28.9"
    assert len(sec["ras"]) == 2 and all(s["ok"] for s in sec["ras"])
    assert not snapshot.get("http"), snapshot.get("http")
    a = json.loads(res.stdout)
    assert a["causes"][0]["id"] == "rank-died", [(c["id"], c["score"]) for c in a["causes"]]
    assert any(m["source"] == "nccl_ras" and m["status"] == "ok" for m in snapshot["manifest"])


@pytest.mark.torch
@pytest.mark.slow
def test_gloo_desync_with_real_flight_recorder_dumps_names_the_odd_rank(tmp_path: Path, hangdoctor_cli, run_scenario) -> None:
    prefix = str(tmp_path / "nccl_trace_rank_")
    info = run_scenario("gloo_desync", fr_dump=prefix)
    res = hangdoctor_cli("diagnose", "localhost", "--pid", str(info.launcher_pid), "--window", "1",
                         "--json", "-o", str(tmp_path / "r.html"))
    a = json.loads(res.stdout)
    fr = next(c for c in a["checks"] if c["id"] == "nccl.flight-recorder")
    assert fr["verdict"] == "fired", fr
    sig = next(s for s in fr["signals"] if s["cause"] == "nccl-desync")
    assert [o["rank"] for o in sig["odd"]] == [1] and "barrier #2" in sig["text"]
    assert a["causes"][0]["id"] == "nccl-desync"


# ------------------------------------------------------------ replayed H200 diagnoses
@pytest.mark.parametrize("name", ["gpu-nccl-spin-fr-timing", "gpu-nccl-spin-fr"])
def test_h200_rank_behind_a_spinning_kernel_is_a_kernel_spin(name: str) -> None:
    """Recorded on an H200: an all_reduce enqueued behind torch.cuda._sleep, watchdog timed out
    and dumped. With TORCH_NCCL_ENABLE_TIMING the dump says it never started; without, the
    one-rank group says no peer can be awaited. RAS answered twice; no HTTP reached NCCL."""
    from snapbuild import load

    from hangdoctor.triage.analyze import analyze

    s = load(name)
    assert not s["http"] and "port 28028 (NCCL RAS)" in next(
        m["detail"] for m in s["manifest"] if m["source"] == "http")
    a = analyze([s])
    assert a["verdict"] == "hung"
    assert a["causes"][0]["id"] == "gpu-kernel-spin", [(c["id"], c["score"]) for c in a["causes"]]
    fr = next(c for c in a["checks"] if c["id"] == "nccl.flight-recorder")
    assert "all_reduce #7" in fr["summary"]


def test_h200_idle_rank_with_ras_is_no_desync() -> None:
    from snapbuild import load

    from hangdoctor.triage.analyze import analyze

    a = analyze([load("gpu-nccl-idle")])
    ras = next(c for c in a["checks"] if c["id"] == "nccl.ras")
    assert ras["verdict"] == "cleared"
    assert not a["causes"] or a["causes"][0]["id"] not in ("nccl-desync", "rank-died")


@pytest.mark.parametrize("bad", [
    "x", {"processes": "x", "ras": [1, {"ok": True, "status": "s"}]},
    {"ras": [{"ok": True, "status": {"communicators": [{"ranks": [{"collective_counts": "c", "status": 3}],
                                                        "missing_ranks": "m"}]}}]},
    {"flight_recorder": [{"summary": {"groups": [{"entries": "e", "status": 1}]}, "rank": "r", "mtime": "t"}]},
])
def test_a_malformed_nccl_section_never_crashes_analysis(bad) -> None:
    from snapbuild import LAUNCHER, snap

    from hangdoctor.triage.analyze import analyze

    s = snap(processes=[LAUNCHER])
    s["nccl"] = bad
    a = analyze([s])
    assert not [c for c in a["checks"] if c["verdict"] == "errored" and c["id"].startswith("nccl")]
