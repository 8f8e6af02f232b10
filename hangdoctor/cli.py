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
    click.echo(msg, err=True)


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
    return f


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
          extra_paths: list[str] | None = None) -> None:
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
        text = render_terminal(analysis, color=sys.stderr.isatty())
        if written:
            text += f"\nreport: {written}"
        for p in extra_paths or []:
            text += f"\n{p}"
        click.echo(text, err=as_json)


def _exit_code(analysis: dict[str, Any], host_failures: bool) -> int:
    if host_failures:
        return EXIT_NO_COLLECT
    return VERDICT_EXIT.get(analysis.get("verdict", "inconclusive"), EXIT_INCONCLUSIVE)


# ------------------------------------------------------------------ diagnose

def _collect(hosts: list[str], pids: list[str], hosts_file: str | None, opts: dict[str, Any],
             all_started: Any = None) -> list[Any]:
    import asyncio

    from hangdoctor.collect.config import ProbeConfig
    from hangdoctor.target import multi

    hosts = list(hosts)
    pids = list(pids)
    if hosts_file:
        try:
            hosts += multi.read_hosts_file(hosts_file)
            pids += multi.hosts_file_pid_args(hosts_file)
        except OSError as exc:
            raise UsageError(f"--hosts {hosts_file}: {exc.strerror or exc}", "give a readable file, one host a line") from None
    if not hosts:
        raise UsageError("no host given", "hangdoctor diagnose localhost --pid PID (or a [user@]host)")
    seen: list[str] = []
    for h in hosts:
        if h not in seen:
            seen.append(h)
    hosts = seen
    by_host = multi.parse_pid_args(pids, hosts)
    ssh_kwargs: dict[str, Any] = {}
    if opts.get("identity"):
        ssh_kwargs["identity"] = list(opts["identity"])
    if opts.get("ssh_option"):
        ssh_kwargs["ssh_options"] = list(opts["ssh_option"])
    if opts.get("known_hosts"):
        ssh_kwargs["known_hosts"] = opts["known_hosts"]
    if opts.get("ssh_config"):
        ssh_kwargs["config_path"] = opts["ssh_config"]
    targets = [multi.parse_host_spec(h, **ssh_kwargs) for h in hosts]

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
            host_name=t.name,
            # issue 13: the opt-in canary; the key only ever goes in its request header
            probe_generate=bool(opts.get("probe_generate")),
            api_key=opts.get("api_key") or None,
        )

    return asyncio.run(multi.collect_all(targets, config_for, opts["deadline"], all_started))


def _check_window(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if 0 < value < 0.2:
        raise click.BadParameter("give 0 (one sample) or at least 0.2 seconds", ctx=ctx, param=param)
    return value


def _diagnose_options(f: Any) -> Any:
    opts = [
        click.option("--pid", "pids", multiple=True, help="root PID of the server (repeat; HOST:PID with several hosts); default: find the servers"),
        click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False), help="file of hosts, one a line (optional pid=1,2 after the host)"),
        click.option("--port", type=int, multiple=True, help="also probe this TCP port over HTTP"),
        click.option("--log", type=str, default=None, help="the server's log file (on the target host)"),
        click.option("--window", type=click.FloatRange(0, 600), default=2.0, show_default=True, callback=_check_window,
                     help="sampling window in seconds (0.2 or more); 0: one sample, no window: faster, but progress cannot be seen"),
        click.option("--deadline", type=click.FloatRange(5, 3600), default=45.0, show_default=True, help="hard limit for the whole collection, in seconds"),
        click.option("--native", is_flag=True, help="py-spy --native (C/CUDA frames; ~0.5 s per torch process)"),
        click.option("--locals", is_flag=True, help="py-spy --locals (redacted; may still show prompts)"),
        click.option("--sudo", is_flag=True, help="run py-spy through sudo -n on the target"),
        click.option("--no-gpu", is_flag=True, help="do not query NVML"),
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

    def warm_up() -> None:
        # Start once every probe runs (not during imports, SSH handshakes or the first /proc
        # walk), and let a local probe take its first sample before competing for the GIL.
        probes_started.wait(float(kw.get("deadline") or 45.0))
        # At the lowest CPU priority: this work can wait, and on the diagnosed host the server
        # and the probe's py-spy dumps must not share their CPUs with it.
        with contextlib.suppress(AttributeError, OSError):
            warm["tid"] = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, warm["tid"], 19)
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

    warmer = threading.Thread(target=warm_up, name="hd-warm-up", daemon=True)
    warmer.start()
    results = _collect(list(hosts), list(kw.get("pids") or []), kw.get("hosts_file"), kw, probes_started)
    if warmer.is_alive() and "tid" in warm:
        # issue 13: the window is over and the warm-up is now what we wait for; at nice 19 on
        # a saturated host (a vLLM under load) it took seconds. Back to our own priority
        # (root may; elsewhere the kernel refuses and it stays where it was).
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, warm["tid"], os.getpriority(os.PRIO_PROCESS, 0))
    warmer.join()
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


def _save_snapshots(path: str, results: list[Any]) -> None:
    snaps = [r.snapshot for r in results if r.snapshot is not None]
    doc: Any = snaps[0] if len(snaps) == 1 else {"schema_version": 1, "hosts": snaps}
    try:
        Path(path).write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", "choose a writable path") from None


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("hosts", nargs=-1)
@_diagnose_options
@_output_options
@click.option("--save-snapshot", type=click.Path(dir_okay=False), default=None,
              help="save the raw snapshot JSON here (default: next to -o as NAME.snapshot.json)")
