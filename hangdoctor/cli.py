"""The command line. Only this module turns errors into messages and exit codes.

stdout carries the requested output (``--json`` means pure JSON); the terminal summary,
progress and errors go to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from hangdoctor import __version__
from hangdoctor.errors import HangdoctorError, InputError, UsageError

# Exit codes (also in the README): a script can act on them.
EXIT_HEALTHY = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_HUNG = 3
EXIT_NO_COLLECT = 4
EXIT_PROGRESSING = 5
EXIT_DEAD = 6
EXIT_INCONCLUSIVE = 7
VERDICT_EXIT = {
    "healthy": EXIT_HEALTHY,
    "hung": EXIT_HUNG,
    "progressing": EXIT_PROGRESSING,
    "dead": EXIT_DEAD,
    "inconclusive": EXIT_INCONCLUSIVE,
}
EXIT_CODES_HELP = """\b
Exit codes:
  0  healthy            3  hung              5  progressing (slow, not hung)
  6  dead               7  inconclusive      4  could not collect (host or source failed;
  2  bad usage or input                         a partial report is still written)
  1  internal error"""


def _err(msg: str) -> None:
    from hangdoctor.textsafe import clean_text  # remote text never reaches the terminal raw

    click.echo(clean_text(msg), err=True)


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HangdoctorError as exc:
            _err(f"hangdoctor: {exc.one_line()}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _err("hangdoctor: interrupted")
            ctx.exit(130)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except BrokenPipeError:  # `hangdoctor checks | head`: the reader left, that is fine
            import os

            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), sys.stdout.fileno())
            ctx.exit(0)
        except Exception as exc:  # never a traceback on the terminal
            import os
            import traceback

            if os.environ.get("HANGDOCTOR_DEBUG"):
                traceback.print_exc()
            _err(f"hangdoctor: internal error: {type(exc).__name__}: {exc} "
                 "(please report it; HANGDOCTOR_DEBUG=1 shows the traceback)")
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="hangdoctor")
def main() -> None:
    """Is the inference server hung, and why? Collects evidence from a live host (local or over
    SSH), runs checks over it, ranks the likely causes, and writes a report.

    \b
      hangdoctor diagnose localhost --pid 46294 -o report.html
      hangdoctor diagnose root@gpu-node-3            # find the servers there
      hangdoctor analyze pasted-dump.txt server.log  # evidence from a ticket
      hangdoctor demo                                # a real diagnosis of a built-in hung server
    """


# ------------------------------------------------------------------ shared options

def _output_options(f: Any) -> Any:
    f = click.option("-o", "--output", "output", type=click.Path(dir_okay=False), default=None,
                     help="write the report here; the format follows the suffix (.html, .md, .json)")(f)
    f = click.option("--format", "fmt", type=click.Choice(["html", "json", "md"]), default=None,
                     help="report format when the suffix does not say")(f)
    f = click.option("--json", "as_json", is_flag=True, help="print the analysis as JSON on stdout (only JSON)")(f)
    f = click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="also load the checks in this folder")(f)
    f = click.option("-q", "--quiet", is_flag=True, help="no terminal summary")(f)
    return _terminal_options(f)


def _terminal_options(f: Any) -> Any:
    f = click.option("--wide", is_flag=True,
                     help="never cut the summary's lines to the terminal's width")(f)
    f = click.option("--color", "color", type=click.Choice(["auto", "always", "never"]),
                     default="auto", show_default=True,
                     help="colour in the summary; auto: on a terminal, unless NO_COLOR is set")(f)
    return f


def _stream_is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def terminal_style(stream: Any, wide: bool = False, color: str = "auto") -> tuple[int | None, bool]:
    """(width, colour) for a summary written to ``stream``.

    Width: None (cut nothing) when the stream is not a terminal or with ``--wide``; else
    ``COLUMNS`` when it is set (as shells and tmux export it), else the terminal's own width.
    Colour: ``--color always|never``; auto means a terminal, no ``NO_COLOR`` (no-color.org:
    any non-empty value), and not ``TERM=dumb``. The command line beats the environment.
    """
    tty = _stream_is_tty(stream)
    width: int | None = None
    if tty and not wide:
        cols = os.environ.get("COLUMNS", "").strip()
        if cols.isdigit() and int(cols) > 0:
            width = int(cols)
        else:
            try:
                width = os.get_terminal_size(stream.fileno()).columns or 80
            except (AttributeError, ValueError, OSError):
                width = 80
    if color == "always":
        use_color = True
    elif color == "never":
        use_color = False
    else:
        use_color = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return width, use_color


def invoked_as() -> str:
    """How to run hangdoctor again from this shell: ``hangdoctor`` when that is on PATH and is
    this program, else the path it was run by (``.venv/bin/hangdoctor``) or
    ``PYTHON -m hangdoctor``: a command to copy must work without an activated venv."""
    import shutil

    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith(("__main__.py", "-c")) or not argv0:
        py = sys.executable or "python3"
        rel = os.path.relpath(py) if not os.path.relpath(py).startswith("../..") else py
        return f"{rel if len(rel) < len(py) else py} -m hangdoctor"
    on_path = shutil.which("hangdoctor")
    try:
        if on_path and os.path.samefile(on_path, argv0 if os.sep in argv0 else on_path):
            return "hangdoctor"
    except OSError:
        pass
    if os.sep not in argv0:
        return "hangdoctor"
    rel = os.path.relpath(argv0)
    return rel if len(rel) <= len(argv0) else argv0


def _load_checks(checks_dirs: tuple[str, ...]) -> list[Any]:
    from hangdoctor.checkapi.registry import all_checks

    checks, problems = all_checks(list(checks_dirs))
    for p in problems:
        _err(f"hangdoctor: warning: {p}")
    return checks


def _command_line() -> str:
    from hangdoctor.redact import redact_argv

    return " ".join(["hangdoctor"] + redact_argv(sys.argv[1:]))


def _emit(analysis: dict[str, Any], output: str | None, fmt: str | None, as_json: bool, quiet: bool,
          extra_paths: list[str] | None = None, wide: bool = False, color: str = "auto") -> None:
    from hangdoctor.report.render import render_json, render_terminal, write_report

    written = None
    if output:
        try:
            used = write_report(analysis, output, fmt)
        except ValueError as exc:
            raise UsageError(str(exc), "use -o report.html, report.md or report.json, or --format") from None
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}", "choose a writable path") from None
        written = f"{output} ({used})"
    if as_json:
        sys.stdout.write(render_json(analysis) + "\n")
        sys.stdout.flush()
    if not quiet:
        # The summary goes to stdout, or to stderr when stdout carries the JSON.
        stream = sys.stderr if as_json else sys.stdout
        width, use_color = terminal_style(stream, wide, color)
        shown = analysis
        nxt = str(analysis.get("next_command") or "")
        prog = invoked_as()
        if nxt.startswith("hangdoctor ") and prog != "hangdoctor":
            # the command to run next, as this shell can run it (no activated venv needed)
            shown = dict(analysis, next_command=prog + nxt[len("hangdoctor"):])
        text = render_terminal(shown, color=use_color, width=width).rstrip("\n")
        if written:
            text += f"\nreport: {written}"
        for p in extra_paths or []:
            text += f"\n{p}"
        # colour=: click would strip our (already decided) colour codes off a pipe
        click.echo(text, err=as_json, color=use_color)


def _exit_code(analysis: dict[str, Any], host_failures: bool) -> int:
    if host_failures:
        return EXIT_NO_COLLECT
    return VERDICT_EXIT.get(analysis.get("verdict", "inconclusive"), EXIT_INCONCLUSIVE)


# ------------------------------------------------------------------ diagnose

# Target handling lives here, in one place: the hosts and pids asked for (_plan), what can be
# refused before any collection starts (_preflight), then the collection itself (_collect).
REPORT_SUFFIXES = (".html", ".htm", ".md", ".markdown", ".json")  # render.FORMATS' keys


def _plan(hosts: list[str], pids: list[str], hosts_file: str | None,
          opts: dict[str, Any]) -> tuple[list[Any], dict[str, list[int]]]:
    """The targets to collect from (hosts, containers, pods, --via pipes, a launcher's nodes),
    and the root pids asked for on each (empty: discover)."""
    from hangdoctor.target import expand_targets, launchers, multi

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
    from hangdoctor.target.multi import LOCAL_NAMES

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
        log = opts.get("log")
        # Only a path that is not there: a FIFO or a device is the probe's to refuse (it
        # never opens one), with the rest of the evidence collected.
        if log and _log_missing(log):
            raise UsageError(f"--log {log} does not exist on {t.name}", "give the server's log file")


def _log_missing(path: str, timeout_s: float = 2.0) -> bool:
    """Whether the log path is surely not there. Asked of a disposable child: a path on a hung
    FUSE or NFS mount puts whoever stats it in D state for good, and this process must exit by
    its deadline. A child that does not answer in time leaves the question to the probe."""
    from hangdoctor.collect.sources import LogRead

    res = LogRead([path], given=True, tail=False).result(timeout_s)
    err = str(res.get("error") or "")
    return not res.get("timeout") and "No such file" in err


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


def check_report_path(path: str | None, fmt: str | None, option: str = "-o") -> None:
    """Refuse, before collecting, a report path that could not be written."""
    if not path or path == "-":
        return
    suffix = os.path.splitext(path)[1].lower()
    if not fmt and suffix not in REPORT_SUFFIXES:
        raise UsageError(f"{option} {path}: unknown report format {suffix or '(no suffix)'!r}",
                         "use a name ending in .html, .md or .json, or add --format")
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a folder", "give a file name, e.g. report.html")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: folder {parent} does not exist", "create it, or give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: folder {parent} is not writable", "give a writable path")


def _collect(targets: list[Any], by_host: dict[str, list[int]], opts: dict[str, Any],
             all_started: Any = None) -> list[Any]:
    import asyncio

    from hangdoctor.collect.config import ProbeConfig
    from hangdoctor.target import multi

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


def _check_window(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if 0 < value < 0.2:
        raise click.BadParameter("give 0 (one sample) or at least 0.2 seconds", ctx=ctx, param=param)
    return value


def _diagnose_options(f: Any) -> Any:
    opts = [
        click.option("--pid", "pids", multiple=True, metavar="PID", help="root PID of the server (repeat; HOST:PID with several hosts); default: find the servers"),
        click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False), help="file of hosts, one a line (optional pid=1,2 after the host); or slurm:JOBID, slurm+ssh:JOBID, k8s:[NS/]SELECTOR"),
        click.option("--via", multiple=True, metavar="COMMAND", help="run the probe through this command, e.g. 'podman exec -i NAME', 'nsenter -t PID -a' (repeat)"),
        click.option("--context", default=None, help="kubectl context for k8s: targets"),
        click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None, help="kubeconfig for k8s: targets"),
        click.option("--port", type=int, multiple=True, metavar="PORT",
                     help="the server's API port: without --pid, the process listening on it is the one diagnosed; also probed over HTTP"),
        click.option("--log", type=str, default=None, metavar="FILE", help="the server's log file (on the target host)"),
        click.option("--window", type=click.FloatRange(0, 600), default=2.0, show_default=True, callback=_check_window,
                     help="sampling window in seconds (0.2 or more); 0: one sample, no window: faster, but progress cannot be seen"),
        click.option("--deadline", type=click.FloatRange(5, 3600), default=45.0, show_default=True, help="hard limit for the whole collection, in seconds"),
        click.option("--native", is_flag=True, help="py-spy --native (C/CUDA frames; ~0.5 s per torch process)"),
        click.option("--locals", is_flag=True, help="py-spy --locals (redacted; may still show prompts)"),
        click.option("--sudo", is_flag=True, help="run py-spy through sudo -n on the target"),
        click.option("--no-gpu", is_flag=True, help="do not query NVML"),
        click.option("--no-nccl-ras", is_flag=True, help="do not query NCCL RAS (read-only; on by default when a process loaded NCCL)"),
        click.option("--fr-dump", is_flag=True, help="ask each NCCL rank to dump its Flight Recorder (writes to TORCH_NCCL_DEBUG_INFO_PIPE_FILE; opt-in)"),
        click.option("--no-redact", is_flag=True, help="keep secrets in the output: for private use only"),
        click.option("-i", "--identity", multiple=True, type=click.Path(), help="SSH private key (repeat)"),
        click.option("--ssh-option", multiple=True, help="SSH option as Key=Value (e.g. Port=2222, User=ops)"),
        click.option("--ssh-config", type=click.Path(dir_okay=False), default=None, help="OpenSSH client config (default ~/.ssh/config)"),
        click.option("--known-hosts", type=click.Path(dir_okay=False), default=None, help="known_hosts file (default ~/.ssh/known_hosts)"),
        # issue 13: engine progress
        click.option("--probe-generate", is_flag=True,
                     help="send one 1-token completion after the window (model from /v1/models); off by default"),
        click.option("--api-key", envvar="HANGDOCTOR_API_KEY", default=None, show_envvar=True,
                     help="API key for --probe-generate (never written to reports)"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


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
                         enabled=not kw.get("quiet") and _stream_is_tty(sys.stderr))
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
    from hangdoctor.target import collection_warnings

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


def _given_source_failed(results: list[Any], kw: dict[str, Any]) -> bool:
    """A --log that does not exist on a host (found out there, after collection): exit 4, as
    for a source that could not be collected; the summary says which and why. A log that is
    there but could not be read whole (rotated into a FIFO mid-window) keeps the verdict's code."""
    if not kw.get("log"):
        return False
    return any(isinstance(m, dict) and m.get("source") == "log" and m.get("status") == "failed"
               and "No such file" in str(m.get("detail") or "")
               for r in results for m in (r.snapshot or {}).get("manifest") or [])


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


def _save_snapshots(path: str, results: list[Any], derived: bool = False) -> None:
    snaps = [r.snapshot for r in results if r.snapshot is not None]
    doc: Any = snaps[0] if len(snaps) == 1 else {"schema_version": 1, "hosts": snaps}
    from hangdoctor.snapshot.io import write_snapshot_file

    try:
        write_snapshot_file(path, doc, derived=derived)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", "choose a writable path") from None


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("hosts", nargs=-1)
@_diagnose_options
@_output_options
@click.option("--save-snapshot", type=click.Path(dir_okay=False), default=None,
              help="save the raw snapshot JSON here (default: next to -o as NAME.snapshot.json)")
def diagnose(hosts: tuple[str, ...], **kw: Any) -> None:
    """Diagnose the inference server(s) on HOST: localhost, [user@]host[:port], an ssh alias,
    docker:NAME or k8s:[NAMESPACE/]POD[/CONTAINER]."""
    if not hosts and not kw.get("hosts_file") and not kw.get("via"):
        raise UsageError("no host given", "hangdoctor diagnose localhost --pid PID")
    # Every path is checked before the window starts, not after it.
    check_report_path(kw.get("output"), kw.get("fmt"))
    snap_path = kw.get("save_snapshot")
    derived = False
    from hangdoctor.outfile import companions_ok

    if not snap_path and kw.get("output") and companions_ok(kw["output"]):
        out = Path(kw["output"])
        snap_path = str(out.with_name(out.stem + ".snapshot.json"))
        derived = True  # a predictable name: never written through a symlink planted there
    if snap_path:
        check_report_path(snap_path, "json", "--save-snapshot" if kw.get("save_snapshot") else
                          f"-o {kw.get('output')}: the snapshot saved next to it,")
    analysis, results, wall_s = _run_diagnosis(hosts, kw)
    analysis["wall_s"] = round(wall_s, 3)
    extra = []
    if snap_path and any(r.snapshot for r in results):
        try:
            _save_snapshots(snap_path, results, derived)
            extra.append(f"snapshot: {snap_path}")
        except UsageError as exc:
            if not derived:
                raise
            _err(f"hangdoctor: warning: snapshot not saved: {exc.one_line()}")  # the report still is
    _emit(analysis, kw.get("output"), kw.get("fmt"), kw.get("as_json", False), kw.get("quiet", False), extra,
          wide=kw.get("wide", False), color=kw.get("color") or "auto")
    failures = any(r.error for r in results) or _given_source_failed(results, kw)
    sys.exit(_exit_code(analysis, failures))


# ------------------------------------------------------------------ analyze / report

MAX_BUNDLE_MEMBER_BYTES = 512 << 20
MAX_DIR_FILES = 500


def _bundle_documents(path: str) -> dict[str, str] | None:
    """The snapshot.json / analysis.json of a snapshot bundle (a folder, or a tar archive
    read in memory: nothing is extracted), keyed by name; None when ``path`` is no bundle."""
    import tarfile

    names = ("snapshot.json", "analysis.json")
    if os.path.isdir(path):
        found = {n: os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))}
        if not found:
            return None
        out = {}
        for n, full in found.items():
            try:
                out[n] = Path(full).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise InputError(f"{full}: {exc.strerror or exc}", "check its permissions") from None
        return out
    if not os.path.isfile(path):
        return None
    try:
        if not tarfile.is_tarfile(path):
            return None
        out = {}
        with tarfile.open(path, mode="r:*") as tar:
            for member in tar:
                parts = member.name.strip("/").split("/")
                # the bundle's files sit at the top or in its one top-level folder
                if not member.isfile() or len(parts) > 2 or parts[-1] not in names:
                    continue
                if member.size > MAX_BUNDLE_MEMBER_BYTES:
                    raise InputError(f"{path}: {member.name} is {member.size >> 20} MiB", "too large to read")
                handle = tar.extractfile(member)
                if handle is not None:
                    out.setdefault(parts[-1], handle.read().decode("utf-8", "replace"))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable archive ({exc})", "give the bundle hangdoctor snapshot wrote") from None
    if not out:
        raise InputError(f"{path} is an archive without snapshot.json or analysis.json",
                         "give a bundle written by hangdoctor snapshot")
    return out


