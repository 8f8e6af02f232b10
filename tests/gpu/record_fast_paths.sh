#!/usr/bin/env bash
# On the 2x H200 machine: the GPU scenarios diagnosed with --window 3 and --window 0, and the
# probe run the way SSH runs it (python3 -S, site-packages in a thread), for the replay fixtures.
#
#   bash tests/gpu/record_fast_paths.sh OUTDIR
#
# Leaves OUTDIR/results.tgz (every output of run_all.sh) and prints a summary.
set -u
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -2
fi
python3 -c "import click, jinja2, pynvml; print('deps: click, jinja2, pynvml present')"
work=$(mktemp -d)
WINDOWS="3 0" SSH_STYLE_PROBE=1 HARD_LIMIT_S=420 bash tests/gpu/run_all.sh "$work" \
    pipe-deadlock peer-never-joins
for f in "$work"/*-ssh-style.snapshot.json; do
    python3 - "$f" <<'PY'
import json, sys
snap = json.load(open(sys.argv[1]))
m = {e["source"]: (e["status"], e.get("detail")) for e in snap.get("manifest", [])}
print(sys.argv[1].rsplit("/", 1)[1], "window", snap.get("window_s"), "probe", snap.get("probe_duration_s"),
      "s; nvml", m.get("nvml"), "; processes", m.get("processes"), "; stacks", m.get("stacks"))
PY
done
tar czf "$OUT/results.tgz" -C "$work" .
