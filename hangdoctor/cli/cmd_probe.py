"""``hangdoctor probe``: one cheap check for an exec liveness probe, Node Problem Detector, cron
or a load balancer's script hook. One line on stdout (or ``--json``), the plugin exit codes.

The look is :mod:`hangdoctor.collect.liveness` (no ptrace), the verdict
:mod:`hangdoctor.triage.progress_verdict`; the state between calls is a small JSON file,
replaced atomically, so a probe every 10 s measures progress across calls.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli's shared
modules, never another command module.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from typing import Any

import click

EXIT_UNKNOWN = 3
PROBE_EPILOG = """\b
Exit codes (the Nagios / Node Problem Detector plugin convention):
  0  ok: idle, or work pending and it moves
  1  warning: slow health answer, no answer yet, or work stalling (--warn-after)
  2  critical: work pending and no progress for --after s, no answer for --after s,
     health 5xx, nothing listening, or a --pid process gone
  3  unknown: bad usage, or the state file cannot be used
--critical-only turns 1 and 3 into 0 (a Kubernetes exec liveness probe restarts on any
non-zero code)."""

_TARGET = re.compile(r"^(?:(?P<scheme>https?)://)?(?:(?P<host>\[[^\]]+\]|[^:/\s]+):)?(?P<port>\d{1,5})(?P<path>/\S*)?$")


class _ProbeCommand(click.Command):
    """Usage errors exit 3 (unknown), not click's 2: 2 means critical to the caller."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            exc.exit_code = EXIT_UNKNOWN
            raise


def parse_target(text: str) -> tuple[str, int, str | None]:
    """``PORT``, ``HOST:PORT`` or ``http://HOST:PORT[/health-path]`` -> (host, port, path)."""
    m = _TARGET.match(text.strip())
    port = int(m.group("port")) if m else 0
    if not m or not 0 < port < 65536:
        raise click.BadParameter(
            f"{text!r} is not PORT, HOST:PORT or http://HOST:PORT/PATH", param_hint="TARGET")
    if m.group("scheme") == "https":
        raise click.BadParameter("https is not probed (the probe speaks plain HTTP on the pod's "
                                 "loopback); give the plain port", param_hint="TARGET")
    host = (m.group("host") or "127.0.0.1").strip("[]")
    return ("127.0.0.1" if host == "localhost" else host), port, m.group("path")


def default_state_path(host: str, port: int) -> str:
    """One state file per user and target, in the temporary folder."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", host)
    return os.path.join(tempfile.gettempdir(), f"hangdoctor-probe-{os.getuid()}-{safe}-{port}.json")


def read_state(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the state or None, a problem or None): a missing file is a first call, not a problem."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return None, f"state file {path} unreadable ({getattr(exc, 'strerror', None) or exc}): starting over"
    return (data, None) if isinstance(data, dict) else (None, f"state file {path} is not a state: starting over")


def write_state(path: str, state: dict[str, Any]) -> str | None:
    """Write atomically (a probe killed by its timeout leaves the old file); a problem or None."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".hangdoctor-probe-", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(state, f, separators=(",", ":"))
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        return f"cannot write state file {path}: {exc.strerror or exc}"
    return None


def probe_main(target: str, health_path: str | None, pids: tuple[int, ...], log_path: str | None,
               after_s: float, warn_after_s: float | None, slow_s: float, timeout_s: float,
               state_path: str | None, no_state: bool, no_connections: bool, no_metrics: bool,
               as_json: bool, critical_only: bool) -> int:
    """The probe's exit code; one line (or the JSON document) written to stdout."""
    from hangdoctor.collect import liveness
    from hangdoctor.textsafe import clean_text
    from hangdoctor.triage import progress_verdict

    host, port, url_path = parse_target(target)
    path = health_path if health_path is not None else (url_path or "/health")
    state_file = None if no_state else (state_path or default_state_path(host, port))
    state, problem = (None, None) if state_file is None else read_state(state_file)
    offset = state.get("log_offset") if isinstance(state, dict) else None
    look = liveness.sample(port, host, path or "", timeout_s, list(pids), log_path,
                           offset if isinstance(offset, int) else None, read_metrics=not no_metrics)
    verdict, new_state = progress_verdict.judge(
        look, state, after_s=after_s, warn_after_s=warn_after_s, slow_s=slow_s,
        use_connections=not no_connections)
    write_problem = write_state(state_file, new_state) if state_file is not None else None
    verdict["state_file"] = state_file
    verdict["problems"] = [p for p in (problem, write_problem) if p]
    if write_problem and verdict["status"] == progress_verdict.OK:
        # without a state file no progress can be measured across calls: say so (a state
        # file that could not be read was replaced: that call is a first look, nothing more)
        verdict.update(status=progress_verdict.UNKNOWN, exit_code=EXIT_UNKNOWN,
                       summary=f"UNKNOWN {verdict['state']}: {write_problem}")
    if as_json:
        sys.stdout.write(json.dumps(verdict, sort_keys=True) + "\n")
    else:
        sys.stdout.write(clean_text(verdict["summary"]) + "\n")
    sys.stdout.flush()
    code = int(verdict["exit_code"])
    if critical_only and code != 2:
        return 0
    return code


@click.command("probe", cls=_ProbeCommand, epilog=PROBE_EPILOG)
@click.argument("target")
@click.option("--health-path", default=None, metavar="PATH",
              help="health path to GET (default /health, or the URL's path); '' for none")
@click.option("--pid", "pids", type=click.IntRange(1), multiple=True,
              help="a server process to watch (its children too): gone is critical; repeat for several")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None,
              help="the server's log: new lines other than health checks count as progress "
                   "for a server without engine counters")
@click.option("--after", "after_s", type=click.FloatRange(0, 86400), default=60.0, show_default=True,
              help="critical when work has been pending with no progress this long (seconds)")
@click.option("--warn-after", "warn_after_s", type=click.FloatRange(0, 86400), default=None,
              help="warning when work has been pending with no progress this long [default: --after / 2]")
@click.option("--slow", "slow_s", type=click.FloatRange(0.001, 3600), default=1.0, show_default=True,
              help="warning when the health answer takes longer (seconds)")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.05, 60), default=2.0, show_default=True,
              help="budget for each HTTP exchange (seconds); no answer within it is "
                   "not-answering, a warning until --after")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), default=None,
              help="state file kept between calls [default: $TMPDIR/hangdoctor-probe-UID-HOST-PORT.json]")
@click.option("--no-state", is_flag=True, help="keep no state: one look, no progress across calls")
@click.option("--no-connections", is_flag=True,
              help="do not count client connections as pending work (clients that keep idle "
                   "keep-alive connections open)")
@click.option("--no-metrics", is_flag=True, help="do not GET /metrics")
@click.option("--json", "as_json", is_flag=True, help="the verdict as one JSON document (probe.schema.json)")
@click.option("--critical-only", is_flag=True, help="exit 0 unless critical (for Kubernetes exec probes)")
def probe(**kw: Any) -> None:
    """One cheap liveness check of an inference server on this host: is work pending, and has it
    progressed since the last call? No ptrace, no stop of the server; well under a second.

    \b
    TARGET is PORT, HOST:PORT or http://HOST:PORT/health.
      hangdoctor probe 8000                  # vLLM on 127.0.0.1:8000
      hangdoctor probe 8000 --after 120 --critical-only   # a Kubernetes liveness probe
    """
    try:
        code = probe_main(**kw)
    except click.UsageError as exc:
        exc.exit_code = EXIT_UNKNOWN  # 2 would read as critical
        raise
    sys.exit(code)
