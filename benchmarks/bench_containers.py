"""How long a diagnosis takes in a container against on the host, per hung scenario.

    python benchmarks/bench_containers.py                 # 5 runs, --window 2
    python benchmarks/bench_containers.py --runs 3 --window 0 --scenarios postload

For each scenario (postload with 4 workers, gloo desync, healthy with 2 workers, compile with 2
workers) it starts the same server three ways and times ``python -m hangdoctor diagnose ...
--json -q --save-snapshot F`` as a subprocess, from spawning it to reaping it:

- **host**: the server runs on the host; ``diagnose localhost --pid LAUNCHER``
- **docker:**: the server runs in a container (tests/docker_tools.py: the host's Python in its
  own namespaces, no py-spy inside, Docker's default capabilities); ``diagnose docker:NAME``
  (docker exec, the probe and py-spy over the pipe, docker inspect, docker logs)
- **from the host**: the same container; ``diagnose localhost --pid HOST_PID_OF_ITS_INIT``
- **docker:, py-spy inside**: a second container with this checkout's py-spy mounted at
  /opt/py-spy (on its PATH), so nothing is sent: the cost of sending py-spy is the difference

The three are measured one after another within each run (this machine is shared and noisy);
each figure is the median of the runs, and the differences are medians of per-run differences.
Needs root and a Docker engine (started and stopped here when none answers). Writes the table
to stdout and, with --out, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from docker_tools import CONTAINER_PYTHON, start_engine, wait_file  # noqa: E402

from hangdoctor.scenarios.launch import scenario_argv, start_scenario  # noqa: E402

SCENARIOS = {
    "postload": {"workers": 4},
    "gloo_desync": {},
    "healthy": {"workers": 2},
    "compile": {"workers": 2},
}


def log(msg: str) -> None:
    print(f"bench_containers: {msg}", file=sys.stderr, flush=True)


def timed_diagnose(args: list[str], env: dict[str, str], work: Path) -> tuple[float, dict]:
    snap = work / f"snap-{time.monotonic_ns()}.json"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hangdoctor", "diagnose", *args, "--json", "-q",
                           "--save-snapshot", str(snap)], capture_output=True, text=True,
                          env=env, timeout=120)
    wall = time.monotonic() - t0
    analysis = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return wall, {"verdict": analysis.get("verdict"), "rc": proc.returncode,
                  "top": (analysis.get("causes") or [{}])[0].get("id")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--window", default="2")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--out", default=None, help="also write the figures here as JSON")
    args = ap.parse_args(argv)
    engine = start_engine()
    env = dict(engine.env, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    results = {}
    work = Path(tempfile.mkdtemp(prefix="hd-bench-ctr-"))
    try:
        for name in args.scenarios.split(","):
            options = SCENARIOS[name]
            log(f"{name}: starting it on the host and in a container")
            host = start_scenario(name, str(work / f"host-{name}"), log=True, max_lifetime_s=600,
                                  **options)
            info = host.wait_ready(timeout_s=120)
            cdir = work / f"ctr-{name}"
            cdir.mkdir()
            ready = cdir / "ready.json"
            cname = engine.run(scenario_argv(name, str(ready), log="/dev/stdout",
                                             max_lifetime_s=600, python=CONTAINER_PYTHON,
                                             **options),
                               workdir=str(cdir), network="host" if name == "healthy" else "none")
            wait_file(ready, 120, engine, cname)
            pyspy = Path(sys.executable).parent / "py-spy"
            ready2 = cdir / "ready2.json"
            cname2 = engine.run(scenario_argv(name, str(ready2), log="/dev/stdout",
                                              max_lifetime_s=600, python=CONTAINER_PYTHON,
                                              **options),
                                workdir=str(cdir), network="host" if name == "healthy" else "none",
                                mounts=(f"{pyspy.resolve()}:/opt/py-spy/py-spy:ro",),
                                env={"PATH": "/opt/py-spy:/usr/local/bin:/usr/bin:/bin"})
            wait_file(ready2, 120, engine, cname2)
            host_pid = str(engine.inspect(cname)["State"]["Pid"])
            if name == "compile":
                time.sleep(0.5)
            ways = {
                "host": ["localhost", "--pid", str(info.launcher_pid), "--log", str(info.log)],
                "docker": [f"docker:{cname}"],
                "from-host": ["localhost", "--pid", host_pid],
                "docker-pyspy": [f"docker:{cname2}"],
            }
            walls: dict[str, list[float]] = {k: [] for k in ways}
            outcome: dict[str, dict] = {}
            try:
                for run in range(args.runs):
                    for way, target in ways.items():
                        wall, out = timed_diagnose([*target, "--window", args.window], env, work)
                        walls[way].append(wall)
                        outcome[way] = out
                    log(f"{name} run {run + 1}: " + ", ".join(
                        f"{w} {walls[w][-1]:.2f} s" for w in ways))
            finally:
                host.stop()
                engine.docker("rm", "-f", cname, cname2, check=False)
            diffs = {w: statistics.median(b - a for a, b in zip(walls["host"], walls[w]))
                     for w in ("docker", "from-host", "docker-pyspy")}
            results[name] = {"wall_s": {w: statistics.median(v) for w, v in walls.items()},
                             "min_s": {w: min(v) for w, v in walls.items()},
                             "minus_host_s": diffs, "outcome": outcome, "runs": walls}
    finally:
        engine.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n--window {args.window}, median (min) of {args.runs} runs, wall time of the CLI\n")
    print("| scenario | host | docker:NAME | docker:, py-spy inside | from the host by PID | "
          "docker: − host | py-spy inside − host | by PID − host | verdicts |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ways = ("host", "docker", "docker-pyspy", "from-host")
    for name, r in results.items():
        w, m, d, o = r["wall_s"], r["min_s"], r["minus_host_s"], r["outcome"]
        cells = " | ".join(f"{w[k]:.2f} s ({m[k]:.2f})" for k in ways)
        verdicts = " / ".join(str(o[k]["verdict"]) for k in ways)
        print(f"| {name} | {cells} | {d['docker']:+.2f} s | {d['docker-pyspy']:+.2f} s | "
              f"{d['from-host']:+.2f} s | {verdicts} |")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
