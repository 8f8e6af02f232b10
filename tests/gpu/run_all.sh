#!/usr/bin/env bash
# Run every GPU scenario once and diagnose it with hangdoctor, on the 2x H200 machine.
#
#   bash tests/gpu/run_all.sh OUTDIR [SCENARIO...]
#
# For each scenario: start it (its own process group), wait for its ready file, let it settle,
# record nvidia-smi's view, run `hangdoctor diagnose` against the launcher pid, record wall time
# and exit code in OUTDIR/summary.tsv, then kill the scenario's process group and wait until its
# processes (and so their GPU memory) are gone. The whole run stays under 8 minutes
# (HARD_LIMIT_S): waits shrink as the budget runs out, and a scenario that cannot fit any more
# is recorded as skipped.
#
# Outputs per scenario: NAME.log (server log), NAME.ready.json, NAME.json (diagnose --json),
# NAME.html, NAME.snapshot.json, NAME.stderr, NAME.nvidia-smi.txt, NAME.launcher.err; with
# WINDOWS="3 0" also NAME-w0.* (diagnosed with --window 0); with SSH_STYLE_PROBE=1 also
# NAME-ssh-style.snapshot.json (the bundle run as `python3 -S -c ...`, as over SSH).
set -u

if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [SCENARIO...]" >&2
    exit 2
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}

