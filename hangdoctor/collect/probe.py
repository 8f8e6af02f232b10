"""The probe: one bounded pass over one host, returning a snapshot (SCHEMA.md).

Runs on the target host: in-process for ``localhost``, or shipped as source over SSH and run
with the remote Python (3.8+, stdlib only; psutil and pynvml are used when present). Every
source has its own timeout and a manifest entry; the whole probe has a deadline; what was
collected by then is returned. It reads and never signals or changes a target process.

Timeline, so that everything overlaps the sampling window::

    t0  walk the tree, read /proc (sample A); start threads: NVML sampler, py-spy dumps,
        HTTP probes, kernel log
    t0 + window   read /proc again (sample B: CPU deltas, states, log growth, swap)
                  second py-spy dump of each process (stacks that moved)

This module holds that flow (``collect``) and the entry point of the shipped probe
(``main_json``); its pieces live beside it: manifest.py, tasks.py (threads), late_site.py
(site-packages under ``python3 -S``), probe_log.py (the log over the window), probe_redact.py
(redaction of the snapshot), and one module per source.

Layer: collect; may import: the standard library and hangdoctor.collect (it ships in the probe).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from hangdoctor import redact
from hangdoctor.collect import (
    container,
    container_runtime,
    engine_sources,
    late_site,
    locks,
    probe_log,
    probe_redact,
    procfs,
    ptrace_denial,
    pyspy,
    sources,
    target_fs,
    window_samples,
)
from hangdoctor.collect.config import ProbeConfig
from hangdoctor.collect.manifest import Manifest
from hangdoctor.collect.processes import ProcReader, discover
from hangdoctor.collect.tasks import Pool, join

# Annotations only (PEP 563): typing is not imported at run time, which saves the probe
# ~5 ms on a remote host's bare interpreter (python3 -S).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

SCHEMA_VERSION = 1
TOOL_VERSION = "0.1.0"

def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _round_lead(futures: Dict[str, Any], targets: List[ProcReader], window_s: float) -> float:
    """How long before the window's end to start the second round of dumps."""
    durs = []
    for key, fut in futures.items():
        if key.startswith("dumpA:") and fut.done():
            try:
                res = fut.result()
            except Exception:
                continue
            if isinstance(res, dict) and res.get("duration_s"):
                durs.append(float(res["duration_s"]))
    one = sorted(durs)[len(durs) // 2] if durs else 0.03
    lanes = max(1, min(os.cpu_count() or 1, 16))
    return min(window_s * 0.5, one * len(targets) / lanes)


# ---------------------------------------------------------------- the probe


def collect(cfg: ProbeConfig) -> Dict[str, Any]:
    t_start = time.monotonic()
    hard_deadline = t_start + max(1.0, cfg.deadline_s)
    window_s = max(0.0, min(cfg.window_s, cfg.deadline_s * 0.6))
    man = Manifest()
    proc = cfg.proc_root
    snap = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "hangdoctor", "version": TOOL_VERSION},
        "origin": "live",
        "redacted": bool(cfg.redact),
        "collected_at": _now_iso(),
        "window_s": window_s,
        "notes": [],
    }  # type: Dict[str, Any]
    snap["host"] = _host_info(cfg)
    snap["host"].update(container.self_facts(proc))

    # targets
    t0 = time.monotonic()
    own = [os.getpid(), os.getppid()]
    roots = list(cfg.root_pids)
    discovered = not roots
    discovery = []  # type: List[Dict[str, Any]]
    by_port = locks.listeners(cfg.ports, proc, own) if discovered and cfg.ports else {}
    if discovered:
        discovery = discover(proc, own)
        if not discovery and snap["host"].get("in_container") and 1 not in own and procfs.stat(1, proc):
            # in a container (docker:NAME, k8s:) with no known server: its main process is
            # the obvious target, and its tree is what the user asked about
            discovery = [{"pid": 1, "kind": "the container's main process",
                          "cmdline": " ".join(procfs.cmdline(1, proc) or [])[:300]}]
        roots = [d["pid"] for d in discovery]
        man.add("discovery", "ok", time.monotonic() - t0,
                "%d inference-server process tree(s) found" % len(roots) if roots
                else "no inference-server processes found on this host")
    if by_port:
        # --port without --pid: the process listening on it (under its server root) is the
        # target; other servers on the host are not mixed in
        chosen = []  # type: List[Dict[str, Any]]
        for port in cfg.ports:
            for pid in by_port.get(port, []):
                root = locks.server_root(pid, roots, proc)
                if root not in [c["pid"] for c in chosen]:
                    chosen.append({"pid": root, "kind": "listens on port %d" % port,
                                   "cmdline": redact.cut_line(" ".join(redact.redact_argv(
                                       procfs.cmdline(root, proc) or [])), 300)})
        discovery, roots = chosen, [c["pid"] for c in chosen]
        man.add("discovery", "ok", 0.0, "the process(es) listening on port(s) %s" % ", ".join(
            str(p) for p in cfg.ports if p in by_port))
    unheard = []  # type: List[int]
    if discovered and cfg.ports and not by_port:
        # --port names the server: the others found by their command lines are not what was
        # asked for (a script whose path says "vllm" is not a server), so none is diagnosed
        # and the command line refuses the port
        heard = set(info.get("port") for info in procfs.listening_sockets(proc).values())
        unheard = [p for p in cfg.ports if p not in heard]
        discovery, roots = [], []
        snap["notes"].append("nothing listens on port %s here" % ", ".join(str(p) for p in unheard)
                             if unheard else "port %s: the listening process is not visible to "
                             "this user" % ", ".join(str(p) for p in cfg.ports))
    snap["targets"] = {"root_pids": roots, "discovered": discovered, "discovery": discovery}
    # a thread id given as --pid answers under /proc as if it were a process: say whose thread
    threads_given = {}  # type: Dict[str, int]
    for pid in cfg.root_pids:
        tgid = procfs.status_fields(pid, proc).get("Tgid", "")
        if tgid.isdigit() and int(tgid) != pid:
            threads_given[str(pid)] = int(tgid)
    if threads_given:
        snap["targets"]["threads_given"] = threads_given
    if discovered and cfg.ports and not by_port:
        snap["targets"]["ports_unmatched"] = {"ports": list(cfg.ports), "not_listening": unheard}

    # process tree + sample A
    t0 = time.monotonic()
    kids = None  # ppid -> pids of the whole host, read only if the children files fail us
    pool = Pool(max(4, min(cfg.max_dump_concurrency, 32)))
    # The kernel walks its whole socket table for /proc/net/tcp (milliseconds, more on a busy
    # server): read it off the main thread, while the processes are read and the dumps start.
    listening = pool.submit(procfs.listening_sockets, proc)
    boot_s = snap["host"].get("boot_time") or 0.0
    readers = []  # type: List[ProcReader]
    seen = set()
    for root in roots:
        if procfs.stat(root, proc) is None:
            readers.append(ProcReader(root, root, cfg, boot_s))
            seen.add(root)
            continue
        tree = procfs.process_tree(root, proc)
        if tree is None:
            if kids is None:
                kids = procfs.children_map(proc)
            tree = procfs.descendants(root, kids)
        for pid in tree:
            if pid in seen or pid in own:
                continue
            seen.add(pid)
            readers.append(ProcReader(pid, root, cfg, boot_s))
    # Each process's first dump starts as soon as that process is read (py-spy pauses it, so
    # it is not read again until the window ends).
    futures = {}  # type: Dict[str, Any]
    pyspy_bin = pyspy.find_pyspy(cfg.pyspy_path)
    dump_timeout = max(1.0, min(10.0, (hard_deadline - time.monotonic()) * 0.4))
    # /proc/locks before any dump: py-spy's attach interrupts a blocking flock() (locks.py)
    locks_text = procfs.read_text("%s/locks" % proc, 1 << 22)
    for r in readers:
        try:
            r.start()
        except Exception as exc:  # a process that changed mid-read must not stop the probe
            r.record.update({"alive": False, "exit_info": "unreadable: %s" % exc})
        if pyspy_bin and r.record.get("is_python") and r.record.get("alive"):
            futures["dumpA:%d" % r.pid] = pool.submit(
                pyspy.dump_with_retry, pyspy_bin, r.pid, dump_timeout, str(r.record.get("status")),
                native=cfg.native, with_locals=cfg.locals, sudo=cfg.sudo)
    mem_a, vm_a = procfs.meminfo(proc), procfs.vmstat(proc)
    # file locks the tree holds or waits on (and who holds them), FIFOs it reads: locks.py
    t_locks = time.monotonic()
    try:
        snap["file_locks"] = locks.collect([r.record for r in readers], proc, locks_text)
        man.add("file_locks", snap["file_locks"]["status"], time.monotonic() - t_locks,
                "%d /proc/locks line(s) involve the tree" % len(snap["file_locks"]["locks"]))
    except Exception as exc:  # one source must not stop the probe
        man.add("file_locks", "failed", time.monotonic() - t_locks, str(exc))
    containers = container.Containers([r.record for r in readers], proc, host=snap["host"])
    denied_env = [r.pid for r in readers if r.record.get("env_status") == "denied"]
    # the backend is named after the window: psutil's presence needs site-packages
    man.add("processes", "ok" if readers or not roots else "failed", time.monotonic() - t0,
            "%d processes in %d tree(s)" % (len(readers), len(roots)))
    if denied_env:
        man.add("environ", "denied", 0.0,
                "/proc/PID/environ unreadable for %d process(es): %s" % (
                    len(denied_env), ", ".join(map(str, denied_env[:8]))),
                # the same access check as ptrace's: the same reason, the same fix
                ptrace_denial.explain_denial(
                    next((r.record.get("uid") for r in readers if r.pid == denied_env[0]), None),
                    snap["host"], {})[2])

    # log file: --log, or the root's stdout/stderr when that is a regular file. Read by a
    # disposable child (sources.LogRead): the log may sit on a hung network file system.
    log_given = bool(cfg.log_path)
    log_paths = [cfg.log_path] if cfg.log_path else []
    for r in readers:
        for cand in r.record.pop("_log_candidates", []):
            # every process of the tree that holds the file: one may exit during the window
            if not log_given and cand["open"] not in [c["open"] for c in log_paths]:
                log_paths.append(cand)
    if log_paths and not log_given and roots:
        # last, the names themselves, read with the server's own rights (target_fs): what is
        # left when every holder has exited (a server that shut down after its engine died)
        for name in dict.fromkeys(c["name"] for c in log_paths):
            log_paths.append(sources.log_entry(name))
    log_format = None
    if not log_paths:  # a container's stdout is a pipe: its runtime keeps the log
        runtime_path, log_format = containers.runtime_log(roots)
        if runtime_path:
            log_paths = [runtime_path]
    # --log names a path the server's user may own: read with that user's rights (target_fs)
    log_ids = target_fs.ids_of(roots[0], proc) if roots else None
    log_a: Optional[sources.LogRead] = None
    log_end: Optional[sources.LogRead] = None
    if not log_paths:
        man.add("log", "not-given", 0.0, "no server log given and none found on the server's stdout",
                "pass --log FILE")
    elif window_s > 0:
        log_a = sources.LogRead(log_paths[:16], log_given, tail=False, as_ids=log_ids)
    else:
        # --window 0: one reading, started now so that its child overlaps the dumps
        log_end = sources.LogRead(log_paths[:16], log_given, tail=True, as_ids=log_ids)

    # background sources, all overlapping the window
    py_targets = [r for r in readers if r.record.get("is_python") and r.record.get("alive")]
    if pyspy_bin is None and py_targets:
        man.add("stacks", "unavailable", 0.0, "py-spy not found on this host",
                "pip install py-spy (or let hangdoctor upload it over SSH)")
    # NCCL: the library each process mapped, RAS at both edges of the window, FR dumps
    nccl_c = None
    if py_targets:
        from hangdoctor.collect import nccl_sources as nccl_mod

        nccl_c = nccl_mod.NcclCollector([r.pid for r in py_targets], proc, cfg.nccl_ras, cfg.fr_dump,
                                        max(0.5, min(2.0, (hard_deadline - time.monotonic()) * 0.2)))
        futures["ncclA"] = pool.submit(nccl_c.start)
    # after the first dumps are on their way: site.main() then overlaps their wait
    site_thread = late_site.start_site(cfg)
    try:
        listen_map = listening.result(timeout=max(0.0, min(5.0, hard_deadline - time.monotonic())))
    except Exception as exc:
        listen_map = {}
        snap["notes"].append("listening sockets not read: %s" % (exc,))
    for r in readers:
        r.attach_listen(listen_map)
    ports, skipped_ports = sources.ports_to_probe(readers, cfg.ports)
    http_timeout = max(1.0, min(5.0, window_s if window_s > 0 else 2.0))
    # engine progress (requests in flight, /metrics): the first sample, before our own probes
    progress = engine_sources.start(cfg, ports, pool, http_timeout, window_s)
    for port, ip in sorted(ports.items())[:16]:
        futures["http:%d" % port] = pool.submit(sources.http_probe, port, ip, http_timeout)
    if cfg.kernel_log:
        futures["kernel"] = pool.submit(sources.kernel_log, 3.0)
    gpu = {}  # type: Dict[str, Any]
    sampler_thread = None
    if cfg.nvml:
        # --window 0: one sample at each edge, right away
        gpu_window_s = max(window_s, 0.5) if window_s > 0 else 0.0

        def sample_gpus() -> None:
            # The adapter is imported here, off the main thread: on a host without GPUs its
            # import is most of its cost, and it overlaps the first dumps this way.
            try:
                from hangdoctor.collect import nvml as nvml_mod
                gpu["sampler"] = nvml_mod.GpuSampler(
                    window_s=gpu_window_s,
                    before_pynvml=lambda: join(site_thread, hard_deadline - 2.0))
            except Exception as exc:
                gpu["error"] = "NVML sampler could not start: %s" % exc
                return
            gpu["sampler"].run()

        sampler_thread = threading.Thread(target=sample_gpus, name="hd-nvml", daemon=True)
        sampler_thread.start()

    # the window. The second round of dumps is timed to end with the window rather than start
    # after it: with many workers a round costs n x (one dump's CPU) / cores.
    window_end = t_start + window_s
    # samples in between (window_samples.py): stacks and /proc counters at points inside
    window_samples.edges(readers, cfg, t_start, at_end=False)
    last_round = min(window_end - _round_lead(futures, py_targets, window_s), hard_deadline)
    points = window_samples.take(cfg, pool, pyspy_bin, readers, py_targets, futures, t_start,
                                 window_s, last_round, dump_timeout)
    if pyspy_bin and py_targets and window_s > 0:
        time.sleep(max(0.0, min(window_end - _round_lead(futures, py_targets, window_s) - time.monotonic(),
                                hard_deadline - time.monotonic())))
        for r in py_targets:
            st_now = procfs.stat(r.pid, cfg.proc_root)
            if st_now is None or st_now["state"] in ("Z", "X") or not r.same_process(st_now):
                continue  # gone during the window (or its pid reused): finish() records it
            futures["dumpB:%d" % r.pid] = pool.submit(
                pyspy.dump_with_retry, pyspy_bin, r.pid, dump_timeout, str(st_now["state"]),
                native=False, with_locals=False, sudo=cfg.sudo)
    # the second engine-progress sample overlaps the second round of dumps: its GET /metrics
    # then costs the window nothing
    engine_sources.window_end(progress, pool)
    time.sleep(max(0.0, min(window_end - time.monotonic(), hard_deadline - time.monotonic())))
    t_window_end = time.monotonic()
    # --window 0: one sample, nothing compared over time (window_s 0, no deltas), as a person
    # running `ps` and `py-spy dump` once would see it
    actual_window = max(0.001, t_window_end - t_start) if window_s > 0 else 0.0
    snap["window_s"] = round(actual_window, 3)
    for r in readers:
        try:
            r.finish(actual_window)
        except Exception as exc:
            r.record.setdefault("exit_info", "unreadable at window end: %s" % exc)
    window_samples.edges(readers, cfg, t_start, at_end=True)
    mem_b, vm_b = procfs.meminfo(proc), procfs.vmstat(proc)
    if log_paths:
        probe_log.read_log(snap, log_a, log_paths[:16], log_given, man, hard_deadline, log_end,
                           log_ids, ["%s/%d/fd/" % (proc, r.pid) for r in readers
                                     if r.record.get("pid_reused")])
    if log_format and "log" in snap:
        snap["log"]["tail"] = container_runtime.decode_log_lines(snap["log"]["tail"], log_format)
        snap["log"]["format"] = log_format
    if nccl_c is not None:
        futures["ncclB"] = pool.submit(_nccl_finish, futures["ncclA"], nccl_c, hard_deadline)

    # gather, within the deadline
    results = {}  # type: Dict[str, Any]
    for key, fut in futures.items():
        remaining = hard_deadline - time.monotonic()
        try:
            results[key] = fut.result(timeout=max(0.0, remaining))
        except Exception as exc:  # timeout or crash of one source
            results[key] = exc

    # stacks
    stacks = {}  # type: Dict[str, Any]
    ok_dumps, failed = 0, []
    for r in (py_targets if pyspy_bin else []):
        a = results.get("dumpA:%d" % r.pid)
        b = results.get("dumpB:%d" % r.pid)
        if not isinstance(a, dict):
            a = {"status": "timeout", "error": "py-spy dump not finished by the deadline"}
        if isinstance(b, dict) and not r.record.get("pid_reused"):
            a = pyspy.merge_samples(a, b, round(t_window_end - t_start, 3))
        stacks[str(r.pid)] = a
    for point in points:  # a reused pid's dumps in between are the newcomer's
        for r in readers:
            if r.record.get("pid_reused"):
                point["dumps"].pop(str(r.pid), None)
    window_samples.merge(stacks, results, points, round(t_window_end - t_start, 3))
    for r in (py_targets if pyspy_bin else []):
        a = stacks[str(r.pid)]
        if a.get("status") == "ok":
            ok_dumps += 1
        else:
            failed.append((r.pid, a.get("status"), a.get("error"), a.get("remedy")))
    # py-spy from the host names a container's threads by their ids in its pid namespace
    container.map_namespaced_threads(stacks, [r.record for r in readers], proc)
    if pyspy_bin and py_targets:
        worst = None
        for i, (pid, status, err, remedy) in enumerate(failed):
            if status == "denied":
                err, remedy = _explain_denial(stacks[str(pid)], readers, pid, snap["host"],
                                              containers)
                failed[i] = (pid, status, err, remedy)
            man.add("stacks:%d" % pid, str(status), 0.0, err, remedy)
            if status == "denied":
                worst = remedy
        fail_states = {st for _, st, _, _ in failed}
        status = "ok" if not failed else ("partial" if ok_dumps else
                                          ("denied" if worst else
                                           ("timeout" if fail_states == {"timeout"} else "failed")))
        durs = [float(v.get("duration_s") or 0) for v in stacks.values()]
        first_denied = next((err for _, st, err, _ in failed if st == "denied"), None)
        man.add("stacks", status, max(durs) if durs else 0.0,
                "%d of %d Python processes dumped with %s%s" % (
                    ok_dumps, len(py_targets), pyspy_bin,
                    "; " + first_denied if first_denied else ""),
                worst)
    snap["stacks"] = stacks

    # http
    http = []
    for port in sorted(ports):
        res = results.get("http:%d" % port)
        if isinstance(res, dict):
            http.append(res)
        else:
            http.append({"port": port, "ok": False, "error": "probe did not finish by the deadline"})
    skipped_note = ("; not probed (never send HTTP to these): %s" % "; ".join(skipped_ports)
                    if skipped_ports else "")
    if ports:
        man.add("http", "ok", 0.0, "%d port(s) probed, %d answered%s" % (
            len(http), sum(1 for h in http if h.get("ok")), skipped_note))
    else:
        man.add("http", "ok", 0.0, "no API port in the process tree%s" % skipped_note)
    snap["http"] = http

    if nccl_c is not None:
        _nccl_record(snap, man, results.get("ncclB"), cfg)
    engine_sources.finish(progress, snap, man, hard_deadline)

    # kernel log
    if cfg.kernel_log:
        res = results.get("kernel")
        if isinstance(res, tuple):
            lines, status, detail, remedy = res
            man.add("kernel_log", status, 0.0, detail, remedy)
            if lines is not None:
                snap["kernel_log"] = {"lines": lines}
        else:
            man.add("kernel_log", "timeout", 0.0, "dmesg did not finish by the deadline")

    # /proc is read directly (it is faster); psutil's presence is only recorded, not imported
    join(site_thread, hard_deadline - 0.5)
    for entry in man.entries:
        if entry["source"] == "processes":
            entry["detail"] += "; backend %s" % (
                "proc (psutil present)" if late_site.has_module("psutil") else "proc")

    # GPUs
    if sampler_thread is not None:
        sampler_thread.join(timeout=max(0.0, min(2.0, hard_deadline - time.monotonic())))
        sampler = gpu.get("sampler")
        if sampler is not None:
            try:
                gpus, entry = sampler.result()
            except Exception as exc:
                gpus, entry = None, {"source": "nvml", "status": "failed", "detail": str(exc)}
        elif "error" in gpu:
            gpus, entry = None, {"source": "nvml", "status": "failed", "detail": gpu["error"]}
        else:
            gpus, entry = None, {"source": "nvml", "status": "timeout",
                                 "detail": "the NVML adapter had not started by the deadline"}
        if gpus is not None:
            snap["gpus"] = gpus
        man.add(entry.get("source", "nvml"), entry.get("status", "failed"),
                float(entry.get("duration_s") or 0.0), entry.get("detail"), entry.get("remedy"))
    elif not cfg.nvml:
        man.add("nvml", "unavailable", 0.0, "disabled (--no-gpu)")

    # host memory, swap, /dev/shm
    snap["host_memory"] = {
        "mem_total_bytes": mem_a.get("MemTotal"),
        "mem_available_bytes": mem_b.get("MemAvailable", mem_a.get("MemAvailable")),
        "swap_total_bytes": mem_b.get("SwapTotal"),
        "swap_free_bytes": mem_b.get("SwapFree"),
        "swap_in_pages_delta": vm_b.get("pswpin", 0) - vm_a.get("pswpin", 0),
        "swap_out_pages_delta": vm_b.get("pswpout", 0) - vm_a.get("pswpout", 0),
        "oom_kill_delta": vm_b.get("oom_kill", 0) - vm_a.get("oom_kill", 0),
        "oom_kill_total": vm_b.get("oom_kill"),
    }
    man.add("host_memory", "ok" if mem_a else "unavailable", 0.0)
    try:
        st = os.statvfs(cfg.shm_path)
        total = st.f_blocks * st.f_frsize
        free = st.f_bavail * st.f_frsize
        snap["shm"] = {"path": cfg.shm_path, "total_bytes": total, "free_bytes": free,
                       "used_bytes": total - st.f_bfree * st.f_frsize}
        man.add("shm", "ok", 0.0)
    except OSError as exc:
        man.add("shm", "unavailable", 0.0, "%s: %s" % (cfg.shm_path, exc))

    found = containers.finish()
    if found:
        snap["containers"] = found
        # The server's /dev/shm is its container's, not the host's the probe sees
        server_shm = container.servers_shm(found, roots)
        if server_shm is not None:
            if "shm" in snap:
                snap["host_shm"] = snap["shm"]
            snap["shm"] = server_shm
    snap["processes"] = [r.record for r in readers]
    snap["manifest"] = man.entries
    if cfg.redact:
        # inside the deadline and timed: every pattern is linear and every line capped, so
        # this is milliseconds even for a tail of 200 KB lines
        t0 = time.monotonic()
        probe_redact.redact_snapshot(snap)
        man.add("redaction", "ok", time.monotonic() - t0)
    snap["probe_duration_s"] = round(time.monotonic() - t_start, 3)
    return snap


