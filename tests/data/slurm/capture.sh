#!/usr/bin/env bash
# Re-captures the literal sacct/squeue/sbatch outputs in this folder from the dev cluster
# (`launcher cluster up`; root). Takes ~3 min: TIMEOUT needs 70 s, a requeued job waits ~2 min
# before it may start again, and a node failure is noticed after ~30 s.
# Usage: bash tests/data/slurm/capture.sh [CASE...]   (no CASE = all)
set -euo pipefail
export SLURM_CONF=${SLURM_CONF:-/var/tmp/launcher-devcluster/etc/slurm.conf}
D=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/slurm-capture.XXXXXX)

SACCT=(sacct --noheader --parsable2 --duplicates
       --format=JobIDRaw,JobID,JobName%40,State,ExitCode,Elapsed,NodeList,Start,End -j)
SQUEUE=(squeue --noheader '--format=%i|%T|%r|%N|%j' -j)

log() { echo "[$(date +%T)] $*" >&2; }
# First word of the allocation's state: "CANCELLED by 0" -> CANCELLED.
state() { sacct --noheader --parsable2 -X --format=State -j "$1" | head -1 | cut -d' ' -f1; }
wait_state() {  # JOB TIMEOUT_S STATE...
    local job=$1 limit=$2 s; shift 2
    local end=$((SECONDS + limit))
    while :; do
        s=$(state "$job")
        for want in "$@"; do [[ $s == "$want" ]] && return 0; done
        ((SECONDS < end)) || { log "job $job still '$s' after ${limit}s (wanted $*)"; return 1; }
        sleep 0.5
    done
}
submit() { sbatch --parsable --output="$W/%x-%j.out" "$@"; }

case_completed_2node() {
    local j
    j=$(submit -N2 --ntasks-per-node=1 --job-name=two-node --wrap 'srun hostname')
    echo "$j" > "$D/sbatch_parsable.txt"
    wait_state "$j" 300 COMPLETED
    # A job that starts and ends within a second can show its name as "allocation" until
    # slurmdbd has the job's own record, which comes after the steps'.
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_completed_2node.txt"
}

case_array() {
    local f a
    # Fill every core of every node so the array cannot start.
    f=$(submit -N4 --exclusive --job-name=filler --wrap 'sleep 10')
    wait_state "$f" 300 RUNNING
    a=$(submit --array=2-4 --job-name=array --wrap 'sleep 1')
    sleep 2  # one scheduling pass, so the pending reason is set
    "${SQUEUE[@]}" "$f,$a" > "$D/squeue_array_pending.txt"
    wait_state "${a}_4" 300 COMPLETED
    wait_state "${a}_2" 300 COMPLETED
    wait_state "${a}_3" 300 COMPLETED
    sleep 3
    "${SACCT[@]}" "$a" > "$D/sacct_array_done.txt"
}

case_cancelled() {
    local j
    j=$(submit -x n4 --job-name=cancel-me --wrap 'srun sleep 300')
    wait_state "$j" 300 RUNNING
    sleep 2  # let the srun step start
    scancel "$j"
    wait_state "$j" 30 CANCELLED
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_cancelled.txt"
}

case_timeout() {
    local j
    j=$(submit -x n4 --time=1 --job-name=too-long --wrap 'sleep 300')
    wait_state "$j" 300 TIMEOUT
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_timeout.txt"
}

case_failed_exit3() {
    local j
    j=$(submit -x n4 --job-name=exit3 --wrap 'echo about to fail; exit 3')
    wait_state "$j" 300 FAILED
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_failed_exit3.txt"
}

