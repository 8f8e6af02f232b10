"""SSH against local: wall time of `hangdoctor diagnose --window 2 --json` on the demo's hung
server with 8 workers, here and over a loopback sshd (the test suite's, tests/sshd_fixture.py):
py-spy on the remote PATH; none there, so uploaded; none there but kept from the run before
(the per-user cache, under this run's own folder). Each round runs the four one after the other;
medians of N rounds (``python benchmarks/bench_ssh_overhead.py N``, default 5), and the load
average at the end, since this machine is shared.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hangdoctor.scenarios.launch import start_scenario  # noqa: E402
from tests.sshd_fixture import start_sshd, stop_sshd  # noqa: E402
from tests.sshd_tools import free_port, start_sshd_process, wait_for_banner  # noqa: E402


def main(rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="hd-bench-ssh-"))
    sshd, srv = start_sshd(work)
    # a second sshd whose sessions have no py-spy on PATH and keep their cache in `work`
    port2 = free_port()
    cfg = (work / "sshd_config").read_text()
    cfg = re.sub(r"(?m)^Port \d+", f"Port {port2}", cfg)
    cfg = re.sub(r"(?m)^SetEnv PATH=.*$", f"SetEnv PATH=/usr/bin:/bin XDG_CACHE_HOME={work}/cache", cfg)
    cfg = re.sub(r"(?m)^PidFile .*$", f"PidFile {work}/sshd2.pid", cfg)
    (work / "sshd_config2").write_text(cfg)
    bare = start_sshd_process(work / "sshd_config2", work / "sshd2.log")
    wait_for_banner(port2, bare, timeout_s=15)
    bare_config = work / "ssh_config_bare"
    bare_config.write_text(Path(srv.ssh_config).read_text().replace(f"Port {srv.port}", f"Port {port2}", 1))
    known = work / "known_hosts"
    known.write_text(known.read_text() + f"[127.0.0.1]:{port2} {srv.host_key_pub}\n")
    cache = work / "cache" / "hangdoctor"
    scenario = start_scenario("postload", str(work / "sc"), workers=8, max_lifetime_s=900)
    pid = scenario.wait_ready(timeout_s=120).launcher_pid
    cli = [str(Path(sys.executable).parent / "hangdoctor"), "diagnose"]

    def timed(target: list[str]) -> float:
        t0 = time.monotonic()
        subprocess.run(cli + target + ["--pid", str(pid), "--window", "2", "--json", "-q"],
                       capture_output=True, timeout=300, check=False)  # fmt: skip
        return time.monotonic() - t0

    rows: dict[str, list[float]] = {"local": [], "ssh": [], "ssh, py-spy uploaded": [], "ssh, py-spy kept": []}
    try:
        for _ in range(rounds):
            rows["local"].append(timed(["localhost"]))
            rows["ssh"].append(timed([srv.alias, "--ssh-config", srv.ssh_config]))
            shutil.rmtree(cache, ignore_errors=True)
            rows["ssh, py-spy uploaded"].append(timed([srv.alias, "--ssh-config", str(bare_config)]))
            rows["ssh, py-spy kept"].append(timed([srv.alias, "--ssh-config", str(bare_config)]))
    finally:
        scenario.stop()
        stop_sshd(sshd)
        stop_sshd(bare)
        shutil.rmtree(work, ignore_errors=True)
    local = statistics.median(rows["local"])
    print("| run | median wall (s) | over local (s) | all (s) |\n|---|---|---|---|")
    for name, values in rows.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.2f} | {med - local:+.2f} | {' '.join(f'{v:.2f}' for v in values)} |")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