def _nccl_finish(start: Any, collector: Any, hard_deadline: float) -> Dict[str, Any]:
    start.result(timeout=max(0.0, hard_deadline - time.monotonic() - 0.5))
    return collector.finish()


def _nccl_record(snap: Dict[str, Any], man: Manifest, res: Any, cfg: ProbeConfig) -> None:
    """The NCCL section of the snapshot and its manifest entries."""
    if not isinstance(res, dict):
        man.add("nccl", "timeout", 0.0, "NCCL facts not read by the deadline: %s" % (res,))
        return
    if not res.get("processes"):
        return  # no diagnosed process loaded NCCL or set Flight Recorder variables
    snap["nccl"] = res
    libs = sorted({"%s (%s)" % (lib.get("version") or "version unknown", lib.get("path"))
                   for p in res["processes"] for lib in p.get("libraries", [])})
    man.add("nccl", "ok", 0.0, "NCCL loaded: %s" % "; ".join(libs) if libs else "NCCL not loaded")
    samples = res.get("ras") or []
    if not cfg.nccl_ras:
        man.add("nccl_ras", "unavailable", 0.0, "not queried (--no-nccl-ras)")
    elif samples:
        ok = [s for s in samples if s.get("ok")]
        errs = sorted({str(s.get("error")) for s in samples if not s.get("ok")})
        man.add("nccl_ras", "ok" if ok else "failed", max(float(s.get("duration_s") or 0) for s in samples),
                "%d of %d RAS queries answered (%s)%s" % (
                    len(ok), len(samples), ", ".join(sorted({str(s.get("addr")) for s in samples})),
                    "; " + "; ".join(errs) if errs else ""),
                None if ok else "NCCL >= 2.24 answers on NCCL_RAS_ADDR (default localhost:28028) unless NCCL_RAS_ENABLE=0")
    elif libs:
        why = ("RAS disabled in the job (NCCL_RAS_ENABLE=0)"
               if any(p.get("ras_disabled") for p in res["processes"]) else "no RAS address")
        man.add("nccl_ras", "unavailable", 0.0, why)
    dumps = res.get("flight_recorder") or []
    if dumps:
        good = [d for d in dumps if d.get("summary")]
        man.add("flight_recorder", "ok" if good else "failed", 0.0,
                "%d Flight Recorder dump(s) found, %d read" % (len(dumps), len(good)))
    for req in res.get("fr_requests") or []:
        snap["notes"].append("--fr-dump: asked pid %s to dump its Flight Recorder through %s: %s" % (
            req.get("pid"), req.get("pipe") or "its pipe", "sent" if req.get("ok") else req.get("error")))


