"""`launcher plan --search --verify 3` on the real dev cluster: the top three candidates at one
size run as one Slurm sweep; the measured best is among the predicted top two. tiny_gpt with
batch.micro=2 at 2 ranks (2 nodes): the search ranks ddp mb2×1, ddp mb1×2, then fsdp, which on
gloo's CPU collectives measured slower than ddp mb2×1 in each of 3 runs before commit (best c1
each time; c3 at 88%, 54%, 35% of it), so the order the test checks is not left to noise alone."""

from __future__ import annotations

import pandas as pd
import pytest

from launcher.cli import main
from launcher.run.verify import VERIFY_FILE

pytestmark = pytest.mark.slurm

RECIPE = ["model=tiny_gpt", "cluster=devcluster", "cluster.peak_flops_per_device=5e10", "batch.micro=2"]


def test_verify_three_measures_them_and_the_measured_best_is_in_the_predicted_top_two(devcluster, tmp_path, capsys):
    # 30 steps, not 12: the median step time of each candidate, not one slow stretch, decides the order.
    run = ["sweep.steps=30", "sweep.warmup_steps=5", f"sweep.results_dir={tmp_path}", "sweep.name=verify"]
    rc = main(["plan", "--search", *RECIPE, *run, "--gpus", "2", "--verify", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    df = pd.read_csv(tmp_path / "verify" / VERIFY_FILE)
    print(df.to_string())  # predicted vs measured, for the report
    assert df["predicted_rank"].tolist() == [1, 2, 3]
    assert df["candidate"].tolist() == ["ddp mb2×1 no-ckpt", "ddp mb1×2 no-ckpt", "fsdp mb2×1 no-ckpt keep"]
    assert (df["status"] == "completed").all() and (df["measured_tokens_per_s"] > 0).all()
    best = df.loc[df["measured_tokens_per_s"].idxmax()]
    assert best["measured_rank"] == 1 and best["predicted_rank"] <= 2
    assert f"Recommended (measured): 2 GPUs with {best['candidate'].split()[0]}: {best['overrides']}" in out
    # The trials ran on Slurm, one combination per candidate, at the one size.
    sweep = pd.read_csv(tmp_path / "verify" / "results.csv")
    assert sorted(zip(sweep["variant"], sweep["world_size"], sweep["nodes"], strict=True)) == [
        ("c1", 2, 2),
        ("c2", 2, 2),
        ("c3", 2, 2),
    ]
