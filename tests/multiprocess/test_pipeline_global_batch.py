"""Megatron's batch semantics on pipelines (config/derived.py pipeline_batch): a fixed global batch
and micro-batch size, the schedule's micro-batches derived per size as global ÷ (micro × dp). One
pipeline trial equals the 1-process reference on the same global batch, and a strong-scaling sweep
across sizes is one command. Real payloads in real processes; 4-rank trials oversubscribe 2 cores."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from launcher.cli import main
from launcher.io import read_json
from tests.support.layout_parity import assert_same, launch

pytestmark = pytest.mark.torch_dist


def test_a_pipeline_with_derived_microbatches_equals_one_process_on_the_global_batch(parity_ref, tmp_path):
    """pipeline at 2 ranks, global 8, micro 2: m = 8 ÷ (2 × 1) = 4 micro-batches in one schedule step."""
    run = launch(tmp_path, "megatron", 2, ["parallel=pipeline", "batch.global_batch=8", "batch.micro=2"])
    assert_same(run, parity_ref)
    record = read_json(tmp_path / "megatron" / "record.json")
    assert {k: record["trial"][k] for k in ("dp", "pp", "micro", "microbatches", "accum", "global_batch")} == {
        "dp": 1,
        "pp": 2,
        "micro": 8,
        "microbatches": 4,
        "accum": 1,
        "global_batch": 8,
    }
    assert record["config"]["parallel"]["microbatches"] == 4
    assert record["metrics"]["layout"]["bubble_theory"] == 1 / (4 + 1)


def test_a_strong_scaling_pipeline_sweep_across_sizes_is_one_command(tmp_path):
    argv = ["sweep", "parallel=dp_pp", "parallel.pp=2", "batch.global_batch=32", "batch.micro=2"]
    argv += ["sweep.world_sizes=[2,4]", "sweep.steps=4", "sweep.warmup_steps=1", f"sweep.results_dir={tmp_path}"]
    assert main([*argv, "sweep.name=strong", "--quiet"]) == 0
    df = pd.read_csv(tmp_path / "strong" / "results.csv").sort_values("world_size")
    assert (df["status"] == "completed").all(), df[["trial_id", "reason"]].to_string()
    assert df["dp"].tolist() == [1, 2] and (df["global_batch"] == 32).all() and (df["accum"] == 1).all()
    assert df["scaling"].tolist() == ["strong", "strong"]
    # m = 32 ÷ (2 × dp): 16 at dp 1, 8 at dp 2; the bubble (p−1)/(m+p−1) follows it.
    assert df["bubble_theory"].tolist() == pytest.approx([1 / 17, 1 / 9])
    trials = json.loads((tmp_path / "strong" / "sweep.json").read_text())["trials"]
    assert sorted((t["world_size"], t["microbatches"], t["micro"]) for t in trials) == [(2, 16, 32), (4, 8, 16)]