def _explain_denial(entry: Dict[str, Any], readers: List[ProcReader], pid: int,
                    host: Dict[str, Any], containers: container.Containers) -> Any:
    """Say exactly why ptrace of ``pid`` was refused and the runtime's fix (in the entry too)."""
    rec = next((r.record for r in readers if r.pid == pid), {})
    names = {"host_pid": (rec.get("ns_pids") or [None])[0]}
    for c in containers.by_id.values():
        if pid in c["pids"]:
            names.update(container=c.get("name"), pod=c.get("pod"), namespace=c.get("namespace"))
            names["host_pid"] = names["host_pid"] or c.get("init_host_pid")
    reason, why, fix = ptrace_denial.explain_denial(rec.get("uid"), host, names)
    entry["denied_reason"] = reason
    entry["error"] = "%s: %s" % (why, entry.get("error") or "permission denied")
    entry["remedy"] = fix
    return entry["error"], fix



def _host_info(cfg: ProbeConfig) -> Dict[str, Any]:
    ptrace_scope = procfs.read_text("/proc/sys/kernel/yama/ptrace_scope", 16)
    cap_eff = procfs.status_fields(os.getpid()).get("CapEff")
    has_ptrace = None
    if cap_eff:
        try:
            has_ptrace = bool(int(cap_eff, 16) & (1 << 19))
        except ValueError:
            pass
    uts = os.uname()
    return {
        "name": cfg.host_name,
        "hostname": uts.nodename,
        "kernel": uts.release,
        "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
        "cpu_count": os.cpu_count(),
        "arch": uts.machine,
        "boot_time": procfs.boot_time(cfg.proc_root),
        "ptrace_scope": int(ptrace_scope.strip()) if ptrace_scope and ptrace_scope.strip().isdigit() else None,
        "euid": os.geteuid(),
        "has_cap_sys_ptrace": has_ptrace,
    }



def main_json(config_json: str) -> None:
    """Entry point of the shipped probe: collect and print one JSON document on stdout."""
    try:
        cfg = ProbeConfig.from_dict(json.loads(config_json))
        snap = collect(cfg)
    except Exception as exc:  # the caller gets a reason, never a traceback on stdout
        snap = {"schema_version": SCHEMA_VERSION, "origin": "live", "probe_error": repr(exc),
                "manifest": [{"source": "probe", "status": "failed", "detail": repr(exc)}]}
    out = json.dumps(snap, separators=(",", ":"), default=str)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # Nothing is left to clean up (every source finished or was given up on by the deadline);
    # skip the interpreter's teardown, and never wait on a thread stuck in a driver call.
    os._exit(0)


if __name__ == "__main__":
    main_json(sys.argv[1] if len(sys.argv) > 1 else "{}")
