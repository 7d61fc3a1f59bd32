"""A real `launcher sweep sweep.repeats=3` (the session's repeated sweep) prints each size's
interval and the recommendation's confidence. The statistics: tests/unit/test_uncertainty.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from launcher.results.uncertainty import median_interval


@pytest.mark.torch_dist
def test_a_sweep_with_three_repeats_prints_intervals_and_its_confidence(repeated_sweep):
    sweep_dir, printed = repeated_sweep
    csv, parquet = pd.read_csv(sweep_dir / "results.csv"), pd.read_parquet(sweep_dir / "results.parquet")
    for df in (csv, parquet):
        assert {"tokens_per_s_lo", "tokens_per_s_hi", "efficiency_lo", "efficiency_hi", "flags"} <= set(df.columns)
    assert csv["trial_id"].tolist() == [f"00{i}-ws{n}-r{i // 2}" for i, n in enumerate([1, 2] * 3)]
    started = [
        json.loads((sweep_dir / "trials" / t / "record.json").read_text())["started_at"] for t in csv["trial_id"]
    ]
    assert started == sorted(started)  # run in that order: 1,2,1,2,1,2
    assert (csv["status"] == "completed").all()
    for _, rows in csv.groupby("world_size"):
        iv = median_interval(rows["tokens_per_s"])
        assert rows["tokens_per_s_lo"].tolist() == pytest.approx([iv.lo] * 3)
        assert rows["tokens_per_s_hi"].tolist() == pytest.approx([iv.hi] * 3)
        assert (rows["efficiency_lo"] <= rows["efficiency"].median()).all()
        assert (rows["efficiency"].median() <= rows["efficiency_hi"]).all()
    two = csv[csv["world_size"] == 2]
    eff = f"{two['efficiency'].median():.2f} [{two['efficiency_lo'].iloc[0]:.2f}–{two['efficiency_hi'].iloc[0]:.2f}]"
    assert eff in printed and "Confidence: " in printed
    assert ("within noise of the 0.80 threshold" in printed) == (
        two["efficiency_lo"].iloc[0] <= 0.8 <= two["efficiency_hi"].iloc[0]
    )
    assert "Confidence: " in (sweep_dir / "report.md").read_text() and eff in (sweep_dir / "report.md").read_text()
