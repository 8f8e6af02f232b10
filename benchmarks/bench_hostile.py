"""Peak RSS and wall time of the CLI under every hostile input of the second red-team round.

    python benchmarks/bench_hostile.py                # every case, the table on stdout
    python benchmarks/bench_hostile.py --out r.json   # and the rows as JSON

Each case runs ``python -m hangdoctor ...`` as the only child of a small measuring process,
whose ``RUSAGE_CHILDREN`` maximum RSS is then the CLI's own peak (its own children, such as
the probe's readers and py-spy, are counted separately by the kernel and are small). The budget
is 512 MiB per case; the wall time is set against the deadline where the command has one.

Cases (each the input that the round measured above the budget or past its deadline):

- **exec pipe writes forever** (R03): ``diagnose via:SCRIPT`` whose command writes ``yes`` on
  stdout; before: 5.9 GB at the default deadline.
- **stderr line of 300 KB** (R04): ``diagnose via:SCRIPT --pid P`` whose command prints one long
  stderr line, then runs the probe; before: the snapshot was lost at the deadline.
- **bundle bomb** (R09): ``report`` of a .tar.gz of three dense 80 MB members (< 1 MB packed);
  before (the 48 KB variant): 2.4 GB, 17 s.
- **dense snapshot** (R16's document, through ``report``): 100 MB of ``[]`` values; before:
  2.6 GB decoded whole.
- **nested 900 deep** (R10): ``analyze``; before: exit 1, RecursionError.
- **64 MB of ':@' lines** (L4): ``analyze``; before: 131 s.
- **a large legitimate snapshot** (64 processes x 200 threads x 40 frames, F12's shape,
  written compact as hangdoctor writes it): ``report``: the case the caps must keep working.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BUDGET_MIB = 512

_MEASURE = (
    "import resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
    "                   stderr=subprocess.PIPE)\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write(p.stderr.decode('utf-8', 'replace')[-400:])\n"
    "sys.stderr.write('\\nHD_PEAK_RSS_KIB=%d\\n' % rss)\n"
    "sys.exit(p.returncode)\n"
)


def measure(*args: str, timeout_s: float = 600) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-m", "hangdoctor",
                           *args], capture_output=True, text=True, timeout=timeout_s,
                          cwd=str(REPO))
    wall = time.monotonic() - t0
    err, _, tail = proc.stderr.rpartition("\nHD_PEAK_RSS_KIB=")
    return {"rc": proc.returncode, "wall_s": round(wall, 1),
            "peak_rss_mib": round(int(tail.strip() or 0) / 1024),
            "stderr": err.strip().splitlines()[-1][:160] if err.strip() else ""}


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    path.write_bytes(buf.getvalue())


def _script(d: Path, name: str, body: str) -> Path:
    p = d / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return p


def cases(d: Path) -> list[tuple[str, list[str], float | None]]:
    """(name, CLI arguments, deadline or None)."""
    out: list[tuple[str, list[str], float | None]] = []
    forever = _script(d, "forever.sh", "exec yes " + "A" * 200 + "\n")
    out.append(("R03 exec pipe writes forever",
                ["diagnose", f"via:{forever}", "--no-gpu", "--deadline", "30", "-o",
                 str(d / "r03.md")], 30.0))
    longerr = _script(d, "longerr.sh",
                      "head -c 300000 /dev/zero | tr '\\0' x >&2\necho >&2\nexec \"$@\"\n")
    out.append(("R04 stderr line of 300 KB",
                ["diagnose", f"via:{longerr}", "--pid", "{SLEEPER}", "--window", "0", "--no-gpu",
                 "--deadline", "30", "-o", str(d / "r04.json")], 30.0))
    dense80 = b'{"schema_version":1,"x":[' + b"1," * (40 << 20) + b"1]}"
    bomb = d / "bomb.tar.gz"
    _tar(bomb, [("b/snapshot.json", dense80)] * 3)
    out.append((f"R09 bundle bomb ({bomb.stat().st_size >> 10} KB packed)",
                ["report", str(bomb), "-o", str(d / "r09.md")], None))
    dense = d / "dense.json"
    dense.write_bytes(b'{"schema_version": 1, "x": [' + b"[]," * (33 << 20) + b"[]]}")
    out.append(("R16 100 MB of dense JSON", ["report", str(dense), "-o", str(d / "r16.md")], None))
    doc: dict = {"schema_version": 1}
    cur = doc
    for _ in range(900):
        cur["x"] = {}
        cur = cur["x"]
    deep = d / "deep.json"
    deep.write_text(json.dumps(doc))
    out.append(("R10 nested 900 deep", ["analyze", str(deep), "-o", str(d / "r10.md")], None))
    line = ":@" * 200 + "\n"
    colon = d / "colon.log"
    colon.write_text(line * ((64 << 20) // len(line)))
    out.append(("L4 64 MB of ':@' lines", ["analyze", str(colon), "-o", str(d / "l4.md")], None))
    frame = {"name": "ncclKernel_AllReduce_RING_LL_Sum_bf16", "filename": "libnccl.so.2",
             "short_filename": "libnccl.so.2", "line": 0, "native": True}
    thread = {"thread_id": 1, "thread_name": "t", "status": "idle", "frames": [frame] * 40}
    big = {"schema_version": 1, "origin": "live", "processes": [], "manifest": [],
           "stacks": {str(p): {"status": "ok", "samples": [{"threads": [thread] * 200}]}
                      for p in range(100000, 100064)}}
    bigf = d / "big.json"
    bigf.write_text(json.dumps(big, separators=(",", ":")))  # compact, as hangdoctor writes
    out.append((f"legit {bigf.stat().st_size >> 20} MB snapshot (64 x 200 x 40)",
                ["report", str(bigf), "-o", str(d / "big.md")], None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the rows as JSON here too")
    ap.add_argument("--only", help="run the cases whose name contains this")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hd-hostile-") as tmp:
        d = Path(tmp)
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        try:
            for name, argv, deadline in cases(d):
                if args.only and args.only not in name:
                    continue
                argv = [a.replace("{SLEEPER}", str(sleeper.pid)) for a in argv]
                row = {"case": name, **measure(*argv), "deadline_s": deadline}
                # the legitimate case is the reference the caps must keep working, not an attack
                row["hostile"] = not name.startswith("legit")
                row["within_budget"] = row["peak_rss_mib"] <= BUDGET_MIB or not row["hostile"]
                rows.append(row)
                print(f"{name:44} rc {row['rc']:>2}  {row['wall_s']:>6.1f} s"
                      f"{'' if deadline is None else ' (deadline %g s)' % deadline:18}"
                      f"  peak RSS {row['peak_rss_mib']:>4} MiB  {row['stderr'][:70]}",
                      flush=True)
        finally:
            sleeper.kill()
            sleeper.wait()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    over = [r["case"] for r in rows if not r["within_budget"]]
    hostile = [r for r in rows if r["hostile"]]
    print(f"\n{len(hostile) - len(over)} of {len(hostile)} hostile cases within {BUDGET_MIB} MiB")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
