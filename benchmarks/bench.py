"""How fast is ``hangdoctor diagnose``, and what does it cost the target? One Markdown table.

    python benchmarks/bench.py [--quick] [--runs N]

Starts its own hung servers (``hangdoctor.scenarios.postload``) and its own sshd instances on
127.0.0.1, measures, stops everything it started, and writes the tables to stdout and to
``benchmarks/results.md``. Progress goes to stderr. README.md beside this file says what every
figure means and how it is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import proc_tools  # noqa: E402
from bench_report import (  # noqa: E402
    DIAGNOSE_TIMEOUT_S,
    DUMP_SAMPLE,
    MANUAL_TIMEOUT_S,
    RENDER_REPEATS,
    SCENARIO_LIFETIME_S,
    STARTUP_REPEATS,
    WEIGHTS_MIB,
    Diagnosis,
    Results,
    WorkerRun,
    median,
    render_markdown,
)
from proc_tools import REPO, Measured, Scenario, run_measured, snapshot_source, start_scenarios  # noqa: E402
from sshd_pool import SshdPool, children_cpu_s, read_remote_runs, start_pool  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def hangdoctor_env(workdir: Path) -> dict[str, str]:
    """The environment ``hangdoctor`` runs with here.

    Bytecode is cached (in the work dir, not the repo) as for an installed wheel; this
    machine exports PYTHONDONTWRITEBYTECODE=1, which would make every run compile every module.
    """
    env = dict(
        os.environ,
        PYTHONPATH=str(proc_tools.SOURCE),
        PYTHONPYCACHEPREFIX=str(workdir / "pycache"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def machine_info(python: str, pyspy_bin: str | None) -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def out(argv: list[str]) -> str:
        try:
            r = subprocess.run(argv, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return (r.stdout or r.stderr).decode(errors="replace").strip().splitlines()[0]

    try:
        import asyncssh

        asyncssh_version = asyncssh.__version__
    except ImportError:
        asyncssh_version = "not installed"
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "mem": f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB",
        "kernel": platform.release(),
        "python": f"{platform.python_version()} ({python})",
        "py-spy": out([pyspy_bin, "--version"]) if pyspy_bin else "not found",
        "openssh": out(["ssh", "-V"]),
        "asyncssh": asyncssh_version,
    }


def source_state() -> str:
    """The commit measured, and whether the working tree had uncommitted changes (read-only)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            timeout=10,
            text=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", *proc_tools.SOURCE_DIRS],
            capture_output=True,
            timeout=10,
            text=True,
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if not head:
        return "unknown"
    return f"{head} + {len(dirty)} uncommitted file(s)" if dirty else head


# ------------------------------------------------------------------ single measurements


def time_pyspy_dumps(pyspy_bin: str, pids: list[int]) -> float:
    """The slowest of single ``py-spy dump --json`` runs, one after another, on ``pids``."""
    worst = 0.0
    for pid in pids:
        m = run_measured([pyspy_bin, "dump", "--pid", str(pid), "--json"], 30.0)
        worst = max(worst, m.wall_s)
    return worst


def ssh_round_trip_s(pool: SshdPool, index: int = 0) -> float:
    """connect + authenticate + ``true`` + close with asyncssh: what one SSH round trip costs,
    with hangdoctor's client (each server packet acknowledged at once, ``ack_each_read``)."""
    import asyncssh

    from hangdoctor.reach.sshconnect import ack_each_read

    host = pool.hosts[index]

    class Client(asyncssh.SSHClient):
        def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
            ack_each_read(conn)

    async def once() -> float:
        t0 = time.monotonic()
        async with asyncssh.connect(
            "127.0.0.1",
            port=host.port,
            username=host.user,
            client_keys=[pool.key_path],
            known_hosts=pool.known_hosts,
            config=None,
            connect_timeout=10,
            client_factory=Client,
        ) as conn:
            await conn.run("true", check=False)
        return time.monotonic() - t0

    return asyncio.run(asyncio.wait_for(once(), 30.0))


def diagnose(
    python: str, env: dict[str, str], workdir: Path, args: list[str], window_s: float
) -> Diagnosis:
    """Run ``hangdoctor diagnose ARGS --window W --json -q`` and read its analysis + snapshot."""
    snap_path = workdir / "last.snapshot.json"
    snap_path.unlink(missing_ok=True)
    argv = [
        python,
        "-m",
        "hangdoctor",
        "diagnose",
        *args,
        "--window",
        str(window_s),
        "--json",
        "-q",
        "--save-snapshot",
        str(snap_path),
    ]
    m = run_measured(argv, DIAGNOSE_TIMEOUT_S, env=env, cwd=str(workdir))
    try:
        analysis = json.loads(m.stdout)
    except ValueError:
        analysis = None
        log(f"no JSON from {' '.join(argv[3:])}: rc {m.rc} {m.stderr[-400:]!r}")
    try:
        snapshot = json.loads(snap_path.read_text())
    except (OSError, ValueError):
        snapshot = None
    return Diagnosis(m, analysis, snapshot)


