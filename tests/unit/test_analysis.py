"""Efficiency and recommendation on hand-computed tables."""

from __future__ import annotations

import pandas as pd
import pytest

from launcher.results.cost import Pricing, add_cost
from launcher.results.foreign import analyze
from launcher.results.policy import Policy, recommend
from launcher.results.scaling import add_scaling


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
    df = add_cost(pd.DataFrame({"world_size": [8], "tokens_per_s": [1e5]}), Pricing(usd_per_device_hour=2.0))
    # 8 × $2/h = $16/h for 3.6e8 tokens/h → $0.0444 per 1M tokens; 8/360 device-hours per 1M tokens
    assert df["usd_per_1m_tokens"].iloc[0] == pytest.approx(16 / 360)
    assert df["device_hours_per_1m_tokens"].iloc[0] == pytest.approx(8 / 360)
    unpriced = add_cost(df, Pricing())
    assert unpriced["usd_per_1m_tokens"].isna().all()
    assert unpriced["device_hours_per_1m_tokens"].iloc[0] == pytest.approx(8 / 360)


def test_spot_discount_and_hours_to_a_token_budget():
    pricing = Pricing(usd_per_device_hour=2.0, spot_discount=0.6, token_budget=3.6e11)
    df = add_cost(pd.DataFrame({"world_size": [8], "tokens_per_s": [1e5]}), pricing)
    # 3.6e11 tokens at 1e5 tokens/s = 3.6e6 s = 1000 h on 8 devices = 8000 device-hours at $0.80
    assert df["hours_to_budget"].iloc[0] == pytest.approx(1000)
    assert df["device_hours_to_budget"].iloc[0] == pytest.approx(8000)
    assert df["usd_to_budget"].iloc[0] == pytest.approx(6400)
    assert df["usd_per_1m_tokens"].iloc[0] == pytest.approx(16 / 360 * 0.4)


def priced(rows, **pricing):
    df = table(rows)
    return add_cost(df, Pricing(**pricing))


def test_min_cost_picks_the_best_throughput_per_device():
    # per device: 100, 87.5, 62.5 tokens/s → 1 GPU is cheapest; 8 GPUs cost 100/87.5 = 1.14× as much
    df = priced([(1, "completed", 100.0), (8, "completed", 700.0), (64, "completed", 4000.0)], usd_per_device_hour=3.6)
    rec = recommend(df, Policy(name="min_cost"))
    assert rec.world_size == 1
    assert rec.reason == (
        "1 rank: lowest cost per unit of work ($10 per 1M tokens); the next cheapest, 8 ranks, "
        "costs 1.14× as much for the same work"
    )


def test_fastest_within_budget_in_device_hours_and_dollars():
    # token budget 3.6e9: 1 GPU 1e4 h (1e4 GPU-h), 8 GPUs 1428.6 h (11429 GPU-h), 64 GPUs 250 h (16000 GPU-h)
    rows = [(1, "completed", 100.0), (8, "completed", 700.0), (64, "completed", 4000.0)]
    df = priced(rows, usd_per_device_hour=2.0, token_budget=3.6e9)
    assert recommend(df, Policy(name="fastest_within_budget", budget_device_hours=12000)).world_size == 8
    assert recommend(df, Policy(name="fastest_within_budget", budget_device_hours=16000)).world_size == 64
    rec = recommend(df, Policy(name="fastest_within_budget", budget_usd=24000))
    assert rec.world_size == 8
    assert rec.reason == ("8 ranks: fastest size within $24,000 (1,428.6 h, $22,857); 64 ranks would need $32,000")
    none = recommend(df, Policy(name="fastest_within_budget", budget_device_hours=5000))
    assert none.world_size is None
    assert (
        none.reason == "no size fits the budget of 5,000 device-hours; the cheapest, 1 rank, needs 10,000 device-hours"
    )


