"""plan --verify's table (launcher/run/verify.py) from a search and a measured sweep table, without
running anything; and its bad input. The run itself: tests/multiprocess/test_plan_verify.py (local)
and tests/slurm/test_plan_verify_slurm.py (the dev cluster)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.perf.search import search
from launcher.run.verify import compare, measured_best, verify_table

RECIPE = ["model=tiny_gpt", "cluster.peak_flops_per_device=5e10", "batch.micro=2"]


def test_the_table_puts_predicted_beside_measured_and_ranks_what_completed():
    top = search(compose_config(RECIPE), [2], assume_mfu=None).sizes[0].ranked[:3]
    measured = pd.DataFrame(
        {
            "variant": ["c1", "c2", "c3"],
            "status": ["completed", "completed", "failed"],
            "tokens_per_s": [900.0, 1200.0, math.nan],
        }
    )
    rows = compare(top, measured)
    df = verify_table(rows)
    assert df["candidate"].tolist() == ["ddp mb2×1 no-ckpt", "ddp mb1×2 no-ckpt", "fsdp mb2×1 no-ckpt keep"]
    assert df["measured_rank"].tolist()[:2] == [2, 1] and pd.isna(df["measured_rank"].iloc[2])
    assert df["status"].tolist() == ["completed", "completed", "failed"]
    assert df["measured_over_predicted"].iloc[1] == pytest.approx(1200.0 / top[1].tokens_per_s)
    assert df["overrides"].iloc[1] == " ".join(top[1].candidate.overrides())
    best = measured_best(rows)
    assert best is not None and best.label == "c2"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--gpus", "2", "--verify", "2"],
            "launcher: error: --verify 2 runs the top candidates of a search: add --search",
        ),
        (
            ["--search", "--gpus", "2", "--verify", "0"],
            "launcher: error: --verify 0: give the number of top candidates to run, 1 or more",
        ),
    ],
)
def test_bad_verify_is_one_line_exit_2(argv, message, capsys, tmp_path):
    assert main(["plan", *RECIPE, f"sweep.results_dir={tmp_path}", *argv]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not any(tmp_path.iterdir())