def diagnose_ssh(
    python: str,
    env: dict[str, str],
    workdir: Path,
    pool: SshdPool,
    indexes: list[int],
    args: list[str],
    window_s: float,
) -> Diagnosis:
    """``diagnose`` over SSH, adding what the remote side spent (see README: remote CPU)."""
    for i in indexes:
        read_remote_runs(pool.hosts[i].ru_file)
    before = {i: children_cpu_s(pool.hosts[i].proc.pid) for i in indexes}
    d = diagnose(python, env, workdir, args, window_s)
    time.sleep(0.1)  # let each listener reap its finished connection
    runs = [r for i in indexes for r in read_remote_runs(pool.hosts[i].ru_file)]
    if runs:
        d.remote_cpu_s = sum(r[1] + r[2] for r in runs)
        d.remote_rss_kib = max(r[3] for r in runs)
    d.remote_total_cpu_s = sum(children_cpu_s(pool.hosts[i].proc.pid) - before[i] for i in indexes)
    return d


def run_manual(pool: SshdPool, alias: str, scenario: Scenario, *options: str) -> Measured:
    """``manual_baseline.sh`` against ``alias`` (extra ``options``, e.g. ``-w 2``), measured."""
    argv = ["bash", str(HERE / "manual_baseline.sh"), "-F", pool.ssh_config]
    argv += ["-l", scenario.log_path, *options, alias, *map(str, scenario.all_pids)]
    return run_measured(argv, MANUAL_TIMEOUT_S)


# ------------------------------------------------------------------ the sections


def measure_startup(python: str, env: dict[str, str], workdir: Path, res: Results) -> None:
    log("start-up time (hangdoctor --help)")
    cwd = str(workdir)  # not the repository: `python -m` would import the live tree from there
    cold_env = dict(env, PYTHONDONTWRITEBYTECODE="1")
    cold_env.pop("PYTHONPYCACHEPREFIX", None)
    run_measured([python, "-m", "hangdoctor", "--help"], 60, env=env, cwd=cwd)  # fills the cache
    bare = [
        run_measured([python, "-c", "pass"], 60, env=env, cwd=cwd).wall_s
        for _ in range(STARTUP_REPEATS)
    ]
    warm = [
        run_measured([python, "-m", "hangdoctor", "--help"], 60, env=env, cwd=cwd)
        for _ in range(STARTUP_REPEATS)
    ]
    cold = [
        run_measured([python, "-m", "hangdoctor", "--help"], 60, env=cold_env, cwd=cwd).wall_s
        for _ in range(STARTUP_REPEATS)
    ]
    res.startup = {
        "python": median(bare),
        "help": median(m.wall_s for m in warm),
        "help_rss_kib": median(m.maxrss_kib for m in warm),
        "help_nocache": median(cold),
    }


