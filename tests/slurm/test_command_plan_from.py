"""`launcher plan --from` a 1,2-node `job=command` sweep on the dev cluster (issue 22): examples/ddp_meter,
its recipe describing its model (job.model_describes_program), planned at 4 nodes from what the sweep
measured. How close the 4-node prediction comes to a measured 4-node row is a benchmark, not a test
(benchmarks/command_plan_from.py, results in benchmarks/results/command_plan_from.md): timing on a shared
2-core machine is too noisy to assert."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.command_plan_from import RECIPE, RECIPES
from launcher.cli import main
from launcher.io import read_json

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]


def test_plan_from_1_and_2_nodes_predicts_the_4_node_row(devcluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipe's argv names examples/ddp_meter/train.py from the repository root
    name = f"cmdplan-{os.getpid()}-{int(time.time())}"
    run = ["sweep.nodes=[1,2]", "sweep.steps=20", "sweep.warmup_steps=5"]
    where = [f"sweep.results_dir={tmp_path}", f"sweep.name={name}", "--quiet"]
    assert main(["sweep", "--recipes", RECIPES, *RECIPE, *run, *where]) == 0
    rows = pd.read_csv(tmp_path / name / "results.csv")
    assert rows["status"].tolist() == ["completed", "completed"], rows["reason"].tolist()
    assert rows["busbw_gbps"].iloc[1] > 0  # the link probe's figure, which calibrates the inter-node link
    out = tmp_path / "plan.csv"
    plan_args = ["--from", str(tmp_path / name), "--gpus", "1,2,4", "--output", str(out)]
    assert read_json(tmp_path / name / "sweep.json")["recipes"] == str(Path(RECIPES).resolve())
    assert main(["plan", *plan_args]) == 0  # the recipe folder is the sweep's own: no --recipes again
    plan = pd.read_csv(out).set_index("gpus")
    assert plan.index.tolist() == [1, 2, 4]
    assert all(math.isfinite(v) and v > 0 for v in plan["tokens_per_s"])
