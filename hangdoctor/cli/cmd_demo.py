"""``hangdoctor demo``: a real diagnosis of a built-in hung server, started and stopped here.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules (options, diagnosis), never another command module.
"""

from __future__ import annotations

import click

from hangdoctor.cli.diagnosis import _run_diagnosis, deadline_for_window
from hangdoctor.cli.options import _emit, _err, _terminal_options, check_report_path, invoked_as
from hangdoctor.errors import HangdoctorError


@click.command("demo")
@click.option("-o", "--output", default="hangdoctor-demo.html", show_default=True, type=click.Path())
@click.option("--window", type=click.FloatRange(0.2, 60), default=2.0, show_default=True)
@click.option("--workers", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the analysis as JSON on stdout")
@_terminal_options
def demo(output: str, window: float, workers: int, as_json: bool, wide: bool, color: str) -> None:
    """Start a built-in hung server (4 workers deadlocked after loading their weights),
    diagnose it with the real collector, write the report, and stop what was started."""
    import tempfile

    from hangdoctor.scenarios.launch import ScenarioError, start_scenario

    check_report_path(output, None)  # before a server is started for nothing
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
        kw = {"pids": [str(sc.launcher_pid)], "log": sc.log, "window": window,
              "deadline": max(45.0, deadline_for_window(window))}  # the whole window, always
        analysis, _results, wall_s = _run_diagnosis(("localhost",), kw)
        analysis["wall_s"] = round(wall_s, 3)
        # the demo server is stopped below: the next command is for the user's own server
        nxt = str(analysis.get("next_command") or "")
        analysis["next_command"] = nxt.replace(f"--pid {sc.launcher_pid}", "--pid PID") or None
    finally:
        running.stop()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    _emit(analysis, output, None, as_json, False, wide=wide, color=color)
    _err("hangdoctor demo: the demo server was stopped. On a real server run:\n"
         f"  {prog} diagnose localhost --pid <server pid> -o report.html\n"
         f"  {prog} diagnose user@gpu-node --pid <server pid> -o report.html")
