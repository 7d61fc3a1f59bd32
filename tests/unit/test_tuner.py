"""The tuner around the model: `launcher plan` on presets, calibration from a sweep folder, and
the adaptive-search driver deciding from trial folders."""

from __future__ import annotations

import json
import math

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.perf.comm import Topology, allreduce_s, ddp_buckets, ddp_last_bucket, group
from launcher.perf.links import LINKS
from launcher.perf.plan import from_presets_forecast, parse_gpus
from launcher.perf.stragglers import fitted_jitter, straggle


def test_gpu_ranges():
    assert parse_gpus("8..64") == [8, 16, 32, 64]
    assert parse_gpus("8..100") == [8, 16, 32, 64]
    assert parse_gpus("24,8,16,8") == [8, 16, 24]
    assert parse_gpus("64") == [64]


def test_plan_on_presets_is_the_model_on_the_recipe():
    """mlp recipe on an 8-GPU-per-node A100 site: compute = FLOPs/sample ÷ (peak × MFU); DDP's
    all-reduce of 4-byte gradients (NVLink inside a node, 400 Gb/s IB across) exposed only where it
    does not fit under the last micro-step's backward (2/3 of that micro-step's compute) left once its
    first bucket is ready, and never less than the last bucket; the compute waits for the slowest of
    the n GPUs (stragglers.straggle)."""
    from launcher.compute.flops import flops_per_token, param_counts

    cfg = compose_config(
        [
            "model=mlp",
            "cluster=example_gpu_site",
            "batch.micro=4",
            "batch.accum=2",
            "cluster.usd_per_device_hour=2",
            "sweep.token_budget=1e12",
        ]
    )
    fc = from_presets_forecast(cfg, [8, 16], assume_mfu=0.5)
    total, non_emb = param_counts(cfg.model)
    seq = cfg.model.seq_len
    grad = 4 * total

    def compute(n: int) -> float:  # 8 samples per rank per step, waiting for the slowest of n GPUs
        return flops_per_token(cfg.model, non_emb) * seq * 8 / (3.12e14 * 0.5) * straggle(n, fitted_jitter())

    def exposed(n: int) -> float:
        window = 2 / 3 * compute(n) / 2  # accum 2: DDP syncs in the second micro-step's backward only
        left = window * (1 - 2**20 / grad)  # the buckets go from when the first (1 MiB) is ready
        g, topo = group(n, 1, 8), Topology(ranks_per_node=8, tree=True)
        full = allreduce_s(grad, g, topo, LINKS["nvlink"], LINKS["ib400"], messages=ddp_buckets(grad))
        return max(allreduce_s(ddp_last_bucket(grad), g, topo, LINKS["nvlink"], LINKS["ib400"]), full - left)

    step8, step16 = compute(8) + exposed(8), compute(16) + exposed(16)
    t = fc.table.set_index("world_size")
    assert t.loc[8, "tokens_per_s"] == pytest.approx(8 * 8 * seq / step8, rel=1e-9)
    assert t.loc[16, "tokens_per_s"] == pytest.approx(16 * 8 * seq / step16, rel=1e-9)
    assert t.loc[16, "efficiency"] == pytest.approx(step8 / step16, rel=1e-9)
    assert t.loc[16, "nodes"] == 2 and (t["status"] == "predicted").all()
    assert t.loc[8, "hours_to_budget"] == pytest.approx(1e12 / t.loc[8, "tokens_per_s"] / 3600)
    assert t.loc[8, "usd_to_budget"] == pytest.approx(t.loc[8, "hours_to_budget"] * 8 * 2)
    assert fc.recommendation.world_size == (16 if step8 / step16 >= 0.8 else 8)