def measure_workers(
    python: str,
    env: dict[str, str],
    workdir: Path,
    pool: SshdPool,
    pyspy_bin: str,
    res: Results,
    manual_sizes: set[int],
    upload_sizes: set[int],
    same_evidence_sizes: set[int],
) -> None:
    host = pool.hosts[0]
    ssh_args = [host.spec, "--identity", pool.key_path, "--known-hosts", pool.known_hosts]
    upload_host = next(h for h in pool.hosts if not h.has_pyspy)
    first = True
    for workers in res.worker_sizes:
        log(f"{workers} hung worker(s): starting the scenario")
        t0 = time.monotonic()
        scenario = start_scenarios(
            python,
            workdir,
            [(f"w{workers}", workers)],
            WEIGHTS_MIB,
            SCENARIO_LIFETIME_S,
            timeout_s=180.0,
        )[0]
        log(f"{workers} worker(s) hung after {time.monotonic() - t0:.1f} s")
        try:
            common = ["--pid", str(scenario.launcher_pid), "--log", scenario.log_path]
            if first:  # warm-up, not counted: bytecode cache, asyncssh import, first connect
                diagnose(python, env, workdir, ["localhost", *common], 0.5)
                diagnose(python, env, workdir, [*ssh_args, *common], 0.5)
                ssh_round_trip_s(pool)
                first = False
            runs: list[WorkerRun] = []
            for r in range(res.runs):
                dump_s = time_pyspy_dumps(pyspy_bin, scenario.worker_pids[:DUMP_SAMPLE])
                rtt_s = ssh_round_trip_s(pool)
                local = diagnose(python, env, workdir, ["localhost", *common], res.window_s)
                ssh = diagnose_ssh(
                    python, env, workdir, pool, [0], [*ssh_args, *common], res.window_s
                )
                run = WorkerRun(dump_s, rtt_s, local, ssh)
                if workers in upload_sizes:
                    run.upload = diagnose_ssh(
                        python,
                        env,
                        workdir,
                        pool,
                        [upload_host.index],
                        [upload_host.alias, "--ssh-config", pool.ssh_config, *common],
                        res.window_s,
                    )
                if workers in manual_sizes:
                    run.manual = run_manual(pool, host.alias, scenario)
                    # hangdoctor with the manual sequence's evidence (one sample of each
                    # process, no window), measured right beside it
                    run.ssh_one = diagnose_ssh(
                        python, env, workdir, pool, [0], [*ssh_args, *common], 0.0
                    )
                    if run.ssh_one.verdict != "hung":
                        res.errors.append(
                            f"{workers} workers, ssh --window 0, run {r + 1}: verdict "
                            f"{run.ssh_one.verdict} (rc {run.ssh_one.m.rc})"
                        )
                    if run.manual.rc != 0:
                        res.errors.append(
                            f"manual baseline, {workers} workers: rc "
                            f"{run.manual.rc}: {run.manual.stderr[-300:]!r}"
                        )
                if workers in same_evidence_sizes:
                    run.manual_same = run_manual(
                        pool, host.alias, scenario, "-w", f"{res.window_s:g}"
                    )
                for name, d in (("local", local), ("ssh", ssh), ("ssh upload", run.upload)):
                    if d is not None and d.verdict != "hung":
                        res.errors.append(
                            f"{workers} workers, {name}, run {r + 1}: verdict "
                            f"{d.verdict} (rc {d.m.rc})"
                        )
                if local.analysis is not None and ssh.analysis is not None:
                    runs.append(run)
                else:
                    res.errors.append(f"{workers} workers, run {r + 1}: not counted (no analysis)")
                log(
                    f"  run {r + 1}: dump {dump_s:.3f} s, rtt {rtt_s:.3f} s, local "
                    f"{local.m.wall_s:.2f} s, ssh {ssh.m.wall_s:.2f} s"
                    + (f", upload {run.upload.m.wall_s:.2f} s" if run.upload else "")
                    + (f", manual {run.manual.wall_s:.2f} s" if run.manual else "")
                    + (f", ssh -w 0 {run.ssh_one.m.wall_s:.2f} s" if run.ssh_one else "")
                    + (f", manual -w {run.manual_same.wall_s:.2f} s" if run.manual_same else "")
                )
            if runs:
                res.workers[workers] = runs
        finally:
            scenario.stop()


def measure_hosts(
    python: str, env: dict[str, str], workdir: Path, pool: SshdPool, res: Results
) -> None:
    count = max(res.host_sizes)
    log(f"{count} hosts: starting one hung server (1 worker) per host")
    scenarios: list[Scenario] = start_scenarios(
        python,
        workdir,
        [(f"h{i}", 1) for i in range(count)],
        WEIGHTS_MIB,
        SCENARIO_LIFETIME_S,
        timeout_s=180.0,
    )
    try:

        def args_for(n: int) -> list[str]:
            a = [pool.hosts[i].alias for i in range(n)]
            a += ["--ssh-config", pool.ssh_config]
            for i in range(n):
                a += ["--pid", f"{pool.hosts[i].alias}:{scenarios[i].launcher_pid}"]
            return a

        diagnose(python, env, workdir, args_for(min(2, count)), 0.5)  # warm-up, not counted
        for r in range(res.runs):
            one = diagnose_ssh(python, env, workdir, pool, [0], args_for(1), res.window_s)
            for n in res.host_sizes:
                many = (
                    one
                    if n == 1
                    else diagnose_ssh(
                        python, env, workdir, pool, list(range(n)), args_for(n), res.window_s
                    )
                )
                if many.analysis is not None and one.analysis is not None:
                    res.hosts.setdefault(n, []).append((many, one))
                if many.hosts_ok != n or many.verdict != "hung":
                    res.errors.append(
                        f"{n} hosts, run {r + 1}: {many.hosts_ok} of {n} hosts "
                        f"collected, verdict {many.verdict} (rc {many.m.rc}): "
                        f"{many.m.stderr[-300:]!r}"
                    )
                log(
                    f"  run {r + 1}: {n} host(s) {many.m.wall_s:.2f} s (one host "
                    f"{one.m.wall_s:.2f} s)"
                )
    finally:
        for s in scenarios:
            s.stop()