SCENARIOS=("$@")
if [ ${#SCENARIOS[@]} -eq 0 ]; then
    SCENARIOS=(kernel-spin peer-never-joins rank-exits pipe-deadlock init-never-joins healthy-busy)
fi
MAX_LIFETIME_S=${MAX_LIFETIME_S:-240}   # each scenario ends by itself after this anyway
READY_WAIT_S=${READY_WAIT_S:-150}
SETTLE_S=${SETTLE_S:-5}
SPIN_SETTLE_S=2                         # kernel-spin: diagnose well inside its 90 s spin
DIAGNOSE_TIMEOUT_S=${DIAGNOSE_TIMEOUT_S:-90}
HARD_LIMIT_S=${HARD_LIMIT_S:-465}       # the whole run, teardown included (< 8 min)
MIN_SCENARIO_S=75                       # no scenario starts with less time than this left
WINDOWS=${WINDOWS:-3}                   # one diagnosis per window, e.g. WINDOWS="3 0"
SSH_STYLE_PROBE=${SSH_STYLE_PROBE:-}    # set: also run the probe bundle the way SSH does

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)
SECONDS=0
left() { echo $((HARD_LIMIT_S - SECONDS)); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

SUMMARY="$OUT/summary.tsv"
printf 'scenario\tready\tready_s\tdiagnose_rc\tdiagnose_wall_s\tverdict\ttop_cause\ttop_score\n' >"$SUMMARY"

# verdict, top cause and its score from the --json output (tolerant of a missing/partial file)
json_fields() {
    "$PY" - "$1" <<'EOF' 2>/dev/null || printf -- '-\t-\t-'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("-\t-\t-", end=""); sys.exit(0)
if isinstance(d, list):  # one analysis per host, if the CLI prints a list
    d = d[0] if d else {}
causes = d.get("causes") or [{}]
print("%s\t%s\t%s" % (d.get("verdict", "-"), causes[0].get("id", "-"), causes[0].get("score", "-")), end="")
EOF
}

alive() {  # the launcher or anything left in its process group
    kill -0 "$1" 2>/dev/null || kill -0 -- "-$1" 2>/dev/null
}

stop_group() {  # $1: launcher pid == process group id; waits until every member is gone
    local pgid=$1 i
    # the pid too: a launcher killed before its setsid() has no group of its own yet
    kill -TERM "$pgid" 2>/dev/null
    kill -TERM -- "-$pgid" 2>/dev/null
    for i in $(seq 1 20); do
        alive "$pgid" || break
        sleep 0.5
    done
    kill -KILL "$pgid" 2>/dev/null
    kill -KILL -- "-$pgid" 2>/dev/null
    for i in $(seq 1 20); do
        alive "$pgid" || break
        sleep 0.5
    done
    wait "$pgid" 2>/dev/null
}

for name in "${SCENARIOS[@]}"; do
    if [ "$(left)" -lt "$MIN_SCENARIO_S" ]; then
        printf '%s\tskipped\t-\t-\t-\t-\t-\t-\n' "$name" >>"$SUMMARY"
        echo "run_all: $name skipped: only $(left) s of the ${HARD_LIMIT_S} s budget left" >&2
        continue
    fi
    log="$OUT/$name.log"
    ready="$OUT/$name.ready.json"
    rm -f "$log" "$ready"
    echo "run_all: $name: starting" >&2
    t0=$(now)
    "$PY" tests/gpu/scenarios.py "$name" --ready-file "$ready" --log "$log" \
        --max-lifetime "$MAX_LIFETIME_S" </dev/null >/dev/null 2>"$OUT/$name.launcher.err" &
    pid=$!   # the launcher calls setsid(): its pid is the process group id

    ok=no
    # leave time for settling, diagnosing and teardown after the wait
    deadline=$(awk -v t="$(now)" -v w="$(min "$READY_WAIT_S" $(($(left) - 55)))" \
        'BEGIN { printf "%.3f", t + w }')
    while awk -v d="$deadline" -v t="$(now)" 'BEGIN { exit !(t < d) }'; do
        if [ -s "$ready" ]; then ok=yes; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    ready_s=$(elapsed "$t0")
    if [ "$ok" != yes ]; then
        echo "run_all: $name: not ready after ${ready_s} s (see $OUT/$name.launcher.err)" >&2
        printf '%s\tno\t%s\t-\t-\t-\t-\t-\n' "$name" "$ready_s" >>"$SUMMARY"
        stop_group "$pid"
        continue
    fi
    if [ "$name" = kernel-spin ]; then sleep "$SPIN_SETTLE_S"; else sleep "$SETTLE_S"; fi

    {
        timeout -k 1 5 nvidia-smi --query-gpu=index,utilization.gpu,power.draw,memory.used,pstate \
            --format=csv
        timeout -k 1 5 nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv
    } >"$OUT/$name.nvidia-smi.txt" 2>&1

    for window in $WINDOWS; do
        # the first window's outputs are NAME.*, the others NAME-wWINDOW.*
        tag=$name; [ "$window" = "${WINDOWS%% *}" ] || tag="$name-w$window"
        echo "run_all: $name: diagnosing launcher $pid (--window $window)" >&2
        t1=$(now)
        diag_timeout=$(min "$DIAGNOSE_TIMEOUT_S" $(($(left) - 30)))
        [ "$diag_timeout" -lt 10 ] && diag_timeout=10
        timeout -k 5 "$diag_timeout" "$PY" -m hangdoctor diagnose localhost --pid "$pid" \
            --log "$log" --window "$window" --json -o "$OUT/$tag.html" \
            --save-snapshot "$OUT/$tag.snapshot.json" >"$OUT/$tag.json" 2>"$OUT/$tag.stderr"
        rc=$?
        wall=$(elapsed "$t1")
        printf '%s\tyes\t%s\t%s\t%s\t%s\n' "$tag" "$ready_s" "$rc" "$wall" \
            "$(json_fields "$OUT/$tag.json")" >>"$SUMMARY"
        echo "run_all: $tag: diagnose rc=$rc in ${wall} s" >&2
    done
    if [ -n "$SSH_STYLE_PROBE" ]; then
        # the probe as SSH runs it (python3 -S, site-packages added in a thread, --window 0)
        t1=$(now)
        "$PY" -c 'import sys, json
from hangdoctor.collect.probe_pack import build_probe_script
sys.stdout.write(build_probe_script({"root_pids": [int(sys.argv[1])], "log_path": sys.argv[2],
    "window_s": 0, "deadline_s": 30, "late_site": True, "host_name": "ssh-style"}))' \
            "$pid" "$log" >"$OUT/bundle.py"
        timeout -k 5 60 "$PY" -S -c \
            'import sys; exec(compile(sys.stdin.buffer.read(), "<hangdoctor-probe>", "exec"))' \
            <"$OUT/bundle.py" >"$OUT/$name-ssh-style.snapshot.json" 2>"$OUT/$name-ssh-style.stderr"
        echo "run_all: $name: ssh-style probe rc=$? in $(elapsed "$t1") s" >&2
        rm -f "$OUT/bundle.py"
    fi
    stop_group "$pid"
done

echo "run_all: done in $(elapsed "$t_start") s" >&2
column -t -s $'\t' "$SUMMARY" >&2 2>/dev/null || cat "$SUMMARY" >&2
