#!/usr/bin/env bash
# Re-captures the trials in this folder from the dev cluster (`launcher cluster up`), as they were on
# 2026-11-28 (launcher at 5decae9, Slurm 22.05.8): each case's batch log (slurm.out), sacct of its job
# (sacct.txt, the format of ../README.md) and the trial folders' files. Sweeps go to /tmp/h8cap, whose paths
# the batch logs hold (tests/unit/test_every_end.py points them at its own copy). ~1 min.
# Usage: [OUT=DIR] [PY=python] bash tests/data/slurm/ends/capture.sh    (from the repository root)
# Job ids, hosts and ports change with each capture, and test_every_end.py pins them.
set -euo pipefail
export SLURM_CONF=${SLURM_CONF:-/var/tmp/launcher-devcluster/etc/slurm.conf}
SRC=$(cd "$(dirname "$0")" && pwd)
D=${OUT:-$SRC}  # OUT=DIR: write the captures there instead (a dry run of this script)
W=/tmp/h8cap
PY=${PY:-python}
SACCT=(sacct --noheader --parsable2 --duplicates
       --format=JobIDRaw,JobID,JobName%40,State,ExitCode,Elapsed,NodeList,Start,End -j)
rm -rf "$W/tr_oom" "$W/tr_cmd" "$W/pack_cmd"
mkdir -p "$W"
job_of() { sed -n 's/.*"job_id": "\([0-9]*\)".*/\1/p' "$1/jobs/job-000.submitted.json"; }
save() {  # CASE SWEEP TRIAL→FOLDER...
    local case=$1 sweep=$2 job; shift 2
    job=$(job_of "$sweep")
    mkdir -p "$D/$case"
    cp "$sweep/jobs/slurm-$job.out" "$D/$case/slurm.out"
    "${SACCT[@]}" "$job" > "$D/$case/sacct.txt"
    for pair in "$@"; do
        mkdir -p "$D/$case/${pair#*=}"
        find "$sweep/trials/${pair%=*}" -maxdepth 1 -type f \( -name '*.attempt0.log' ! -name 'probe-*' \
            -o -name exit_code.attempt0 -o -name trial.json -o -name record.json \) -exec cp {} "$D/$case/${pair#*=}/" \;
    done
}

# The built-in trainer under torchrun, 2 nodes × 1 rank: rank 1 (node 1) raises the OOM stand-in at step 4.
$PY -m launcher sweep model=mlp cluster=devcluster cluster.launch=torchrun cluster.nodes=2 'sweep.world_sizes=[2]' \
    sweep.steps=8 sweep.warmup_steps=2 "cluster.env=['LAUNCHER_FAULT=oom:1:4']" sweep.results_dir=$W sweep.name=tr_oom --quiet || true
save torchrun_builtin_oom_node1 "$W/tr_oom" 000-ws2=.

# job=command under torchrun, 2 nodes × 2 ranks: rank 3 (node 1) prints an OOM and exits 1 (prog.py there).
$PY -m launcher sweep cluster=devcluster job=command job.launch=torchrun cluster.tasks_per_node=2 \
    "job.argv=[python,$SRC/torchrun_command_oom_node1/prog.py]" 'sweep.nodes=[2]' sweep.steps=10 sweep.warmup_steps=2 \
    sweep.results_dir=$W sweep.name=tr_cmd --quiet || true
save torchrun_command_oom_node1 "$W/tr_cmd" 000-ws4=.

# A packed job=command sweep (srun launch, the probe first): at 1 node the command runs out of memory; at 2 it
# runs until the job is scancelled.
$PY -m launcher sweep cluster=devcluster job=command job.launch=srun "job.argv=[python,$SRC/pack_command_cancelled/prog.py]" \
    'sweep.nodes=[1,2]' sweep.pack=true sweep.steps=10 sweep.warmup_steps=2 sweep.results_dir=$W sweep.name=pack_cmd --detach
until [ -e "$W/pack_cmd/trials/001-ws2/rank1.attempt0.log" ]; do sleep 1; done
sleep 3
scancel "$(job_of "$W/pack_cmd")"
sleep 8
save pack_command_cancelled "$W/pack_cmd" 000-ws1=000-ws1 001-ws2=001-ws2
