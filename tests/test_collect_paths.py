"""What the collection does to be fast must not change what it collects.

The warm-up (checks, triage, templates) waits until every host's probe runs; asyncssh is
imported without its compiler-driven library search; the CLI entry point leaves without the
interpreter's teardown. Each keeps its behaviour here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time

from hangdoctor.collect.config import ProbeConfig
from hangdoctor.reach import multi


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_all_started_is_set_when_every_probe_runs_or_its_host_failed(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        local = multi.parse_host_spec("localhost")
        refused = multi.parse_host_spec(f"root@127.0.0.1:{_closed_port()}",
                                        known_hosts=str(tmp_path / "known_hosts"))
        started = threading.Event()
        seen_before_results: list[bool] = []

        def config_for(target):
            return ProbeConfig(root_pids=[sleeper.pid], window_s=0.5, deadline_s=10,
                               nvml=False, kernel_log=False)

        async def main():
            task = asyncio.ensure_future(multi.collect_all([local, refused], config_for, 20, started))
            while not task.done():
                if started.is_set():
                    seen_before_results.append(True)
                    break
                await asyncio.sleep(0.01)
            return await task

        results = asyncio.run(main())
    finally:
        sleeper.kill()
        sleeper.wait()
    assert started.is_set()
    assert seen_before_results, "set while the local probe was still sampling its window"
    assert results[0].snapshot is not None and results[0].error is None
    assert results[1].snapshot is None and "refused" in results[1].error


def test_all_started_is_set_with_no_host_to_collect_from():
    started = threading.Event()
    asyncio.run(multi.collect_all([], lambda t: ProbeConfig(), 5, started))
    assert started.is_set()


def test_asyncssh_library_lookups_use_the_ldconfig_cache_only(monkeypatch):
    import ctypes.util

    from hangdoctor.reach import asyncssh_import

    def searched(name):
        raise AssertionError(f"gcc/ld search ran for {name}")

    monkeypatch.setattr(ctypes.util, "_findLib_gcc", searched, raising=False)
    monkeypatch.setattr(ctypes.util, "_findLib_ld", searched, raising=False)
    original = ctypes.util.find_library
    real_run = subprocess.run
    ldconfig_runs = []

    def counting_run(argv, *args, **kwargs):
        if argv and str(argv[0]).endswith("ldconfig"):
            ldconfig_runs.append(argv)
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    with asyncssh_import._ldconfig_only():
        assert ctypes.util.find_library is not original
        for name in ("c", "m", "pthread", "ssl", "nettle", "oqs", "hangdoctor-no-such-library"):
            assert ctypes.util.find_library(name) == ctypes.util._findSoname_ldconfig(name), name
        assert ctypes.util.find_library("c") is not None
        assert ctypes.util.find_library("hangdoctor-no-such-library") is None
    assert len(ldconfig_runs) == 1, ldconfig_runs  # one listing answers every name
    assert ctypes.util.find_library is original
    mod = asyncssh_import.import_asyncssh()
    assert mod.__name__ == "asyncssh" and hasattr(mod, "connect")
    assert ctypes.util.find_library is original


def test_asyncssh_x509_support_is_what_a_plain_import_gives_without_the_wasted_import():
    """asyncssh's X.509 support needs pyOpenSSL; without it asyncssh ends up without X.509
    either way, and import_asyncssh skips the ~25 ms cryptography.x509 import on the way."""
    probe = (
        "import sys, importlib.util; {imp}; import asyncssh.public_key as pk; "
        "print(pk._x509_available, 'cryptography.x509' in sys.modules, "
        "importlib.util.find_spec('OpenSSL') is not None, "
        "'asyncssh.crypto.x509' in sys.modules and sys.modules['asyncssh.crypto.x509'] is None)"
    )
    out = {}
    for how, imp in (("plain", "import asyncssh"),
                     ("ours", "from hangdoctor.reach.asyncssh_import import import_asyncssh; "
                              "import_asyncssh()")):
        proc = subprocess.run([sys.executable, "-c", probe.format(imp=imp)], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[how] = proc.stdout.split()
    available, imported, pyopenssl, left_blocked = out["ours"]
    assert available == out["plain"][0]  # the same X.509 support either way
    assert left_blocked == "False"  # the module name is not left poisoned
    if pyopenssl == "False":
        assert imported == "False" and out["plain"][1] == "True"


def test_the_entry_point_keeps_exit_codes_and_output_through_a_closed_pipe():
    """`run()` ends with os._exit: the exit status, stdout and stderr must still arrive."""
    ok = subprocess.run([sys.executable, "-m", "hangdoctor", "--version"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "hangdoctor" in ok.stdout
    usage = subprocess.run([sys.executable, "-m", "hangdoctor", "diagnose"],
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "no host given" in usage.stderr
    # a reader that leaves early: no "Exception ignored" noise, no traceback
    piped = subprocess.run(f"{sys.executable} -m hangdoctor checks | head -c 10", shell=True,
                           capture_output=True, text=True, timeout=60)
    assert len(piped.stdout) == 10
    assert "Traceback" not in piped.stderr and "Exception ignored" not in piped.stderr


def test_a_process_held_by_our_own_dump_is_not_reported_stopped():
    """py-spy holds a process in tracing stop (`t`) while it dumps it; the second round can
    still run when the window ends. That `t` is the probe's own doing, not a debugger; a real
    SIGSTOP (`T`) or a process already traced at the start still shows."""
    from hangdoctor.collect.processes import _untraced

    assert _untraced("t", "S") == "S"
    assert _untraced("t", "D") == "D"
    assert _untraced("t", "t") == "t"  # traced before we came: someone else's debugger
    assert _untraced("T", "S") == "T"  # SIGSTOP during the window
    assert _untraced("S", "R") == "S"


def test_the_analysis_warm_up_runs_at_the_lowest_cpu_priority(monkeypatch):
    """Loading checks and triage while the probe samples must not take CPU from the server or
    from py-spy on the diagnosed host: that thread runs at nice 19."""
    import os

    from hangdoctor.cli import diagnosis

    calls = []
    real = os.setpriority

    def record(which, who, prio):
        calls.append((which, who, prio, threading.get_native_id()))
        return real(which, who, prio)

    monkeypatch.setattr(os, "setpriority", record)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        analysis, _, _ = diagnosis._run_diagnosis(("localhost",), {
            "pids": [str(sleeper.pid)], "window": 0.0, "deadline": 20.0, "no_gpu": True,
            "as_json": True})
    finally:
        sleeper.kill()
        sleeper.wait()
    assert analysis["verdict"] in ("hung", "inconclusive", "healthy", "progressing")
    which, who, prio, tid = calls[0]
    assert which == os.PRIO_PROCESS and prio == 19
    assert who == tid and tid != threading.main_thread().native_id  # that thread only
    # once the evidence is in, the warm-up is on the critical path: back to normal priority
    # (issue 15: at nice 19 on a busy host the run waited 20 s past its deadline for it)
    assert [(w, p) for _which, w, p, _tid in calls[1:]] == [(who, 0)], calls


_TREE_SCRIPT = r"""
import subprocess, sys, threading, time
kids = []
def spawn():  # a child started by a second thread is listed under that thread
    kids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
