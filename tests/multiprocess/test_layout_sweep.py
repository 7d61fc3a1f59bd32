"""The mixed layout × accumulation sweep end to end on the embedded default."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from launcher.cli import main

pytestmark = pytest.mark.torch_dist


def test_layout_by_accumulation_sweep_runs_every_valid_combination(tmp_path, capsys):
    # ddp is left out of the mix (its own sweeps run everywhere else): each 4-rank trial on 2 cores costs ~10 s.
    assert (
        main(
            [
                "sweep",
                "sweep.world_sizes=[2,4]",
                "parallel=fsdp,pipeline",
                "batch.accum=1,4",
                "sweep.steps=6",
                "sweep.warmup_steps=2",
                f"sweep.results_dir={tmp_path}",
                "sweep.name=mix",
                "--quiet",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    # tiny_gpt has 2 layers: 4 pipeline stages are impossible, listed before anything ran.
    for accum in (1, 4):
        assert (
            f"skipped (impossible): pipeline-accum{accum} at world size 4: model.n_layers=2 is not divisible by "
            "pipeline stages pp(4) × v(1) = 4"
        ) in err
    assert err.index("skipped (impossible)") < err.index("sweep mix:")
    df = pd.read_csv(tmp_path / "mix" / "results.csv")
    assert sorted(zip(df["layout"], df["accum"], df["world_size"], strict=True)) == sorted(
        [("fsdp", a, w) for a in (1, 4) for w in (2, 4)] + [("pipeline", a, 2) for a in (1, 4)]
    )
    assert (df["status"] == "completed").all(), df[["trial_id", "reason"]].to_string()
    assert {"layout", "dp", "tp", "pp", "accum", "bubble_measured", "bubble_theory"} <= set(df.columns)
    pipe = df[df["layout"] == "pipeline"]
    assert (pipe["pp"] == 2).all() and (pipe["dp"] == 1).all()
    assert pipe["bubble_theory"].tolist() == pytest.approx([1 / 5] * 2)  # (p−1)/(m+p−1), p=2, m=4
    assert pipe["bubble_measured"].between(0, 1).all()
    assert df.loc[df["layout"] != "pipeline", "bubble_theory"].isna().all()
    assert (df["global_batch"] == 8 * df["accum"] * df["dp"]).all()
    spec = json.loads((tmp_path / "mix" / "sweep.json").read_text())
    assert len(spec["skipped"]) == 2 and len(spec["trials"]) == 6