def _expand_inputs(paths: tuple[str, ...]) -> list[str]:
    """A folder that is not a bundle stands for the files in it (as `pytest DIR` does)."""
    out: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p) and _bundle_documents(p) is None:
            files = sorted(os.path.join(d, f) for d, subdirs, names in os.walk(p)
                           for f in names if not f.startswith("."))
            if not files:
                raise InputError(f"{p} is an empty folder", "give the evidence files")
            out += files[:MAX_DIR_FILES]
        else:
            out.append(p)
    return out


def _looks_binary(text: str) -> bool:
    """Bytes that are no text: an ELF, an archive, random data (read_input has already
    dropped NULs and replaced undecodable bytes with U+FFFD)."""
    head = text[:65536]
    if not head or head.startswith(("\x7fELF", "PK\x03\x04", "\x1f\ufffd")):
        return bool(head)
    odd = sum(1 for ch in head if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\f\x1b"))
    return odd > 0.05 * len(head)


def _read_documents(
    paths: tuple[str, ...], redact: bool = True,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[str], dict[str, str]]:
    """Split inputs into saved snapshots, raw text evidence, and inputs with nothing to read;
    and map the name each text got to the path as typed (for messages)."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.snapshot.io import load_snapshot_text, read_snapshot_file

    snapshots: list[dict[str, Any]] = []
    texts: list[tuple[str, str]] = []
    unrecognised: list[str] = []
    typed: dict[str, str] = {}
    for p in _expand_inputs(paths):
        bundle = _bundle_documents(p) if p != "-" else None
        if bundle is not None:
            if "snapshot.json" not in bundle:
                raise InputError(f"{p} is a bundle without a snapshot (nothing was collected)",
                                 f"its analysis: hangdoctor report {p}")
            snapshots.extend(load_snapshot_text(bundle["snapshot.json"], f"{p}:snapshot.json", redact=redact))
            continue
        try:
            whole = read_snapshot_file(p) if p != "-" else None  # our own documents: whole
            name, text = (p, whole) if whole is not None else read_input(p)
            typed[name] = p
        except HangdoctorError:
            raise
        except Exception as exc:  # the parser's own InputError may not subclass ours
            raise InputError(f"{p}: {exc}", "give a readable text file, or - for standard input") from None
        kind = sniff_json_document(text)
        if kind == "snapshot":
            snapshots.extend(load_snapshot_text(text, name, redact=redact))
        elif kind == "analysis":
            raise InputError(f"{name} is an analysis, not evidence", f"use: hangdoctor report {p}")
        elif not str(text).strip() or _looks_binary(str(text)):
            unrecognised.append(p if p != "-" else name)
        else:
            texts.append((name, text))
    return snapshots, texts, unrecognised, typed


_WHAT_IS_READ = ("give py-spy dumps, faulthandler dumps, tracebacks, server / NCCL logs, dmesg, "
                 "nvidia-smi, ps or env output, a saved snapshot or a snapshot bundle")


_NO_REDACT_ON_LOAD = click.option(
    "--no-redact", is_flag=True,
    help="keep the secrets of a snapshot taken with --no-redact: for private use only")


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("evidence", nargs=-1, required=True)
@_output_options
@_NO_REDACT_ON_LOAD
def analyze(evidence: tuple[str, ...], output: str | None, fmt: str | None, as_json: bool,
            checks_dirs: tuple[str, ...], quiet: bool, wide: bool, color: str,
            no_redact: bool = False) -> None:
    """Analyse saved snapshots, snapshot bundles (NAME.tar.gz or the folder) or raw evidence
    pasted in a ticket (py-spy dumps, logs, dmesg, nvidia-smi, ps, env): any mix, any file
    names; a folder stands for its files; - reads standard input."""
    from hangdoctor.snapshot.io import mark_unredacted
    from hangdoctor.triage.analyze import analyze as run_analysis

    check_report_path(output, fmt)
    checks = _load_checks(checks_dirs)
    snapshots, texts, unrecognised, typed = _read_documents(evidence, redact=not no_redact)
    if texts:
        from hangdoctor.parsers.assemble import analyze_inputs

        pasted = analyze_inputs(texts)
        entries = {e.get("source"): e for e in pasted.get("pasted") or [] if isinstance(e, dict)}
        empty = [n for n, _t in texts if n in entries and not entries[n].get("kinds")]
        unrecognised += [typed.get(n, n) for n in empty]
        if len(empty) < len(texts):
            snapshots.append(pasted)
    if unrecognised and not snapshots:
        raise InputError(f"nothing recognised in {', '.join(unrecognised)}", _WHAT_IS_READ)
    for name in unrecognised:
        _err(f"hangdoctor: warning: nothing recognised in {name}; left out")
    analysis = run_analysis(snapshots, checks, command=_command_line())
    mark_unredacted(analysis, snapshots)
    _emit(analysis, output, fmt, as_json, quiet, wide=wide, color=color)
    sys.exit(_exit_code(analysis, False))


@main.command(epilog="Without -o: Markdown on stdout (--format json: JSON; --format html: NAME.html).")
@click.argument("document")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="report file; the format follows the suffix (.html, .md, .json); - for stdout")
@click.option("--format", "fmt", type=click.Choice(["html", "json", "md"]), default=None,
              help="report format when -o's suffix does not say, or for stdout")
@click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False),
              help="also load the checks in this folder (when DOCUMENT is a snapshot)")
@_NO_REDACT_ON_LOAD
def report(document: str, output: str | None, fmt: str | None, checks_dirs: tuple[str, ...],
           no_redact: bool = False) -> None:
    """Re-render a saved analysis, a snapshot or a snapshot bundle (NAME.tar.gz or its
    folder) without the host. Without -o the report goes to stdout, as Markdown."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.report.render import render_json, render_markdown, write_report
    from hangdoctor.snapshot import io as snapshot_io
    from hangdoctor.triage.analyze import analyze as run_analysis

    check_report_path(output, fmt)
    bundle = _bundle_documents(document) if document != "-" else None
    if bundle is not None:
        # the bundle's analysis is what was concluded at the time; re-analyse only without it
        kind, text = ("analysis", bundle["analysis.json"]) if "analysis.json" in bundle \
            else ("snapshot", bundle["snapshot.json"])
        name = document
    else:
        whole = snapshot_io.read_snapshot_file(document) if document != "-" else None
        name, text = (document, whole) if whole is not None else read_input(document)
        kind = sniff_json_document(text)
    if kind == "analysis":
        analysis = json.loads(text)
        if not no_redact:
            analysis = snapshot_io.redact_loaded_analysis(analysis)
    elif kind == "snapshot":
        snaps = snapshot_io.load_snapshot_text(text, name, redact=not no_redact)
        analysis = run_analysis(snaps, _load_checks(checks_dirs), command=_command_line())
        snapshot_io.mark_unredacted(analysis, snaps)
    else:
        raise InputError(f"{name} is neither a hangdoctor analysis, a snapshot nor a bundle",
                         f"for raw evidence use: hangdoctor analyze {document}")
    if not output or output == "-":
        if fmt == "html" and not output:
            stem = os.path.basename(document.rstrip("/")) if document != "-" else "report"
            for suffix in (".tar.gz", ".tgz", ".json"):
                if stem.endswith(suffix):
                    stem = stem[: -len(suffix)]
            output = f"{stem or 'report'}.html"
        else:
            body = render_json(analysis) if fmt == "json" else render_markdown(analysis)
            sys.stdout.write(body if body.endswith("\n") else body + "\n")
            return
    try:
        used = write_report(analysis, output, fmt)
    except ValueError as exc:
        raise UsageError(str(exc), "use -o report.html, report.md or report.json") from None
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}", "choose a writable path") from None
    _err(f"report: {output} ({used})")