def test_analyze_a_time_to_train_table_72h_to_68h():
    df = pd.DataFrame({"gpus": [8, 16], "hours": [72.0, 68.0]})
    result = analyze(df, Policy(threshold=0.8), Pricing(usd_per_device_hour=2.0))
    assert result.table["efficiency"].tolist() == pytest.approx([1.0, 72 / 68 / 2])
    assert result.table["usd_to_budget"].tolist() == pytest.approx([8 * 72 * 2, 16 * 68 * 2])
    assert result.recommendation.world_size == 8
    assert result.recommendation.reason == (
        "8 GPUs: every larger size fell below strong-scaling efficiency 0.80; "
        "16 GPUs reach only 0.53 (1.06× the speed for 2.00× the devices)"
    )


def test_analyze_a_throughput_table_from_elsewhere():
    df = pd.DataFrame({"gpus": [1, 8, 64], "samples_per_s": [100, 700, 4000], "status": ["completed"] * 3})
    result = analyze(df, Policy(threshold=0.8), Pricing())
    assert result.table["efficiency"].tolist() == pytest.approx([1.0, 0.875, 0.625])
    assert result.recommendation.world_size == 8 and result.metric == "samples_per_s"


@pytest.mark.parametrize(
    "frame, message",
    [
        (
            {"n": [1]},
            "the table has no device-count column (one of gpus, world_size, devices, ranks, nodes); it has: n",
        ),
        (
            {"gpus": [1]},
            "the table has no throughput (tokens_per_s, samples_per_s, throughput) or time-to-train "
            "(hours, time_h, time_s, seconds, days) column; it has: gpus",
        ),
        ({"gpus": [0], "hours": [1]}, "column 'gpus' holds 0; device counts must be positive integers"),
        ({"gpus": [1], "hours": [-1]}, "column 'hours' holds a value ≤ 0; throughputs and times must be positive"),
    ],
)
def test_analyze_refuses_tables_it_cannot_judge(frame, message):
    from launcher.config.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        analyze(pd.DataFrame(frame), Policy(), Pricing())
    assert str(exc.value) == message


def test_repeats_are_judged_by_their_median():
    # size 1: 100, 110, 90 → median 100; size 2: 150, 190, 170 → median 170 → 0.85
    df = table(
        [
            (1, "completed", 100.0),
            (1, "completed", 110.0),
            (1, "completed", 90.0),
            (2, "completed", 150.0),
            (2, "completed", 190.0),
            (2, "completed", 170.0),
            (2, "failed", None),
        ]
    )
    assert df["efficiency"].tolist()[3:6] == pytest.approx([0.75, 0.95, 0.85])
    rec = recommend(df, 0.8)
    assert rec.world_size == 2
    # Three repeats a size: the median with its 90% bootstrap interval, and a verdict on the noise.
    assert "(0.85 [0.68–1.06], 1.70× the throughput of 1 rank)" in rec.reason
    assert rec.confidence == (
        "low — 2 ranks: 0.85 [0.68–1.06] — within noise of the 0.80 threshold "
        "(90% bootstrap intervals of the median, 3 repeats per size)"
    )


def test_out_of_memory_sizes_are_infeasible_not_slow():
    df = table([(1, "completed", 100.0), (2, "completed", 190.0), (4, "oom", None)])
    rec = recommend(df, 0.8)
    assert rec.world_size == 2
    assert rec.reason.endswith("; out of memory (infeasible) at 4 ranks")


def test_an_incomplete_sweep_says_so_beside_its_pick():
    """A sweep interrupted, still running or never finished: the pick is among what completed, and says so."""
    df = table([(1, "completed", 100.0), (2, "completed", 190.0), (4, "cancelled", None), (8, "not started", None)])
    rec = recommend(df, 0.8)
    assert rec.world_size == 2
    assert rec.reason.endswith(
        "; incomplete sweep: 2 of 4 trials did not finish (4 ranks cancelled, 8 ranks not started); "
        "only the sizes that completed were compared"
    )
    none = recommend(table([(1, "cancelled", None), (2, "pending", None)]), 0.8)
    assert none.reason == (
        "no trial completed, so there is nothing to recommend; incomplete sweep: 2 of 2 trials did not finish "
        "(1 rank cancelled, 2 ranks pending); only the sizes that completed were compared"
    )
    ended = recommend(table([(1, "completed", 100.0), (2, "failed", None), (4, "oom", None)]), 0.8)
    assert "incomplete" not in ended.reason  # a failure is an end: that sweep is complete