def measure_render(res: Results) -> None:
    sizes = sorted(res.workers)
    if not sizes:
        return
    biggest = sizes[-1]
    analysis = next(
        (run.local.analysis for run in reversed(res.workers[biggest]) if run.local.analysis), None
    )
    if analysis is None:
        res.errors.append("no analysis to render")
        return
    log(f"rendering the HTML report of the {biggest}-worker analysis")
    from hangdoctor.report.render import render_html

    times = []
    html = ""
    for _ in range(RENDER_REPEATS):
        t0 = time.perf_counter()
        html = render_html(analysis)
        times.append(time.perf_counter() - t0)
    res.render = {
        "workers": biggest,
        "ranks": len(analysis.get("ranks") or []),
        "first_s": times[0],
        "median_s": statistics.median(times),
        "size_bytes": len(html.encode("utf-8")),
        "analysis_bytes": len(json.dumps(analysis).encode("utf-8")),
    }


def parse_sizes(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/bench.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="1 run; 8 and 64 workers; 1 and 16 hosts")
    p.add_argument("--runs", type=int, default=None, help="runs per figure (default 3; --quick 1)")
    p.add_argument("--window", type=float, default=2.0, help="hangdoctor --window (s)")
    p.add_argument("--workers", default=None, help="worker counts, e.g. 1,8,32,64")
    p.add_argument("--hosts", default=None, help="host counts, e.g. 1,4,16,32")
    p.add_argument("--output", default=str(HERE / "results.md"), help="Markdown file to write")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    workers = parse_sizes(args.workers or ("8,64" if args.quick else "1,8,32,64"))
    hosts = parse_sizes(args.hosts or ("1,16" if args.quick else "1,4,16,32"))
    command = "python benchmarks/bench.py " + " ".join(sys.argv[1:] if argv is None else argv)

    # SIGTERM ends the run through the same cleanup as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    python = os.path.realpath(sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="hd-bench-"))
    src = snapshot_source(workdir / "src")
    sys.path.insert(0, str(src))
    from hangdoctor.collect.pyspy import find_pyspy

    pyspy_bin = find_pyspy()
    if not pyspy_bin:
        shutil.rmtree(workdir, ignore_errors=True)
        print("bench: py-spy not found (pip install py-spy)", file=sys.stderr)
        return 2
    pyspy_bin = os.path.realpath(pyspy_bin)  # a pyenv shim would add its own start-up
    res = Results(args.window, runs, workers, hosts)
    res.machine = machine_info(python, pyspy_bin)
    res.machine["source"] = source_state()
    res.load_start = os.getloadavg()
    env = hangdoctor_env(workdir)
    check = run_measured([python, "-m", "hangdoctor", "--help"], 60, env=env, cwd=str(workdir))
    if check.rc != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        print(
            "bench: the copied hangdoctor does not start (a file mid-edit?): "
            + check.stderr.decode(errors="replace")[-800:],
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    pool: SshdPool | None = None
    cleanup: list[Callable[[], None]] = []
    try:
        measure_startup(python, env, workdir, res)
        log(f"starting {max(hosts)} + 1 sshd instances")
        pool = start_pool(
            workdir / "sshd", max(hosts), python, os.path.dirname(pyspy_bin), without_pyspy=1
        )
        cleanup.append(pool.stop)
        measure_workers(
            python,
            env,
            workdir,
            pool,
            pyspy_bin,
            res,
            manual_sizes=set(workers),
            upload_sizes={8},
            same_evidence_sizes={8},
        )
        measure_render(res)
        measure_hosts(python, env, workdir, pool, res)
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        res.errors.append("interrupted: partial results")
    except Exception as exc:  # still print what was measured, and why it stopped
        import traceback

        traceback.print_exc()
        res.errors.append(f"stopped by {type(exc).__name__}: {exc} (partial results)")
    finally:
        for fn in cleanup:
            fn()
        shutil.rmtree(workdir, ignore_errors=True)
    res.load_end = os.getloadavg()
    text = render_markdown(res, command, time.monotonic() - started)
    sys.stdout.write(text)
    sys.stdout.flush()
    if not args.no_write:
        Path(args.output).write_text(text)
        log(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
