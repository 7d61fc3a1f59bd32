"""`launcher plan --search --verify 2` locally (cluster=local): the search's top two at 2 ranks run
as one sweep in real processes and the printed table puts predicted beside measured; the
recommendation is the measured best. (On the dev cluster: tests/slurm/test_plan_verify_slurm.py.)"""

from __future__ import annotations

import pandas as pd
import pytest

from launcher.cli import main
from launcher.run.verify import VERIFY_FILE

pytestmark = pytest.mark.torch_dist


def test_verify_two_locally_measures_both_and_recommends_the_measured_best(tmp_path, capsys):
    recipe = ["model=tiny_gpt", "cluster=local", "cluster.peak_flops_per_device=5e10", "batch.micro=2"]
    run = ["sweep.steps=5", "sweep.warmup_steps=2", f"sweep.results_dir={tmp_path}", "sweep.name=verify"]
    assert main(["plan", "--search", *recipe, *run, "--gpus", "2", "--verify", "2"]) == 0
    out = capsys.readouterr().out
    df = pd.read_csv(tmp_path / "verify" / VERIFY_FILE)
    assert df["candidate"].tolist() == ["ddp mb2×1 no-ckpt", "ddp mb1×2 no-ckpt"]
    assert df["variant"].tolist() == ["c1", "c2"] and (df["status"] == "completed").all()
    assert (df["measured_tokens_per_s"] > 0).all()
    assert df["measured_over_predicted"].tolist() == pytest.approx(
        (df["measured_tokens_per_s"] / df["predicted_tokens_per_s"]).tolist()
    )
    best = df.loc[df["measured_tokens_per_s"].idxmax()]
    assert sorted(df["measured_rank"]) == [1, 2] and best["measured_rank"] == 1
    assert "predicted vs measured" in out
    assert f"Recommended (measured): 2 GPUs with ddp: {best['overrides']}" in out
    trials = pd.read_csv(tmp_path / "verify" / "results.csv")
    assert sorted(zip(trials["variant"], trials["world_size"], strict=True)) == [("c1", 2), ("c2", 2)]