def diagnose(hosts: tuple[str, ...], **kw: Any) -> None:
    """Diagnose the inference server(s) on HOST: localhost, [user@]host[:port] or an ssh alias."""
    if not hosts and not kw.get("hosts_file"):
        raise UsageError("no host given", "hangdoctor diagnose localhost --pid PID")
    analysis, results, wall_s = _run_diagnosis(hosts, kw)
    analysis["wall_s"] = round(wall_s, 3)
    extra = []
    snap_path = kw.get("save_snapshot")
    if not snap_path and kw.get("output"):
        out = Path(kw["output"])
        snap_path = str(out.with_name(out.stem + ".snapshot.json"))
    if snap_path and any(r.snapshot for r in results):
        _save_snapshots(snap_path, results)
        extra.append(f"snapshot: {snap_path}")
    _emit(analysis, kw.get("output"), kw.get("fmt"), kw.get("as_json", False), kw.get("quiet", False), extra)
    failures = any(r.error for r in results)
    sys.exit(_exit_code(analysis, failures))


# ------------------------------------------------------------------ analyze / report

def _read_documents(paths: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Split inputs into saved snapshots and raw text evidence."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.snapshot.io import load_snapshot_text

    snapshots: list[dict[str, Any]] = []
    texts: list[tuple[str, str]] = []
    for p in paths:
        try:
            name, text = read_input(p)
        except HangdoctorError:
            raise
        except Exception as exc:  # the parser's own InputError may not subclass ours
            raise InputError(f"{p}: {exc}", "give a readable text file, or - for standard input") from None
        kind = sniff_json_document(text)
        if kind == "snapshot":
            snapshots.extend(load_snapshot_text(text, name))
        elif kind == "analysis":
            raise InputError(f"{name} is an analysis, not evidence", "use: hangdoctor report FILE -o report.html")
        else:
            texts.append((name, text))
    return snapshots, texts


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("evidence", nargs=-1, required=True)
@_output_options
def analyze(evidence: tuple[str, ...], output: str | None, fmt: str | None, as_json: bool,
            checks_dirs: tuple[str, ...], quiet: bool) -> None:
    """Analyse saved snapshots or raw evidence pasted in a ticket (py-spy dumps, logs, dmesg,
    nvidia-smi, ps, env): any mix, any file names; - reads standard input."""
    from hangdoctor.triage.analyze import analyze as run_analysis

    checks = _load_checks(checks_dirs)
    snapshots, texts = _read_documents(evidence)
    if texts:
        from hangdoctor.parsers.assemble import analyze_inputs

        snapshots.append(analyze_inputs(texts))
    analysis = run_analysis(snapshots, checks, command=_command_line())
    _emit(analysis, output, fmt, as_json, quiet)
    sys.exit(_exit_code(analysis, False))


@main.command()
@click.argument("document")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="report file (.html, .md, .json)")
@click.option("--format", "fmt", type=click.Choice(["html", "json", "md"]), default=None)
@click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False))
def report(document: str, output: str, fmt: str | None, checks_dirs: tuple[str, ...]) -> None:
    """Re-render a saved analysis (or analyse a saved snapshot) without the host."""
    from hangdoctor.parsers.assemble import read_input
    from hangdoctor.parsers.detect import sniff_json_document
    from hangdoctor.report.render import write_report
    from hangdoctor.snapshot.io import load_snapshot_text
    from hangdoctor.triage.analyze import analyze as run_analysis

    name, text = read_input(document)
    kind = sniff_json_document(text)
    if kind == "analysis":
        analysis = json.loads(text)
    elif kind == "snapshot":
        analysis = run_analysis(load_snapshot_text(text, name), _load_checks(checks_dirs), command=_command_line())
    else:
        raise InputError(f"{name} is neither a hangdoctor analysis nor a snapshot",
                         "for raw evidence use: hangdoctor analyze FILE -o report.html")
    try:
        used = write_report(analysis, output, fmt)
    except ValueError as exc:
        raise UsageError(str(exc), "use -o report.html, report.md or report.json") from None
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
def demo(output: str, window: float, workers: int, as_json: bool) -> None:
    """Start a built-in hung server (4 workers deadlocked after loading their weights),
    diagnose it with the real collector, write the report, and stop what was started."""
    import tempfile

    from hangdoctor.scenarios.runner import ScenarioError, start_scenario

    _err(f"hangdoctor demo: starting a built-in hung server ({workers} workers, deadlock after loading)...")
    workdir = tempfile.mkdtemp(prefix="hangdoctor-demo-")
    running = start_scenario("postload", workdir, workers=workers, max_lifetime_s=180)
    try:
        try:
            sc = running.wait_ready(timeout_s=60)
        except ScenarioError as exc:
            raise HangdoctorError(f"the demo server did not start: {exc}", "run the tests to see what is missing") from None
        _err(f"hangdoctor demo: server up: launcher pid {sc.launcher_pid}, workers {', '.join(map(str, sc.worker_pids))}, log {sc.log}")
        _err(f"hangdoctor demo: running: hangdoctor diagnose localhost --pid {sc.launcher_pid} --log {sc.log} --window {window}")
        kw = {"pids": [str(sc.launcher_pid)], "log": sc.log, "window": window, "deadline": 45.0}
        analysis, _results, wall_s = _run_diagnosis(("localhost",), kw)
        analysis["wall_s"] = round(wall_s, 3)
    finally:
        running.stop()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    _emit(analysis, output, None, as_json, False)
    _err("hangdoctor demo: the demo server was stopped. On a real server run:\n"
         "  hangdoctor diagnose localhost --pid <server pid> -o report.html\n"
         "  hangdoctor diagnose user@gpu-node --pid <server pid> -o report.html")


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

