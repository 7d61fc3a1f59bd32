"""`launcher plan --from` a 1,2-node `job=command` sweep predicts the 4-node row, then measured, on the
dev cluster (issue 22): examples/ddp_meter (its recipe describes its model: job.model_describes_program),
compute calibrated from the program's measured tokens/s, the links from the link probe's three all-reduces,
the gradient from the model's parameters, and the ranks' sharing of the machine's cores from the probe.

Tolerance: 10%, the goal the built-in payload meets on the bed for the same question,
benchmarks/results/model_accuracy.md ("extrapolate": fit nodes {1,2,3}, predict 4 nodes; MAPE 5.9% and
6.7%, worst shape 7.0%; goal ≤ 10%), measured with the bed's limits applied (0.45 CPU per node, 200 Mbit/s).
The shared dev cluster usually runs without them, its nodes' ranks sharing this machine's 2 cores with other
work, and then the built-in trainer itself misses by more: with this test's model, micro-batch, steps and
rounds (model=tiny_gpt batch.micro=8 sweep.steps=60 sweep.warmup_steps=10 sweep.repeats=3, 1,2 → 4 nodes)
it predicted +24.6% over its measured 4-node median on 2026-11-25 (load average ~6), +6.2% in a single
20-step round earlier. This test, at writing (load average 5–10 from other work): +7.4% (passed), −22.2%,
+60.3%, +18.8% (load 10.8); with 20 steps a trial measured under a second and the 1-node trials spread
11k–26k tokens/s (+72%), hence 60 steps. Where it misses, 1 → 2 nodes cost the step 2.8× (1.6× on a
quieter bed), far more than the gradient's all-reduce the probe times (5–7 ms for its 1.9 MB): ranks that
must meet in gloo's collectives on oversubscribed cores wait for the scheduler, which the model's contention
term (ranks ÷ the machine's cores, measure.cpu_contention) does not see, for the built-in trainer as for
this command. Rerun on a quiet bed, or on one with its limits applied (benchmarks.model_accuracy applies
them, under flock /tmp/bed.lock).

What is compared: the plan's 4-node tokens/s with the 4-node trials' global batch × tokens per sample ÷
median step, which is how the built-in trainer's row counts tokens/s and what the model is calibrated on; a
command's row holds its program's whole-job rate (total tokens ÷ total time), which a busy bed pulls below
that (on 2026-11-25, load ~8: 1-node trials at 6.6k whole-job vs 10.1k by their median step). Both print.

Noise as the benchmark tames it: the sizes run in interleaved rounds (sweep.repeats: 1,2,4,1,2,4,…), the
plan calibrates on every 1,2-node trial, and the 4-node measurement is the median of its repeats. The plan
reads a copy of the sweep holding only its 1- and 2-node trials, so the 4-node trials cannot inform it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from launcher.cli import main

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
RECIPES = str(REPO / "examples" / "ddp_meter" / "recipes")
TOLERANCE = 0.10
ROUNDS = 3
RECIPE = ["job=ddp_meter", "cluster=devcluster", "model=tiny_gpt", "batch.micro=8"]


def _small_sizes_only(sweep: Path, into: Path) -> Path:
    """A copy of `sweep` without its 4-node trials: what a 1,2-node sweep would have left."""
    shutil.copytree(sweep, into)
    for tdir in (into / "trials").iterdir():
        if tdir.name.split("-")[1] == "ws4":
            shutil.rmtree(tdir)
    return into


def test_plan_from_1_and_2_nodes_predicts_the_measured_4_node_row(devcluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipe's argv names examples/ddp_meter/train.py from the repository root
    name = f"cmdplan-{os.getpid()}-{int(time.time())}"
    run = ["sweep.nodes=[1,2,4]", f"sweep.repeats={ROUNDS}", "sweep.steps=60", "sweep.warmup_steps=10"]
    where = [f"sweep.results_dir={tmp_path}", f"sweep.name={name}", "--quiet"]
    assert main(["sweep", "--recipes", RECIPES, *RECIPE, *run, *where]) == 0
    rows = pd.read_csv(tmp_path / name / "results.csv")
    assert (rows["status"] == "completed").all(), rows[["trial_id", "status", "reason"]].to_string()
    assert sorted(rows["nodes"].tolist()) == [1] * ROUNDS + [2] * ROUNDS + [4] * ROUNDS
    small = _small_sizes_only(tmp_path / name, tmp_path / "small")
    out = tmp_path / "plan.csv"
    assert main(["plan", "--recipes", RECIPES, "--from", str(small), "--gpus", "1,2,4", "--output", str(out)]) == 0
    plan = pd.read_csv(out).set_index("gpus")
    predicted = float(plan.loc[4, "tokens_per_s"])
    four = rows[rows["nodes"] == 4]
    # The plan predicts the built-in trainer's tokens/s, global batch × tokens per sample ÷ the median step (the
    # model is calibrated on median steps); a command's row is its program's whole-job rate, total tokens ÷ total
    # time, which a few slow steps pull down. Both measured, the first compared.
    tokens_per_sample = four["tokens_per_s"] / four["samples_per_s"]  # the record's: model.seq_len, described
    assert tokens_per_sample.round().tolist() == [64] * ROUNDS
    by_median = four["global_batch"] * tokens_per_sample.round() / four["step_time_median_s"]
    measured, whole_job = float(by_median.median()), float(four["tokens_per_s"].median())
    err = predicted / measured - 1
    print(
        f"4 nodes: predicted {predicted:,.0f} tokens/s, measured {measured:,.0f} from the median step "
        f"({whole_job:,.0f} whole-job), medians of {ROUNDS}: {err:+.1%} ({predicted / whole_job - 1:+.1%})"
    )
    print(rows[["trial_id", "nodes", "tokens_per_s", "step_time_median_s", "busbw_gbps"]].to_string())
    ones = rows.loc[rows["nodes"] == 1, "step_time_median_s"]
    assert abs(err) <= TOLERANCE, (
        f"{err:+.1%} beyond ±{TOLERANCE:.0%}; 1-node median steps {ones.min():.4f}–{ones.max():.4f} s, this "
        f"machine's load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (see the module docstring)"
    )
