"""Rendered sbatch scripts: golden files (set UPDATE_GOLDEN=1 to rewrite them after a
deliberate change), and properties every script must have."""

from __future__ import annotations

import difflib
import os
import shlex
from pathlib import Path

import pytest
from render_cases import CASES, SWEEP_DIR, scripts

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_matches_golden_file(name):
    text = "".join(f"### {req.description}\n{script}" for req, script in scripts(name))
    path = GOLDEN / f"{name}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
        pytest.fail(f"rendered script differs from {path.name} (UPDATE_GOLDEN=1 to accept):\n{diff}")


def test_gres_only_when_gpus_are_asked_for():
    (_, cpu), = scripts("devcluster_2nodes")
    (_, gpu), = scripts("gpu_torchrun_all_options")
    assert "--gres" not in cpu
    assert "#SBATCH --gres=gpu:2\n" in gpu


def test_rendezvous_from_nodelist_and_job_id():
    (_, script), = scripts("devcluster_2nodes")
    assert 'HOSTS=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))' in script
    assert 'export MASTER_ADDR="${HOSTS[0]}"' in script
    assert 'export MASTER_PORT="$(( 20000 + (SLURM_JOB_ID + index) % 20000 ))"' in script
    assert "29500" not in script


def test_per_attempt_logs_and_time_limit_warning():
    (_, script), = scripts("devcluster_2nodes")
    assert '--output="$dir/rank%t.attempt$ATTEMPT.log"' in script
    assert 'ATTEMPT="${SLURM_RESTART_COUNT:-0}"' in script
    assert "#SBATCH --open-mode=append\n" in script  # a requeued job appends to its batch log
    assert "#SBATCH --signal=USR1@60\n" in script


def test_setup_lines_run_verbatim_before_strict_mode():
    (_, script), = scripts("gpu_torchrun_all_options")
    setup = script.index("source $(conda info --base)/etc/profile.d/conda.sh\nconda activate train\n")
    assert setup < script.index("set -euo pipefail")


def test_values_in_the_body_are_shell_quoted():
    (_, script), = scripts("quoted_payload_args")
    assert shlex.quote("/scratch/it's here/$(params).pt") in script
    # The trial folder is a quoted word of a bash array.
    assert f"TRIAL_DIRS=( {shlex.quote(str(SWEEP_DIR / 'trials' / '000-ws1'))} )" in script


def test_array_and_pack_shapes():
    (req, script), = scripts("array_three_repeats")
    assert req.array and "#SBATCH --array=0-2%1\n" in script and "slurm-%A_%a.out" in script  # %1: serialised
    (req, script), = scripts("pack_1_2_4")
    assert req.pack and req.nodes == 4 and "--array" not in script
    assert [ln.split()[2:] for ln in script.splitlines() if ln.startswith("run_trial ")] == [
        ["1", "0"], ["2", "1"], ["4", "2"],
    ]  # fmt: skip


def test_run_dry_run_prints_and_writes_the_script_and_submits_nothing(tmp_path, capsys):
    from launcher.cli import main

    assert main(["run", "cluster=devcluster", "cluster.nodes=2", f"sweep.results_dir={tmp_path}",
                 "sweep.name=dry", "--dry-run"]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    script = tmp_path / "dry" / "jobs" / "job-000.sbatch"
    assert out == script.read_text()
    assert out.startswith("#!/bin/bash\n") and "#SBATCH --nodes=2\n" in out
    assert f"submit with: sbatch {script}" in err
    assert (tmp_path / "dry" / "trials" / "000-ws2" / "trial.json").exists()
    assert not list(tmp_path.glob("dry/trials/*/submission.json"))
