#!/usr/bin/env bash
# The evidence gathered the way a person does it today: one command after another over SSH,
# with a fresh OpenSSH connection per command (no ControlMaster), each one bounded.
#
#   benchmarks/manual_baseline.sh [-F SSH_CONFIG] [-l LOG] [-g] [-w SECONDS] HOSTSPEC PID...
#
#   HOSTSPEC     what you would type after `ssh` ([user@]host or an ssh_config alias)
#   PID...       the server's processes (launcher and workers): one `py-spy dump` each
#   -F FILE      OpenSSH client config to use (as `ssh -F FILE`)
#   -l LOG       the server's log on the host: `tail -n 200 LOG`
#   -g           the host has GPUs: also run `nvidia-smi`
#   -w SECONDS   then wait SECONDS and run `ps` and every `py-spy dump` again, to see whether
#                anything moved (the evidence hangdoctor gathers over its window)
#
# Commands, in order: ps of the PIDs, ss -ltnp, [nvidia-smi], py-spy dump per PID, [with -w:
# the wait, ps and the dumps again], tail of the log. Their output goes to stdout; each
# command's wall time goes to stderr as "step NAME SECONDS", then "total SECONDS".
# Exit status: 0, or 1 when a command failed.
set -u

ssh_opts=(-o BatchMode=yes -o ConnectTimeout=10 -o ControlMaster=no -o ControlPath=none)
log=""
gpu=0
window=""
while getopts "F:l:gw:" opt; do
    case "$opt" in
        F) ssh_opts+=(-F "$OPTARG") ;;
        l) log="$OPTARG" ;;
        g) gpu=1 ;;
        w) window="$OPTARG" ;;
        *) echo "usage: $0 [-F SSH_CONFIG] [-l LOG] [-g] [-w SECONDS] HOSTSPEC PID..." >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
    echo "usage: $0 [-F SSH_CONFIG] [-l LOG] [-g] [-w SECONDS] HOSTSPEC PID..." >&2
    exit 2
fi
host="$1"
shift
pids=("$@")

failed=0
now() { date +%s.%N; }
start_all=$(now)

step() {
    # step NAME COMMAND: one fresh `ssh HOST COMMAND`, at most 30 s
    local name="$1" t0 t1
    shift
    t0=$(now)
    echo "### $name"
    timeout 30 ssh "${ssh_opts[@]}" "$host" "$@" || failed=1
    t1=$(now)
    echo "step $name $(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")" >&2
}

pid_list=$(IFS=,; echo "${pids[*]}")
step ps "ps -o pid,ppid,stat,wchan:32,etime,time,rss,args -p $pid_list"
step ss "ss -ltnp"
if [ "$gpu" = 1 ]; then
    step nvidia-smi "nvidia-smi"
fi
for pid in "${pids[@]}"; do
    step "py-spy-$pid" "py-spy dump --pid $pid"
done
if [ -n "$window" ]; then
    sleep "$window"
    echo "step wait $window" >&2
    step ps-again "ps -o pid,ppid,stat,wchan:32,etime,time,rss,args -p $pid_list"
    for pid in "${pids[@]}"; do
        step "py-spy-again-$pid" "py-spy dump --pid $pid"
    done
fi
if [ -n "$log" ]; then
    step tail "tail -n 200 $log"
fi
echo "total $(awk "BEGIN { printf \"%.3f\", $(now) - $start_all }")" >&2
exit $failed
