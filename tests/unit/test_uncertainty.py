"""How sure a figure is: the bootstrap, each size's interval in the table, the recommendation's
confidence and its "within noise" / exclusion wording on literal tables, flags from literal
records, repeats run round by round (and `auto`). A real `launcher sweep sweep.repeats=3`:
tests/multiprocess/session/test_uncertainty_repeats.py."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.load import load_config
from launcher.config.plain import to_dict
from launcher.io import atomic_write_json
from launcher.report.terminal import print_table
from launcher.results.confidence import UNKNOWN_SWEEP
from launcher.results.policy import Policy, recommend
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS, build_table, trial_row
from launcher.results.uncertainty import N_BOOT, Interval, efficiency_interval, interval_text, median_interval
from launcher.run import repeats
from launcher.slurm.submit import job_requests
from launcher.trials.spec import RepeatPlan, sweep_trials

BASIS = "(90% bootstrap intervals of the median, 3 repeats per size)"


def test_a_median_needs_two_values_for_an_interval():
    assert math.isnan(median_interval([]).median)
    one = median_interval([120.0, float("nan")])  # NaN is no measurement
    assert one.median == 120.0 and not one.known and one.half_width() == math.inf


def test_three_repeats_bound_the_median_by_their_extremes():
    # A resample's median is 90 with probability 7/27 (two or three draws of 90): far over the 5%
    # tail, so the 5th percentile is 90 and (by symmetry) the 95th is 110.
    iv = median_interval([100.0, 90.0, 110.0])
    assert (iv.median, iv.lo, iv.hi) == (100.0, 90.0, 110.0)
    assert iv.half_width() == pytest.approx(0.10) and iv.contains(95.0) and not iv.contains(111.0)


def test_the_bootstrap_is_the_percentile_bootstrap_and_seeded():
    values = [10.0, 13.0, 11.5, 9.0, 12.0, 30.0]
    rng = np.random.default_rng(0)
    draws = np.median(np.asarray(values)[rng.integers(0, 6, size=(N_BOOT, 6))], axis=1)
    lo, hi = np.percentile(draws, [5.0, 95.0])
    assert median_interval(values) == Interval(median=11.75, lo=float(lo), hi=float(hi))
    assert median_interval(values) == median_interval(values)  # the same table, the same intervals


def test_the_base_sizes_noise_widens_the_efficiency_interval():
    # 2 ranks exactly 200 each time; 1 rank 90, 100, 110: efficiency 200/(2·median(base)).
    iv = efficiency_interval([200.0] * 3, [90.0, 100.0, 110.0], size=2, base_size=1)
    assert (iv.median, iv.lo, iv.hi) == pytest.approx((1.0, 200 / 220, 200 / 180))
    assert not efficiency_interval([200.0], [100.0], size=2, base_size=1).known


def test_interval_text():
    assert interval_text(0.83, 0.755, 0.9) == "0.83 [0.76–0.90]"
    assert interval_text(12345.0, 11900.0, 12800.0, "{:,.0f}") == "12,345 [11,900–12,800]"
    assert interval_text(0.83, math.nan, math.nan) == "0.83"
    assert interval_text(1.0, 1.0, 1.0) == "1.00"  # the base size: exact by definition


def table(rows, **extra) -> pd.DataFrame:
    """(world size, tokens/s) per completed trial → a scaled table, as the results table has it."""
    df = pd.DataFrame(rows, columns=["world_size", "tokens_per_s"]).assign(status="completed", scaling="weak", **extra)
    return add_scaling(df)


def test_every_repeat_of_a_size_carries_the_sizes_intervals():
    df = table([(1, 100.0), (1, 100.0), (1, 100.0), (2, 150.0), (2, 166.0), (2, 180.0), (4, 300.0)])
    two = df[df["world_size"] == 2]
    assert two["tokens_per_s_lo"].tolist() == [150.0] * 3 and two["tokens_per_s_hi"].tolist() == [180.0] * 3
    assert two["efficiency_lo"].tolist() == pytest.approx([0.75] * 3)
    assert two["efficiency_hi"].tolist() == pytest.approx([0.90] * 3)
    base = df[df["world_size"] == 1]
    assert (base["efficiency_lo"] == 1.0).all() and (base["efficiency_hi"] == 1.0).all()
    four = df[df["world_size"] == 4].iloc[0]  # one trial: its own spread unknown, the base's is known (nil)
    assert math.isnan(four["tokens_per_s_lo"]) and four["efficiency_lo"] == four["efficiency_hi"] == 0.75


def test_a_decision_within_noise_of_the_threshold_says_so():
    df = table([(1, 100.0)] * 3 + [(2, 150.0), (2, 166.0), (2, 180.0)])
    rec = recommend(df, Policy(threshold=0.8))
    assert rec.world_size == 2
    assert rec.reason == (
        "2 ranks: largest size with weak-scaling efficiency ≥ 0.80 (0.83 [0.75–0.90], 1.66× the throughput of 1 rank)"
    )
    assert rec.confidence == f"low — 2 ranks: 0.83 [0.75–0.90] — within noise of the 0.80 threshold {BASIS}"


def test_a_decision_clear_of_the_threshold_says_how_clear():
    df = table([(1, 100.0)] * 3 + [(2, 180.0), (2, 184.0), (2, 190.0), (4, 200.0), (4, 220.0), (4, 240.0)])
    rec = recommend(df, Policy(threshold=0.8))
    assert rec.world_size == 2
    assert rec.reason.endswith("; 4 ranks reach only 0.55 [0.50–0.60] (1.20× the speed for 2.00× the devices)")
    assert rec.confidence == (
        "high — the 0.80 threshold lies outside every deciding size's interval: "
        f"2 ranks 0.92 [0.90–0.95], 4 ranks 0.55 [0.50–0.60] {BASIS}"
    )


def test_one_repeat_says_the_spread_is_unknown():
    df = table([(1, 100.0), (2, 190.0)])
    assert recommend(df, 0.8, unknown_spread=UNKNOWN_SWEEP).confidence == (
        "unknown — one trial per size, so the spread is unknown; set sweep.repeats=3 (or auto) to measure it"
    )
    assert recommend(df, 0.8).confidence == ""  # a table from elsewhere, or predicted: nothing to say


def test_min_cost_within_noise_of_the_runner_up():
    df = table([(1, 100.0), (1, 90.0), (1, 110.0), (2, 190.0), (2, 200.0), (2, 210.0)])
    rec = recommend(df, Policy(name="min_cost"))
    assert rec.world_size == 2  # a tie goes to the faster, larger size
    assert (
        rec.confidence
        == f"low — 2 ranks 100 [95–105] per device vs 1 rank 100 [90–110]: within noise of each other {BASIS}"
    )


def test_a_size_that_oversubscribes_the_cores_is_excluded_with_its_reason():
    flag = "oversubscribed: 4 ranks on 2 cores (cpu_contention 2.0)"
    df = table([(1, 100.0), (2, 190.0), (4, 380.0)], cpu_contention=[1.0, 1.0, 2.0], flags=[None, None, flag])
    rec = recommend(df, Policy(threshold=0.8))
    assert rec.world_size == 2  # 4 ranks' 0.95 measures contention, not scaling: not a candidate
    assert rec.reason == (
        "2 ranks: largest size with weak-scaling efficiency ≥ 0.80 (0.95, 1.90× the throughput of "
        "1 rank); 4 ranks excluded: 4 ranks on 2 cores (cpu_contention 2.0) measure contention, "
        "not scaling"
    )
    only = recommend(table([(1, 100.0), (2, 100.0)], cpu_contention=[1.0, 2.0]), 0.8)
    assert only.reason == (
        "1 rank: the only size measured without core contention; 2 ranks excluded: more threads "
        "than cores (cpu_contention 2.0) measure contention, not scaling"
    )


TRIAL = {
    "trial_id": "002-ws4",
    "world_size": 4,
    "nodes": 1,
    "layout": "ddp",
    "dp": 4,
    "micro": 8,
    "accum": 1,
    "global_batch": 32,
    "scaling": "weak",
    "lr": 1e-3,
}


def _record(**metrics) -> dict:
    return {"status": "completed", "reason": None, "metrics": {"tokens_per_s": 1000.0, **metrics}}


def test_flags_name_the_straggler_rank_and_the_oversubscribed_cores():
    m = {
        "cpu_contention": 2.0,
        "cpus_per_machine": 2,
        "threads_per_rank": 1,
        "machines": 1,
        "rank_spread": 0.19,
        "rank_step_time_median_s": [0.1, 0.119, 0.1, 0.105],
    }
    assert trial_row(TRIAL, _record(**m), None)["flags"] == (
        "oversubscribed: 4 ranks on 2 cores (cpu_contention 2.0); "
        "straggler: rank 1's median step is 19% over the fastest rank's (rank_spread 0.19 > 0.10)"
    )
    assert trial_row(TRIAL, _record(cpu_contention=1.0, rank_spread=0.05), None)["flags"] is None
    no_ranks = trial_row(TRIAL, _record(rank_spread=0.3), None)["flags"]
    assert no_ranks == "straggler: the ranks' median steps spread 30% (rank_spread 0.30 > 0.10)"


def test_the_terminal_folds_repeats_and_shows_intervals_flags_and_confidence():
    straggle = "straggler: rank 1's median step is 19% over the fastest rank's (rank_spread 0.19 > 0.10)"
    df = table([(1, 100.0)] * 3 + [(2, 150.0), (2, 166.0), (2, 180.0)], flags=[None] * 4 + [straggle, None])
    df = df.assign(trial_id=[f"{i:03d}" for i in range(6)]).reindex(columns=COLUMNS)
    console = Console(width=200, record=True, file=io.StringIO())
    print_table(df, recommend(df, 0.8, unknown_spread=UNKNOWN_SWEEP), title="t", console=console)
    text = console.export_text()
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 2  # one row per size
    assert "166 [150–180]" in rows[1] and "0.83 [0.75–0.90]" in rows[1] and "straggler" in rows[1]
    assert f"flagged: 2 ranks: {straggle} (in 1 of 3 trials)" in text
    assert f"Confidence: low — 2 ranks: 0.83 [0.75–0.90] — within noise of the 0.80 threshold {BASIS}" in text


def test_sizes_interleave_round_by_round_locally_and_on_slurm(tmp_path):
    local = sweep_trials(compose_config(["sweep.repeats=3", "sweep.world_sizes=[1,2,4]"]))
    assert [(t.world_size, t.repeat) for t in local] == [(n, r) for r in range(3) for n in (1, 2, 4)]
    assert local[4].trial_id == "004-ws2-r1"
    cfg = compose_config(["cluster=devcluster", "sweep.nodes=[1,2]", "sweep.repeats=2"])
    jobs = job_requests(cfg, tmp_path, sweep_trials(cfg))
    # One plain job each, in submission order 1,2,1,2 nodes.
    assert [[t.trial_id for t in j.trials] for j in jobs] == [
        ["000-ws1-r0"],
        ["001-ws2-r0"],
        ["002-ws1-r1"],
        ["003-ws2-r1"],
    ]
    assert not any(j.request.array for j in jobs)


@pytest.mark.parametrize("value, planned", [("3", 3), ("auto", 5), ("AUTO", 5), (2, 2)])
def test_repeats_take_a_count_or_auto(value, planned):
    cfg = compose_config([f"sweep.repeats={value}"])
    assert len(sweep_trials(cfg)) == 2 * planned


def test_a_stored_config_with_int_repeats_still_loads():
    doc = to_dict(compose_config([]))
    doc["sweep"]["repeats"] = 3
    assert load_config(doc).sweep.repeats == 3


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "sweep.repeats=0",
            "sweep.repeats=0 must be a whole number of trials per size (≥ 1) or auto; set e.g. "
            "sweep.repeats=3 or sweep.repeats=auto",
        ),
        ("sweep.repeats=2.5", "sweep.repeats=2.5 must be a whole number"),
        ("sweep.repeats=many", "sweep.repeats='many' must be a whole number"),
        ("sweep.repeats=true", "sweep.repeats=True must be a whole number"),
        ("sweep.repeats=[3]", "sweep.repeats=[3] must be a whole number"),
        ("sweep.repeats=1001", "sweep.repeats=1001 is over 1000 trials per size; set e.g. sweep.repeats=3"),
        ("sweep.target_ci=0", "sweep.target_ci=0.0 must be a fraction in (0, 1)"),
        ("sweep.max_repeats=2", "sweep.max_repeats=2 must be 3 to 1000 (repeats=auto starts with 3)"),
    ],
)
def test_bad_repeats_are_one_line_exit_2(override, message, tmp_path, capsys):
    assert main(["sweep", override, f"sweep.results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"launcher: error: {message}") and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing created


def test_auto_cannot_detach_or_pack(tmp_path, capsys):
    argv = ["sweep", "cluster=devcluster", "sweep.repeats=auto", f"sweep.results_dir={tmp_path}"]
    assert main([*argv, "--detach"]) == 2
    assert "--detach with sweep.repeats=auto: each round of repeats is decided from the last" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="sweep.repeats=auto decides each round from the last, but sweep.pack=true"):
        compose_config(["cluster=devcluster", "sweep.repeats=auto", "sweep.pack=true"])


def _fake_sweep(tmp_path, overrides, thr):
    """A planned sweep folder and a `_run_batch` stand-in that writes the record a payload would:
    tokens/s `thr[size]` for the k-th run of that size (the last value once they run out)."""
    from launcher.run.sweep import create_sweep_dir, prepare_sweep

    plan = prepare_sweep([*overrides, f"sweep.results_dir={tmp_path}", "sweep.name=s"])
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, overrides)
    ran: list[int] = []

    def run_batch(_dir, _cfg, batch, _bars):
        for t in batch:
            values = thr[t.world_size]
            tokens = values[min(ran.count(t.world_size), len(values) - 1)]
            ran.append(t.world_size)
            step = t.global_batch * 64 / tokens
            metrics = {
                "tokens_per_s": tokens,
                "samples_per_s": tokens / 64,
                "step_time_median_s": step,
                "allreduce_bytes": 1_882_112,
                "cpu_contention": 1.0,
                "machines": 1,
                "allreduce_probe": [[t.world_size, 1_882_112, 1e-3]] if t.world_size > 1 else [],
            }
            record = {
                "status": "completed",
                "metrics": metrics,
                "wall_s": 5.0,
                "hosts": ["h"] * t.world_size,
                "nodes": 1,
                "config": json.loads((sweep_dir / "sweep.json").read_text())["config"],
            }
            atomic_write_json(sweep_dir / "trials" / t.trial_id / "record.json", record)

    return plan, sweep_dir, run_batch, ran


def test_auto_repeats_a_size_until_its_interval_is_narrow(tmp_path, monkeypatch):
    from launcher.run import sweep

    thr = {1: [100.0, 101.0, 99.0], 2: [150.0, 200.0, 170.0, 160.0, 190.0]}
    plan, sweep_dir, run_batch, ran = _fake_sweep(tmp_path, ["sweep.repeats=auto", "sweep.world_sizes=[1,2]"], thr)
    monkeypatch.setattr(sweep, "_run_batch", run_batch)
    result = sweep.execute(sweep_dir, plan.cfg, [t for t, _ in plan.items], progress_bars=False)
    assert ran == [1, 2, 1, 2, 1, 2, 2, 2]  # three rounds of both, then 2 ranks alone to max_repeats=5
    df = result.table.set_index("trial_id")
    assert df.loc[["006-ws1-r3", "008-ws1-r4"], "status"].tolist() == ["skipped", "skipped"]
    assert df.loc["006-ws1-r3", "reason"] == (
        "sweep.repeats=auto did not need it: its tokens/s interval is ±1.0% "
        "after 3 repeats, within sweep.target_ci=0.05"
    )
    assert (df["status"] == "completed").sum() == 8
    report = (sweep_dir / "report.md").read_text()
    assert (
        "Repeats: sweep.repeats=auto (tokens/s interval to ±5%, 3–5 repeats per size): 1 rank: ±1.0% after 3; "
        "2 ranks: ±14.7% after 5 (above target at sweep.max_repeats)."
    ) in report
    ran.clear()
    sweep.execute(sweep_dir, plan.cfg, [t for t, _ in plan.items], progress_bars=False)  # a resume
    assert ran == []


def test_auto_judges_a_size_only_after_three_rounds():
    plan = RepeatPlan(planned=5, first=3, auto=True, target_ci=0.05)
    assert repeats.judge([100.0, 100.0], 2, plan) is None
    assert repeats.judge([], 3, plan) == "none of its 3 repeats completed"
    assert repeats.judge([100.0, 130.0, 90.0], 3, plan) is None
    assert repeats.judge([100.0, 130.0, 90.0, 95.0, 120.0], 5, plan).startswith("its tokens/s interval is still ±")


def test_adaptive_search_with_auto_repeats(tmp_path, monkeypatch):
    from launcher.run import sweep

    thr = {1: [100.0], 2: [190.0], 4: [200.0, 260.0, 240.0, 300.0, 280.0]}  # 4 ranks: 0.5–0.75, always below 0.8
    overrides = ["sweep.repeats=auto", "sweep.world_sizes=[1,2,4]", "sweep.search=adaptive"]
    plan, sweep_dir, run_batch, ran = _fake_sweep(tmp_path, overrides, thr)
    monkeypatch.setattr(sweep, "_run_batch", run_batch)
    result = sweep.execute(sweep_dir, plan.cfg, [t for t, _ in plan.items], progress_bars=False)
    assert ran == [1, 1, 1, 2, 2, 2, 4, 4, 4, 4, 4]  # each size in turn, repeated until narrow (or max)
    assert result.recommendation.world_size == 2
    assert build_table(sweep_dir).groupby("world_size")["status"].apply(
        lambda s: (s == "completed").sum()
    ).tolist() == [3, 3, 5]
