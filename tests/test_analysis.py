"""Efficiency and recommendation on hand-computed tables."""

from __future__ import annotations

import pandas as pd
import pytest

from launcher.analysis import add_cost, add_scaling, recommend


def table(rows):
    df = pd.DataFrame(rows, columns=["world_size", "status", "tokens_per_s"])
    df["scaling"] = "weak"
    return add_scaling(df)


def test_efficiency_against_smallest_size():
    # 1 GPU 100 samples/s, 8 GPUs 700, 64 GPUs 4000 → 87.5% and 62.5%
    df = table([(1, "completed", 100.0), (8, "completed", 700.0), (64, "completed", 4000.0)])
    assert df["efficiency"].tolist() == pytest.approx([1.0, 0.875, 0.625])
    assert df["speedup"].tolist() == pytest.approx([1.0, 7.0, 40.0])
    rec = recommend(df, 0.8)
    assert rec.world_size == 8
    assert rec.reason == (
        "8 ranks: largest size with weak-scaling efficiency ≥ 0.80 (0.88, 7.00× the throughput of 1 rank); "
        "64 ranks reach only 0.62 (5.71× the speed for 8.00× the devices)"
    )


def test_eight_to_sixteen_taking_72h_to_68h_is_not_recommended():
    # Same work: 72 h on 8 GPUs vs 68 h on 16 → throughput ratio 72/68 for twice the GPUs.
    df = table([(8, "completed", 1 / 72), (16, "completed", 1 / 68)])
    assert df["efficiency"].iloc[1] == pytest.approx(72 / 68 / 2)
    rec = recommend(df, 0.8)
    assert rec.world_size == 8
    assert rec.reason.startswith("8 ranks: every larger size fell below weak-scaling efficiency 0.80")


def test_failed_rows_are_ignored_and_baseline_is_smallest_completed():
    df = table([(1, "failed", None), (2, "completed", 200.0), (4, "completed", 360.0)])
    assert df["efficiency"].tolist()[1:] == pytest.approx([1.0, 0.9])
    assert pd.isna(df["efficiency"].iloc[0])
    assert recommend(df, 0.8).world_size == 4


def test_nothing_completed():
    rec = recommend(table([(1, "failed", None), (2, "failed", None)]), 0.8)
    assert rec.world_size is None
    assert rec.reason == "no trial completed, so there is nothing to recommend"


def test_cost_per_million_tokens():
    df = add_cost(pd.DataFrame({"world_size": [8], "tokens_per_s": [1e5]}), usd_per_device_hour=2.0)
    # 8 × $2/h = $16/h for 3.6e8 tokens/h → $0.0444 per 1M tokens
    assert df["usd_per_1m_tokens"].iloc[0] == pytest.approx(16 / 360)
    assert add_cost(df, None)["usd_per_1m_tokens"].isna().all()


def test_repeats_are_judged_by_their_median():
    # size 1: 100, 110, 90 → median 100; size 2: 150, 190, 170 → median 170 → 0.85
    df = table([(1, "completed", 100.0), (1, "completed", 110.0), (1, "completed", 90.0),
                (2, "completed", 150.0), (2, "completed", 190.0), (2, "completed", 170.0), (2, "failed", None)])
    assert df["efficiency"].tolist()[3:6] == pytest.approx([0.75, 0.95, 0.85])
    rec = recommend(df, 0.8)
    assert rec.world_size == 2
    assert "(0.85, 1.70× the throughput of 1 rank)" in rec.reason