case_step_killed() {
    local j
    # Task 1 of the step SIGKILLs itself; the batch script goes on and exits 0.
    j=$(submit -x n4 -N1 -n2 --job-name=step-killed \
        --wrap 'srun -n2 bash -c '\''[ "$SLURM_PROCID" = 1 ] && kill -9 $$; sleep 3'\''; echo "srun exited $?"; exit 0')
    wait_state "$j" 300 COMPLETED FAILED
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_step_killed.txt"
}

case_node_fail() {
    local j s end
    # --no-requeue: the allocation ends NODE_FAIL instead of going back to the queue.
    j=$(submit -w n4 --exclusive --no-requeue --job-name=node-fail --wrap 'srun sleep 300')
    wait_state "$j" 300 RUNNING
    sleep 2
    # Hold the cluster's lock while the link is cut: a `launcher cluster up` meanwhile (another
    # test session) would otherwise see the link down and repair it at once.
    exec 9> "$(dirname "$(dirname "$SLURM_CONF")")/lock"
    flock 9
    log "cutting n4's link"
    ip link set lnch-vn4 down
    wait_state "$j" 300 NODE_FAIL || { ip link set lnch-vn4 up; flock -u 9; return 1; }
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_node_fail.txt"
    ip link set lnch-vn4 up
    flock -u 9
    log "n4's link is back; waiting for it to be idle"
    end=$((SECONDS + 180))
    while s=$(sinfo --noheader --Node --nodes=n4 --format=%t); [[ $s != idle ]]; do
        ((SECONDS < end)) || { log "n4 still $s"; return 1; }
        [[ $s == down || $s == drain ]] && scontrol update nodename=n4 state=resume || true
        sleep 1
    done
    log "n4 idle again"
}

case_requeued() {
    local j
    # The first run sleeps until requeued; the second (SLURM_RESTART_COUNT=1) ends at once.
    j=$(submit -x n4 --job-name=requeue-me \
        --wrap 'echo "run ${SLURM_RESTART_COUNT:-0}"; [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && sleep 300; exit 0')
    wait_state "$j" 300 RUNNING
    sleep 2
    scontrol requeue "$j"
    wait_state "$j" 300 COMPLETED
    sleep 3
    "${SACCT[@]}" "$j" > "$D/sacct_requeued.txt"
}

case_held() {
    local j d a
    # A held job, one waiting on it, and a held array: only squeue's %r says why each waits
    # (sacct shows PENDING and nothing more); then all three cancelled while still pending.
    j=$(submit --hold --job-name=held --wrap 'sleep 1')
    d=$(submit --dependency=afterok:"$j" --job-name=waits --wrap 'sleep 1')
    a=$(submit --hold --array=0-2 --job-name=held-array --wrap 'sleep 1')
    sleep 5  # slurmdbd has the pending records, and a scheduling pass has set the reasons
    "${SQUEUE[@]}" "$j,$d,$a" > "$D/squeue_held.txt"
    "${SACCT[@]}" "$j,$d,$a" > "$D/sacct_pending.txt"
    scancel "$j" "$d" "$a"
    wait_state "$a" 30 CANCELLED
    sleep 3
    "${SACCT[@]}" "$j,$d,$a" > "$D/sacct_cancelled_pending.txt"
}

case_array_throttled() {
    local a
    # sweep.array_throttle's `%K`: tasks past the K running wait with Reason JobArrayTaskLimit, folded as one row
    # whose range keeps the `%K`; then the array cancelled.
    a=$(submit --array=0-5%2 -x n3,n4 --job-name=throttled --wrap 'sleep 30')
    wait_state "${a}_0" 60 RUNNING
    sleep 3
    "${SQUEUE[@]}" "$a" > "$D/squeue_array_throttled.txt"
    "${SACCT[@]}" "$a" > "$D/sacct_array_throttled.txt"
    scancel "$a"
}

case_error_partition() {
    local rc=0
    sbatch --parsable --partition=nope --wrap true 2> "$D/sbatch_error_partition.txt" > /dev/null || rc=$?
    echo "exit=$rc" >> "$D/sbatch_error_partition.txt"
}

cases=("$@")
((${#cases[@]})) || cases=(completed_2node array error_partition held array_throttled timeout requeued cancelled failed_exit3 step_killed node_fail)
pids=()
for c in "${cases[@]}"; do
    case $c in
        completed_2node | array | error_partition | held) log "case $c"; "case_$c" ;;  # need the whole cluster
        *) log "case $c (background)"; "case_$c" & pids+=($!) ;;
    esac
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
log "done (rc=$rc); job outputs in $W"
exit $rc