# ------------------------------------------------------------------ checks / demo

@main.command("checks")
@click.option("--json", "as_json", is_flag=True, help="as JSON")
@click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False))
def list_checks(as_json: bool, checks_dirs: tuple[str, ...]) -> None:
    """List the checks: id, what they need, the causes they speak to."""
    checks = _load_checks(checks_dirs)
    if as_json:
        click.echo(json.dumps([{"id": c.id, "title": c.title, "needs": c.needs, "causes": c.causes,
                                "module": c.module, "confirm": c.confirm} for c in checks], indent=1))
        return
    width = max(len(c.id) for c in checks)
    for c in checks:
        click.echo(f"{c.id:<{width}}  {c.title}")
        click.echo(f"{'':<{width}}  needs: {', '.join(c.needs) or '-'}; causes: {', '.join(c.causes) or '-'}")


@main.command()
@click.option("-o", "--output", default="hangdoctor-demo.html", show_default=True, type=click.Path(dir_okay=False))
@click.option("--window", type=click.FloatRange(0.2, 60), default=2.0, show_default=True)
@click.option("--workers", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the analysis as JSON on stdout")
@_terminal_options
def demo(output: str, window: float, workers: int, as_json: bool, wide: bool, color: str) -> None:
    """Start a built-in hung server (4 workers deadlocked after loading their weights),
    diagnose it with the real collector, write the report, and stop what was started."""
    import tempfile

    from hangdoctor.scenarios.launch import ScenarioError, start_scenario

    prog = invoked_as()
    _err(f"hangdoctor demo: starting a hung server ({workers} workers deadlock after loading)")
    workdir = tempfile.mkdtemp(prefix="hangdoctor-demo-")
    running = start_scenario("postload", workdir, workers=workers, max_lifetime_s=180)
    try:
        try:
            sc = running.wait_ready(timeout_s=60)
        except ScenarioError as exc:
            raise HangdoctorError(f"the demo server did not start: {exc}", "run the tests to see what is missing") from None
        # one line: what runs, as it can be run again (the worker pids are in the summary)
        _err(f"hangdoctor demo: running: {prog} diagnose localhost --pid {sc.launcher_pid} --log {sc.log} --window {window:g}")
        kw = {"pids": [str(sc.launcher_pid)], "log": sc.log, "window": window, "deadline": 45.0}
        analysis, _results, wall_s = _run_diagnosis(("localhost",), kw)
        analysis["wall_s"] = round(wall_s, 3)
    finally:
        running.stop()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    _emit(analysis, output, None, as_json, False, wide=wide, color=color)
    _err("hangdoctor demo: the demo server was stopped. On a real server run:\n"
         f"  {prog} diagnose localhost --pid <server pid> -o report.html\n"
         f"  {prog} diagnose user@gpu-node --pid <server pid> -o report.html")


# snapshot (pre-kill bundles) and watch live in their own module
from hangdoctor import cli_ops  # noqa: E402

cli_ops.register(main)


def run() -> None:
    """The console entry point: ``main``, then leave without tearing the interpreter down.

    Every command closes what it opened itself (connections, scenario processes, temp dirs),
    so the interpreter's own shutdown only frees modules: ~70 ms with asyncssh and the
    analysis loaded, paid after the answer is out. Tests drive ``main`` through CliRunner.
    """
    try:
        main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        _err(str(code))
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader left (`| head`) or the stream was closed
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()

