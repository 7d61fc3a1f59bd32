"""benchmarks/byo_plan_accuracy.py's scoring: the claim test_byo_model once timed (a plan within 30% of
the measured row) judged against the next run's measurement, with the runs' spread."""

from __future__ import annotations

import pytest

from benchmarks.byo_plan_accuracy import score


def test_each_plan_is_judged_against_the_next_runs_measurement_and_the_spread_is_kept():
    runs = [
        {"measured": {1: 100.0, 2: 50.0}, "planned": {1: 100.0, 2: 120.0}},
        {"measured": {1: 125.0, 2: 60.0}, "planned": {1: 125.0, 2: 150.0}},
        {"measured": {1: 80.0, 2: 40.0}, "planned": {1: 80.0, 2: 90.0}},
    ]
    got = score(runs)
    # In-sample every 1-GPU plan is exact; against the next run they read -20% and +56%.
    assert got[1]["in_sample"] == [0.0, 0.0, 0.0]
    assert got[1]["next_run"] == pytest.approx([100 / 125 - 1, 125 / 80 - 1])
    assert (got[1]["next_run_within"], got[1]["met"]) == (1, False)
    assert got[1]["measured_spread"] == pytest.approx((125 - 80) / 100)
    assert got[2]["next_run"] == pytest.approx([120 / 60 - 1, 150 / 40 - 1]) and got[2]["next_run_within"] == 0
