"""`launcher run --from` a Slurm sweep's folder, or a plan saved by `plan --search --output`: the job
script it writes (the recommended nodes, requeued) is one the real scheduler accepts (`sbatch --test-only`)."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.io import read_json
from launcher.slurm.commands import sbatch_test_only
from tests.unit.test_run_from import _new_folders, _sweep

pytestmark = pytest.mark.slurm


def test_the_script_run_from_writes_passes_sbatch_test_only(devcluster, tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, ["cluster=devcluster", "sweep.nodes=[1,2]"], lambda t: 950.0 * t.nodes)
    assert main(["run", "--from", str(sweep_dir), "run.steps=50", "--dry-run"]) == 0
    out = capsys.readouterr().out
    (run_dir,) = _new_folders(tmp_path)
    script = run_dir / "jobs" / "job-000.sbatch"
    assert "#SBATCH --nodes=2\n" in out and "#SBATCH --requeue\n" in out
    ok, said = sbatch_test_only(script, devcluster.env())
    assert ok and "to start at" in said, said


def test_the_script_run_from_a_saved_plan_writes_passes_sbatch_test_only(devcluster, tmp_path, capsys):
    recipe = ["model=tiny_gpt", "cluster=devcluster", "cluster.peak_flops_per_device=5e10", "batch.micro=2"]
    assert main(["plan", "--search", *recipe, "--gpus", "1,2", "--output", str(tmp_path / "plan.csv")]) == 0
    rec = read_json(tmp_path / "plan.json")["recommended"]
    runs = tmp_path / "runs"
    assert (
        main(["run", "--from", str(tmp_path / "plan.json"), "run.steps=50", f"sweep.results_dir={runs}", "--dry-run"])
        == 0
    )
    out = capsys.readouterr().out
    (run_dir,) = runs.iterdir()
    assert f"#SBATCH --nodes={rec['gpus']}\n" in out and "#SBATCH --requeue\n" in out  # devcluster: 1 rank per node
    ok, said = sbatch_test_only(run_dir / "jobs" / "job-000.sbatch", devcluster.env())
    assert ok and "to start at" in said, said