t = threading.Thread(target=spawn); t.start(); t.join()
inner = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
kids.append(subprocess.Popen([sys.executable, "-c", inner]))
print("ready", flush=True)
time.sleep(60)
"""


def test_the_process_tree_from_children_files_is_the_tree_from_a_whole_proc_scan(tmp_path):
    """The probe reads a tree through /proc/PID/task/TID/children (a few reads per process of
    the tree) instead of every process's stat on the host; it must find the same processes in
    the same order, a grandchild and a child started from a second thread included."""
    from hangdoctor.collect import procfs

    root = subprocess.Popen([sys.executable, "-c", _TREE_SCRIPT], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert root.stdout.readline().strip() == "ready"
        expected = procfs.descendants(root.pid, procfs.children_map())
        for _ in range(50):  # the grandchild may still be starting
            if len(expected) == 4:
                break
            time.sleep(0.1)
            expected = procfs.descendants(root.pid, procfs.children_map())
        assert len(expected) == 4, expected  # root, two children, one grandchild
        assert procfs.process_tree(root.pid) == expected
        assert procfs.children(expected[-1]) == []
    finally:
        os.killpg(root.pid, 9)
        root.wait()
    assert procfs.children(root.pid) == []  # gone: no children, and no error


def test_a_proc_tree_without_children_files_falls_back_to_the_whole_scan(tmp_path):
    """A kernel without CONFIG_PROC_CHILDREN (or a copied proc tree): process_tree says it
    cannot answer, and the probe then scans every process as before."""
    from hangdoctor.collect import procfs
    from hangdoctor.collect.config import ProbeConfig
    from hangdoctor.collect.probe import collect

    proc = tmp_path / "proc"
    for pid, ppid in ((4242, 1), (4243, 4242)):
        (proc / str(pid) / "task" / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(
            f"{pid} (python3) S {ppid} {pid} {pid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 100 "
            "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    assert procfs.process_tree(4242, str(proc)) is None
    assert procfs.descendants(4242, procfs.children_map(str(proc))) == [4242, 4243]
    snap = collect(ProbeConfig(root_pids=[4242], window_s=0, deadline_s=5, nvml=False,
                               kernel_log=False, proc_root=str(proc)))
    assert [p["pid"] for p in snap["processes"]] == [4242, 4243]


def test_discovery_skips_kernel_threads_named_by_kthreadd_and_only_those(tmp_path):
    """Discovery (no --pid) reads every process's cmdline and environ; kernel threads, most of
    a GPU node's processes, come from kthreadd's children file and are skipped."""
    import pytest

    from hangdoctor.collect import processes, procfs

    st = procfs.stat(2)
    if not st or st["comm"] != "kthreadd":
        pytest.skip("no kthreadd in this pid namespace")
    kthreads = processes.kernel_threads()
    assert 2 in kthreads and len(kthreads) > 1
    for pid in kthreads - {2}:
        s = procfs.stat(pid)
        if s is not None:  # (may have ended)
            assert s["ppid"] == 2 and not procfs.cmdline(pid), pid
    assert os.getpid() not in kthreads
    # where pid 2 is an ordinary process (a container's pid namespace), nothing is skipped
    proc = tmp_path / "proc"
    (proc / "2" / "task" / "2").mkdir(parents=True)
    (proc / "2" / "task" / "2" / "children").write_text("7 8 ")
    (proc / "2" / "stat").write_text(
        "2 (bash) S 1 2 2 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 100 "
        "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
    assert processes.kernel_threads(str(proc)) == set()
    assert procfs.children(2, str(proc)) == [7, 8]
