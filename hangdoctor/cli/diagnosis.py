"""One diagnosis: the targets asked for, what can be refused before collecting, the
collection, and the analysis (per --pid tree where there are several). Used by the
diagnose, demo, snapshot and watch commands.

Target handling lives here, in one place: the hosts and pids asked for (_plan), what can be
refused before any collection starts (_preflight), then the collection itself (_collect).

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli.options.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from hangdoctor.cli.options import _command_line, _err, _load_checks, _stream_is_tty
from hangdoctor.errors import UsageError


def _plan(hosts: list[str], pids: list[str], hosts_file: str | None,
          opts: dict[str, Any]) -> tuple[list[Any], dict[str, list[int]]]:
    """The targets to collect from (hosts, containers, pods, --via pipes, a launcher's nodes),
    and the root pids asked for on each (empty: discover)."""
    from hangdoctor.reach import expand_targets, launchers, multi

    hosts = list(hosts)
    pids = list(pids)
    launcher = hosts_file if launchers.is_launcher_spec(hosts_file) else None
    if hosts_file and not launcher:
        try:
            hosts += multi.read_hosts_file(hosts_file)
            pids += multi.hosts_file_pid_args(hosts_file)
        except OSError as exc:
            raise UsageError(f"--hosts {hosts_file}: {exc.strerror or exc}", "give a readable file, one host a line") from None
    if not hosts and not opts.get("via") and not launcher:
        raise UsageError("no host given", "hangdoctor diagnose localhost --pid PID (or a [user@]host)")
    seen: list[str] = []
    for h in hosts:
        if h not in seen:
            seen.append(h)
    hosts = seen
    ssh_kwargs: dict[str, Any] = {}
    if opts.get("identity"):
        ssh_kwargs["identity"] = list(opts["identity"])
    if opts.get("ssh_option"):
        ssh_kwargs["ssh_options"] = list(opts["ssh_option"])
    if opts.get("known_hosts"):
        ssh_kwargs["known_hosts"] = opts["known_hosts"]
    if opts.get("ssh_config"):
        ssh_kwargs["config_path"] = opts["ssh_config"]
    kube = {"context": opts.get("context"), "kubeconfig": opts.get("kubeconfig")}
    targets, _ = expand_targets(hosts, list(opts.get("via") or []), launcher, kube, ssh_kwargs)
    by_host = multi.parse_pid_args(pids, [t.name for t in targets])
    return targets, by_host


def _is_local(name: str) -> bool:
    from hangdoctor.reach.multi import LOCAL_NAMES

    return name in LOCAL_NAMES


def _preflight(targets: list[Any], by_host: dict[str, list[int]], opts: dict[str, Any]) -> None:
    """Refuse, before the window starts, what can be seen to be wrong on this machine: a pid
    that does not exist here, a --log file that is not here. (On a remote host the probe finds
    out; a missing pid is then refused after collection, a missing log is a source that failed.)
    """
    if opts.get("take_what_there_is"):
        return  # snapshot / watch: the bundle is written whatever is missing, and says what
    for t in targets:
        if not _is_local(t.name):
            continue
        for pid in by_host.get(t.name) or []:
            if not os.path.exists(f"/proc/{pid}"):
                raise UsageError(f"no process {pid} on {t.name}",
                                 "check the PID: ps -eo pid,cmd | grep -iE 'vllm|sglang|python'")
            tgid = _thread_group(pid)
            if tgid is not None and tgid != pid:
                # /proc/TID answers for a thread too: its "process" would be one thread's view
                raise UsageError(f"{pid} on {t.name} is a thread of process {tgid}, not a process",
                                 f"give the process: --pid {tgid}")
        if opts.get("port") and not by_host.get(t.name):
            _refuse_port_nobody_listens(t.name, list(opts["port"]))
        log = opts.get("log")
        # Only a path that is not there: a FIFO or a device is the probe's to refuse (it
        # never opens one), with the rest of the evidence collected.
        problem = _log_problem(log) if log else None
        if problem == "missing":
            raise UsageError(f"--log {log} does not exist on {t.name}", "give the server's log file")
        if problem == "folder":
            raise UsageError(f"--log {log} is a folder on {t.name}, not a log file",
                             "give the server's log file in it")


def _thread_group(pid: int) -> int | None:
    """The process a task id belongs to (its Tgid), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def window_that_fits(window_s: float, deadline_s: float) -> float:
    """The window the probe can keep under this deadline (see _collect: the probe gets the
    deadline less a margin, and keeps 40 % of its own for the dumps around the window)."""
    probe_s = max(2.0, deadline_s - min(3.0, max(1.0, 0.2 * deadline_s)))
    return min(window_s, 0.6 * probe_s)


def deadline_for_window(window_s: float) -> float:
    """The shortest --deadline whose probe keeps the whole window."""
    import math

    short = window_s / 0.48  # below 15 s the margin is a fifth of the deadline
    return float(math.ceil(short if short < 15 else window_s / 0.6 + 3.0))


def _refuse_port_nobody_listens(host: str, ports: list[int]) -> None:
    """--port without --pid names the server by its port: with nothing listening there, the
    servers discovery would find instead are not the one asked for. /proc/net/tcp is the
    kernel's socket table, read without touching any file system a server uses."""
    from hangdoctor.collect import procfs

    heard = {info.get("port") for info in procfs.listening_sockets("/proc").values()}
    if heard and not any(p in heard for p in ports):
        raise UsageError(f"nothing listens on port {', '.join(map(str, ports))} on {host}",
                         "check the port: ss -ltnp; or give --pid PID")


def _refuse_thread_ids(results: list[Any]) -> None:
    """A --pid that the probe found to be a thread of another process: refused as on localhost."""
    for r in results:
        given = ((r.snapshot or {}).get("targets") or {}).get("threads_given") or {}
        for tid, tgid in given.items():
            raise UsageError(f"{tid} on {r.name} is a thread of process {tgid}, not a process",
                             f"give the process: --pid {tgid}")


def _refuse_unheard_ports(results: list[Any]) -> None:
    """The probe found nothing listening on --port on a remote host: refused as on localhost."""
    for r in results:
        unmatched = ((r.snapshot or {}).get("targets") or {}).get("ports_unmatched") or {}
        ports = unmatched.get("not_listening") or []
        if ports:
            raise UsageError(f"nothing listens on port {', '.join(map(str, ports))} on {r.name}",
                             "check the port: ss -ltnp; or give --pid PID")
        if unmatched:
            raise UsageError(f"port {', '.join(map(str, unmatched.get('ports') or []))} on {r.name}: "
                             "the process listening there is not visible to this user",
                             "run as the server's user or with sudo, or give --pid PID")


def _log_problem(path: str, timeout_s: float = 2.0) -> str | None:
    """"missing" when the log path is surely not there, "folder" when it is a directory, else
    None. Asked of a disposable child: a path on a hung FUSE or NFS mount puts whoever stats it
    in D state for good, and this process must exit by its deadline. A child that does not
    answer in time leaves the question to the probe."""
    from hangdoctor.collect.sources import LogRead

    res = LogRead([path], given=True, tail=False).result(timeout_s)
    err = str(res.get("error") or "")
    if res.get("timeout"):
        return None
    if "No such file" in err:
        return "missing"
    # the child has just stat'ed it without blocking: asking again here is safe
    if "not a regular file" in err and os.path.isdir(path):
        return "folder"
    return None


def _refuse_missing_pids(results: list[Any], by_host: dict[str, list[int]]) -> None:
    """A pid asked for that the probe found no process for: a typo, not a dead server."""
    for r in results:
        snap = r.snapshot or {}
        missing = [p.get("pid") for p in snap.get("processes") or []
                   if isinstance(p, dict) and p.get("pid") in (by_host.get(r.name) or [])
                   and p.get("exit_info") == "gone before collection"]
        if missing:
            raise UsageError(f"no process {', '.join(map(str, missing))} on {r.name}",
                             "check the PID: ps -eo pid,cmd | grep -iE 'vllm|sglang|python'")


def _collect(targets: list[Any], by_host: dict[str, list[int]], opts: dict[str, Any],
             all_started: Any = None) -> list[Any]:
    import asyncio

    from hangdoctor.collect.config import ProbeConfig
    from hangdoctor.reach import multi

    def config_for(t: Any) -> ProbeConfig:
        return ProbeConfig(
            root_pids=by_host.get(t.name, []),
            ports=list(opts.get("port") or []),
            log_path=opts.get("log"),
            window_s=opts["window"],
            # leave the host's probe room to report before the overall deadline cuts it
            deadline_s=max(2.0, opts["deadline"] - min(3.0, max(1.0, 0.2 * opts["deadline"]))),
            native=opts.get("native", False),
            locals=opts.get("locals", False),
            sudo=opts.get("sudo", False),
            redact=not opts.get("no_redact", False),
            nvml=not opts.get("no_gpu", False),
            nccl_ras=not opts.get("no_nccl_ras", False),
            fr_dump=opts.get("fr_dump", False),
            host_name=t.name,
            # issue 13: the opt-in canary; the key only ever goes in its request header
            probe_generate=bool(opts.get("probe_generate")),
            api_key=opts.get("api_key") or None,
        )

    if opts.get("api_key"):  # our own key: scrubbed from every output wherever it recurs
        from hangdoctor.redact import learn

        learn(opts["api_key"], always=True)
    return asyncio.run(multi.collect_all(targets, config_for, opts["deadline"], all_started))


class _Progress:
    """One line on stderr while the window runs, when stderr is a terminal (as pip and
    docker pull do): a 30 s window is not 30 s of silence. Erased when collection ends."""

    def __init__(self, what: str, window_s: float, enabled: bool) -> None:
        import threading

        self.what, self.window_s, self.enabled = what, window_s, enabled
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="hd-progress", daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        spin = "|/-\\"
        i = 0
        while not self.stop.wait(0.0 if i == 0 else 0.25):
            elapsed = time.monotonic() - t0
            if elapsed < self.window_s:
                state = f"watching for {self.window_s:g} s: {elapsed:.0f} s"
            else:
                state = f"reading stacks, GPUs, the log: {elapsed:.0f} s"
            try:
                sys.stderr.write(f"\r\x1b[K{spin[i % 4]} hangdoctor: {self.what}: {state}")
                sys.stderr.flush()
            except (OSError, ValueError):
                return
            i += 1

    def __enter__(self) -> _Progress:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.stop.set()
            self.thread.join(1.0)
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()


def _run_diagnosis(hosts: tuple[str, ...], kw: dict[str, Any]) -> tuple[dict[str, Any], list[Any], float]:
    import threading

    t0 = time.monotonic()
    if kw.get("checks_dirs"):
        from hangdoctor.checkapi.registry import require_checks_dir

        for d in kw["checks_dirs"]:
            require_checks_dir(d)  # fail before collecting; the checks load during the window
    # Everything that does not need the evidence (loading the checks, importing triage and the
    # log parsers, compiling the report templates) happens while the probe samples its window.
    warm: dict[str, Any] = {}
    probes_started = threading.Event()
    collected = threading.Event()

    def warm_up() -> None:
        # Start once every probe runs (not during imports, SSH handshakes or the first /proc
        # walk), and let a local probe take its first sample before competing for the GIL.
        probes_started.wait(float(kw.get("deadline") or 45.0))
        # At the lowest CPU priority: this work can wait, and on the diagnosed host the server
        # and the probe's py-spy dumps must not share their CPUs with it. Only as low as can be
        # undone once the evidence is in (see below).
        with contextlib.suppress(AttributeError, OSError):
            warm["tid"] = threading.get_native_id()
            if not collected.is_set():
                os.setpriority(os.PRIO_PROCESS, warm["tid"], _warm_nice())
            if collected.is_set():  # the collection ended meanwhile: no lowering then
                os.setpriority(os.PRIO_PROCESS, warm["tid"], 0)
        window = kw.get("window")
        time.sleep(min(0.3, float(2.0 if window is None else window) / 4))
        try:
            warm["checks"] = _load_checks(kw.get("checks_dirs") or ())
            import hangdoctor.evidence.kernel  # noqa: F401
            import hangdoctor.evidence.logs  # noqa: F401
            import hangdoctor.triage.analyze  # noqa: F401
            from hangdoctor.report import render

            if kw.get("output") or not kw.get("as_json"):
                try:
                    render.warm_up()
                except Exception:  # only an optimisation: the real render reports problems
                    pass
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            warm["error"] = exc

    targets, by_host = _plan(list(hosts), list(kw.get("pids") or []), kw.get("hosts_file"), kw)
    _preflight(targets, by_host, kw)
    warmer = threading.Thread(target=warm_up, name="hd-warm-up", daemon=True)
    warmer.start()
    progress = _Progress(", ".join(t.name for t in targets[:3]) + (" …" if len(targets) > 3 else ""),
                         float(kw.get("window") or 0.0),
                         # TERM=dumb: a terminal that cannot erase a line (Emacs' shell, CI logs)
                         enabled=not kw.get("quiet") and _stream_is_tty(sys.stderr)
                         and os.environ.get("TERM") != "dumb")
    with progress:
        results = _collect(targets, by_host, kw, probes_started)
    # The evidence is in: the warm-up is now on the critical path. At nice 19 on a busy host
    # (a server spinning on every core) it got ~1.5 % of a CPU and the join took 20 s past the
    # deadline; back to normal priority.
    collected.set()
    with contextlib.suppress(AttributeError, OSError, KeyError):
        os.setpriority(os.PRIO_PROCESS, warm["tid"], 0)
    warmer.join()
    if not kw.get("take_what_there_is"):
        _refuse_missing_pids(results, by_host)
        _refuse_unheard_ports(results)
        _refuse_thread_ids(results)
    if "error" in warm:
        raise warm["error"]
    checks = warm["checks"]
    from hangdoctor.triage.analyze import analyze
    snapshots = [r.snapshot for r in results if r.snapshot is not None]
    for r in results:
        if r.error:
            msg = r.error if r.error.startswith(r.name) else f"{r.name}: {r.error}"
            _err(f"hangdoctor: {msg}" + (f" ({r.remedy})" if r.remedy else ""))
    analysis = analyze(snapshots, checks, command=_command_line(), host_results=results)
    analysis = _per_tree(analysis, snapshots, checks, results)
    from hangdoctor.reach import collection_warnings

    for line in collection_warnings(snapshots):
        _err(line)
    if kw.get("no_redact"):
        analysis["weakened"].insert(0, "NOT REDACTED (--no-redact): this report may contain tokens and keys; do not share it")
    for s in snapshots:
        targets = s.get("targets") or {}
        if targets.get("discovered"):
            found = targets.get("discovery") or []
            host = (s.get("host") or {}).get("name")
            if found:
                _err(f"hangdoctor: {host}: found {len(found)} server process tree(s): "
                     + ", ".join(f"{d['pid']} ({d['kind']})" for d in found))
            else:
                _err(f"hangdoctor: {host}: no inference-server processes found (vLLM, SGLang, TGI, "
                     "TensorRT-LLM, Triton, torchrun); give --pid PID")
    return analysis, results, time.monotonic() - t0


_SEVERITY = ("dead", "hung", "progressing", "inconclusive", "healthy")


def _split_trees(snap: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """One snapshot per root of a snapshot that holds several --pid trees: their processes,
    stacks and probed ports apart; the host's own sources (GPUs, log, kernel log) shared."""
    roots = list((snap.get("targets") or {}).get("root_pids") or [])
    if len(roots) < 2 or (snap.get("targets") or {}).get("discovered"):
        return []
    out = []
    for root in roots:
        procs = [p for p in snap.get("processes") or [] if isinstance(p, dict) and p.get("root_pid") == root]
        pids = {str(p.get("pid")) for p in procs}
        ports = {lst.get("port") for p in procs for lst in p.get("listen") or [] if isinstance(lst, dict)}
        part = dict(snap, processes=procs,
                    stacks={k: v for k, v in (snap.get("stacks") or {}).items() if k in pids},
                    http=[h for h in snap.get("http") or [] if isinstance(h, dict) and h.get("port") in ports],
                    targets=dict(snap.get("targets") or {}, root_pids=[root]))
        out.append((root, part))
    return out


def _per_tree(analysis: dict[str, Any], snapshots: list[dict[str, Any]], checks: list[Any],
              results: list[Any]) -> dict[str, Any]:
    """Several --pid trees on one host: each is triaged on its own evidence, so one tree's
    answering port or busy workers cannot hide another tree's deadlock. The report keeps the
    whole snapshot's tables; verdict, causes and ruled-out come from the trees, the worst
    verdict first."""
    from hangdoctor.triage.analyze import analyze

    trees: list[tuple[int, str, dict[str, Any]]] = []
    for snap in snapshots:
        host = (snap.get("host") or {}).get("name", "?")
        for root, part in _split_trees(snap):
            trees.append((root, host, analyze([part], checks, command=analysis.get("command"))))
    if not trees:
        return analysis
    trees.sort(key=lambda t: _SEVERITY.index(t[2]["verdict"]) if t[2]["verdict"] in _SEVERITY else 9)
    worst = trees[0][2]
    by_id: dict[str, dict[str, Any]] = {}
    for root, _host, a in trees:
        for c in a.get("causes") or []:
            c = dict(c, summary=f"tree of pid {root}: {c['summary']}")
            if c["id"] not in by_id or c["score"] > by_id[c["id"]]["score"]:
                by_id[c["id"]] = c
    causes = sorted(by_id.values(), key=lambda c: (-c["score"], c["id"]))
    ruled = [r for r in worst.get("ruled_out") or [] if r.get("id") not in by_id
             and all(any(x.get("id") == r.get("id") for x in a.get("ruled_out") or []) for _r, _h, a in trees)]
    out = dict(analysis)
    out["verdict"] = worst["verdict"]
    out["verdict_reason"] = "; ".join(f"pid {root}: {a['verdict']} ({a['verdict_reason']})" for root, _h, a in trees)
    out["causes"] = causes
    out["ruled_out"] = ruled
    top = causes[0] if causes else None
    out["headline"] = (f"Most likely {top['id']} (score {top['score']:.2f}): {top['summary']}" if top
                       else worst.get("headline"))
    out["next_command"] = worst.get("next_command")
    out["trees"] = [{"host": h, "root_pid": root, "verdict": a["verdict"], "verdict_reason": a["verdict_reason"],
                     "top_cause": (a.get("causes") or [{}])[0].get("id")} for root, h, a in trees]
    return out


def _warm_nice() -> int:
    """The lowest priority the warm-up may take: 19 where it can be raised back to 0 after the
    collection (root, or RLIMIT_NICE allows it), else 5 (an unprivileged process cannot)."""
    try:
        import resource

        if os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20:
            return 19
    except (ImportError, AttributeError, OSError, ValueError):
        pass
    return 5