def test_plan_lists_a_size_the_layout_cannot_split(capsys):
    argv = [
        "plan",
        "model=gpt_1_3b",
        "cluster=example_gpu_site",
        "parallel=fsdp_tp",
        "parallel.tp=8",
        "--gpus",
        "4,8,16",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "impossible" in out and "world size 4 is not a multiple of parallel.tp=8" in out


def _fake_sweep(tmp_path, sizes, thr_of, *, search="adaptive", threshold=0.8):
    """A planned sweep folder (real plan, real trial.json files) and a `run` that writes the
    record a payload would (tokens/s from `thr_of`), so the driver is tested on its decisions."""
    from launcher.run.sweep import create_sweep_dir, prepare_sweep

    overrides = [
        f"sweep.world_sizes=[{','.join(map(str, sizes))}]",
        f"sweep.search={search}",
        f"sweep.threshold={threshold}",
        f"sweep.results_dir={tmp_path}",
        "sweep.name=s",
    ]
    plan = prepare_sweep(overrides)
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, overrides)
    ran = []

    def run(batch):
        for t in batch:
            ran.append(t.world_size)
            thr = thr_of(t.world_size)
            step = t.global_batch * 64 / thr
            n = t.world_size
            metrics = {
                "tokens_per_s": thr,
                "tokens_per_s_per_device": thr / n,
                "samples_per_s": thr / 64,
                "step_time_median_s": step,
                "allreduce_bytes": 1_882_112,
                "cpu_contention": 1.0,
                "machines": 2,
                "allreduce_probe": [[n, 1_882_112, 1e-3 * (n - 1)]] if n > 1 else [],
            }
            record = {
                "status": "completed",
                "metrics": metrics,
                "wall_s": 30 * step + 5,
                "hosts": ["h"] * n,
                "nodes": 1,
                "config": json.loads((sweep_dir / "sweep.json").read_text())["config"],
            }
            atomic_write_json(sweep_dir / "trials" / t.trial_id / "record.json", record)

    return plan, sweep_dir, run, ran


def test_adaptive_driver_doubles_refines_and_closes_the_rest(tmp_path):
    from launcher.results.table import build_table
    from launcher.run.adaptive import run_adaptive

    # efficiency 1, 0.95, 0.9 (3), 0.85 (4), 0.6 (8), … → answer 4; 8 is the first bad; 6 refines
    eff = {1: 1.0, 2: 0.95, 3: 0.9, 4: 0.85, 6: 0.7, 8: 0.6, 16: 0.4}
    plan, sweep_dir, run, ran = _fake_sweep(tmp_path, sorted(eff), lambda n: 1000.0 * n * eff[n])
    doc = run_adaptive(sweep_dir, plan.cfg, [t for t, _ in plan.items], run, log=lambda line: None)
    assert ran == [1, 2, 4, 8, 6]
    df = build_table(sweep_dir).set_index("world_size")
    assert df.loc[[3, 16], "status"].tolist() == ["skipped", "skipped"]
    assert (
        df.loc[16, "reason"]
        == "adaptive search did not need it: 4 is the largest size holding efficiency ≥ 0.80; 6 falls below it"
    )
    cost = doc["cost"]
    assert (cost["trials_run"], cost["trials_in_grid"]) == (5, 7)
    assert cost["device_hours_spent"] == pytest.approx(sum(n * (30 * 8 * 64 / (1000 * eff[n]) + 5) / 3600 for n in ran))
    assert cost["device_hours_grid_estimate"] > cost["device_hours_spent"] and 0 < cost["ratio"] < 1
    # A second run (a resumed sweep) re-derives every decision and runs nothing.
    ran.clear()
    run_adaptive(sweep_dir, plan.cfg, [t for t, _ in plan.items], run, log=lambda line: None)
    assert ran == []


def test_calibration_from_a_sweep_folder_predicts_its_own_trials(tmp_path):
    from launcher.perf.calibrate import fit_layouts, load_measured, mape, predictions

    # A step time that *is* the model: c·w + ring all-reduce + o (w = micro 8 per rank, weak scaling).
    def thr(n):
        step = 0.01 * 8 + (1e-3 * (n - 1) if n > 1 else 0.0) + 0.002
        return 8 * n * 64 / step

    plan, sweep_dir, run, _ = _fake_sweep(tmp_path, [1, 2, 4, 8], thr, search="grid")
    run([t for t, _ in plan.items])
    measured = load_measured(sweep_dir)
    models = fit_layouts(measured, "nvlink", "ib400")
    pred = predictions(measured, models, [16])
    assert mape(pred) < 1.0
    row16 = pred[pred["world_size"] == 16].iloc[0]
    assert math.isnan(row16["measured_tokens_per_s"]) and row16["low_tokens_per_s"] < row16["predicted_tokens_per_s"]
