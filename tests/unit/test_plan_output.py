"""`launcher plan --output`: the predicted table as a file, impossible sizes in it with the reason,
the preset constants read from the replay's fit, a strong-scaling sweep planned by the sweep's own
rule, and a recommendation whose rounding never contradicts itself."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from launcher.cli import main
from launcher.compute.flops import flops_per_token, hardware_flops_per_token
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.perf import preset_fit
from launcher.perf.plan import from_presets_forecast
from launcher.results.policy import recommend
from launcher.results.scaling import add_scaling

pytestmark = pytest.mark.usefixtures("one_mfu_presets")  # pins the one-MFU presets (conftest)

ACCEPTANCE = [
    "plan",
    "model=llama3_8b",
    "precision=bf16",
    "model.activation_checkpointing=full",
    "parallel=fsdp",
    "batch.micro=1",
    "cluster=example_gpu_site",
    "cluster.peak_flops_per_device=9.89e14",
    "cluster.gpus_per_node=8",
    "cluster.inter_link=ib400",
    "cluster.nics_per_node=8",
    "--gpus",
    "8..1024",
]
COLUMNS = [
    "gpus",
    "nodes",
    "status",
    "tokens_per_s",
    "tokens_per_s_lo",
    "tokens_per_s_hi",
    "tokens_per_s_per_device",
    "efficiency",
    "mfu",
    "hfu",
    "reason",
]


def test_the_acceptance_command_writes_every_size_with_the_columns(tmp_path, capsys):
    out = tmp_path / "plan.csv"
    assert main([*ACCEPTANCE, "--output", str(out)]) == 0
    df = pd.read_csv(out)
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert df["gpus"].tolist() == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert df["nodes"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128]
    assert (df["status"] == "predicted").all() and df["reason"].isna().all()
    assert (df["tokens_per_s_lo"] < df["tokens_per_s"]).all() and (df["tokens_per_s"] < df["tokens_per_s_hi"]).all()
    assert df["tokens_per_s_per_device"].tolist() == pytest.approx((df["tokens_per_s"] / df["gpus"]).tolist())
    assert df.loc[0, "efficiency"] == 1.0
    model = compose_config(["model=llama3_8b", "model.activation_checkpointing=full"]).model
    assert df["mfu"].tolist() == pytest.approx(
        (df["tokens_per_s_per_device"] * flops_per_token(model) / 9.89e14).tolist()
    )
    assert df["hfu"].tolist() == pytest.approx(
        (df["mfu"] * hardware_flops_per_token(model) / flops_per_token(model)).tolist()
    )
    assert f"table written to {out}" in capsys.readouterr().out


def test_parquet_by_suffix_and_impossible_sizes_kept_with_their_reason(tmp_path):
    out = tmp_path / "plan.parquet"
    argv = [
        "plan",
        "model=gpt_1_3b",
        "cluster=example_gpu_site",
        "parallel=fsdp_tp",
        "parallel.tp=8",
        "--gpus",
        "4,8,16",
    ]
    assert main([*argv, "--output", str(out)]) == 0
    df = pd.read_parquet(out).set_index("gpus")
    assert df.loc[4, "status"] == "impossible" and math.isnan(df.loc[4, "tokens_per_s"])
    assert "world size 4 is not a multiple of parallel.tp=8" in df.loc[4, "reason"]
    assert df.loc[[8, 16], "status"].tolist() == ["predicted", "predicted"]


@pytest.mark.parametrize("name", ["plan.txt", "plan", "plan.csv.gz"])
def test_an_output_of_another_kind_is_one_line_and_nothing_is_written(tmp_path, capsys, name):
    out = tmp_path / name
    assert main([*ACCEPTANCE, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"launcher: error: --output {str(out)!r} must end in .csv or .parquet (the format follows the suffix); "
        "e.g. --output plan.csv\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_presets_assume_the_fitted_mfu_and_interval_and_say_so():
    fit = preset_fit.load()
    cfg = compose_config(
        [
            "model=llama3_8b",
            "precision=bf16",
            # ddp of 8B parameters, activations of 8 samples of 8192 tokens: oom (predicted) on 80 GiB
            "parallel=fsdp",
            "model.activation_checkpointing=full",
            "batch.micro=1",
            "cluster=example_gpu_site",
            "cluster.device_name=NVIDIA H100 80GB HBM3",
            "cluster.peak_flops_per_device=null",
        ]
    )
    fc = from_presets_forecast(cfg, [8], assume_mfu=None)
    mfu, said = fit.mfu_for("NVIDIA H100 80GB HBM3", "bf16")
    given = from_presets_forecast(cfg, [8], assume_mfu=mfu).table.iloc[0]
    row = fc.table.iloc[0]
    assert row["tokens_per_s"] == given["tokens_per_s"]
    # The interval is the replay's quantile of |ln(predicted/published)| either side of the prediction.
    assert row["tokens_per_s_lo"] == pytest.approx(row["tokens_per_s"] * math.exp(-fit.interval_log))
    assert row["tokens_per_s_hi"] == pytest.approx(row["tokens_per_s"] * math.exp(fit.interval_log))
    assert f"× MFU {mfu:.2f} ({said})" in fc.source and "replay's leave-one-source-out errors" in fc.source
    assert "not a constant" in fc.source


def test_a_peak_that_does_not_fit_the_named_device_takes_the_every_device_mfu():
    fit = preset_fit.load()
    cfg = compose_config(
        ["model=llama3_8b", "precision=bf16", "cluster=example_gpu_site", "cluster.peak_flops_per_device=9.89e14"]
    )
    assert (
        f"× MFU {fit.mfu_any_device:.2f} (fitted on {fit.rows} published runs of every device; "
        "cluster.peak_flops_per_device is not A100-80GB's, so no device's own fit applies)"
    ) in from_presets_forecast(cfg, [8], assume_mfu=None).source


def test_a_damaged_fit_file_is_one_line(tmp_path):
    bad = tmp_path / "preset_fit.json"
    bad.write_text("{")
    with pytest.raises(Exception) as info:
        preset_fit.load(bad)
    assert str(info.value).startswith(f"the preset constants {str(bad)!r} cannot be read (")
    assert str(info.value).endswith("reinstall launcher or rerun benchmarks/published_replay.py, or pass --assume-mfu")


def _strong_sweep(tmp_path):
    """A measured strong-scaling sweep (global batch 64, micro 8) at 1, 2, 4, 8 ranks."""
    from launcher.run.sweep import create_sweep_dir, prepare_sweep

    overrides = [
        "model=mlp",
        "batch.global_batch=64",
        "batch.micro=8",
        "sweep.world_sizes=[1,2,4,8]",
        f"sweep.results_dir={tmp_path}",
        "sweep.name=s",
    ]
    plan = prepare_sweep(overrides)
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, overrides)
    config = json.loads((sweep_dir / "sweep.json").read_text())["config"]
    for t, _ in plan.items:
        n = t.world_size
        step = 0.01 * t.global_batch / n + (1e-3 * (n - 1) if n > 1 else 0.0)
        thr = t.global_batch * config["model"]["seq_len"] / step
        metrics = {
            "tokens_per_s": thr,
            "tokens_per_s_per_device": thr / n,
            "step_time_median_s": step,
            "allreduce_bytes": 1_882_112,
            "cpu_contention": 1.0,
            "machines": 1,
            "allreduce_probe": [[n, 1_882_112, 1e-3 * (n - 1)]] if n > 1 else [],
        }
        atomic_write_json(
            sweep_dir / "trials" / t.trial_id / "record.json",
            {"status": "completed", "metrics": metrics, "wall_s": 30 * step + 5, "config": config},
        )
    return sweep_dir


def test_plan_from_a_strong_scaling_sweep_refuses_what_the_sweep_refuses(tmp_path):
    out = tmp_path / "plan.csv"
    assert main(["plan", "--from", str(_strong_sweep(tmp_path)), "--gpus", "4,8,16,32", "--output", str(out)]) == 0
    df = pd.read_csv(out).set_index("gpus")
    assert df.loc[[4, 8], "status"].tolist() == ["predicted", "predicted"]
    for n in (16, 32):
        assert df.loc[n, "status"] == "impossible" and math.isnan(df.loc[n, "tokens_per_s"])
        assert df.loc[n, "reason"] == (
            f"batch.global_batch=64 is not divisible by batch.micro(8) × dp({n}) = {8 * n}; "
            f"choose a multiple of {8 * n} or another batch.micro"
        )


def test_presets_refuse_the_same_sizes_by_the_same_rule():
    cfg = compose_config(["model=gpt_125m", "cluster=example_gpu_site", "batch.global_batch=64", "batch.micro=8"])
    t = from_presets_forecast(cfg, [4, 8, 16], assume_mfu=0.4).table.set_index("world_size")
    assert t.loc[[4, 8], "status"].tolist() == ["predicted", "predicted"] and t.loc[16, "status"] == "impossible"
    assert t.loc[16, "reason"].startswith("batch.global_batch=64 is not divisible by batch.micro(8) × dp(16) = 128;")


def _reason(efficiencies: dict[int, float]) -> str:
    df = pd.DataFrame(
        {
            "world_size": list(efficiencies),
            "status": "completed",
            "scaling": "strong",
            "tokens_per_s": [1000.0 * n * e for n, e in efficiencies.items()],
        }
    )
    return recommend(add_scaling(df), 0.8, unit="GPU").reason


@pytest.mark.parametrize("below, shown", [(0.7996, "0.7996"), (0.79, "0.79"), (0.79999999, "0.79999999")])
def test_an_efficiency_just_under_the_threshold_never_reads_as_the_threshold(below, shown):
    reason = _reason({8: 1.0, 16: 0.9, 32: below})
    assert reason.startswith("16 GPUs: largest size with strong-scaling efficiency ≥ 0.80 (0.90, 1.80× the throughput")
    assert f"; 32 GPUs reach only {shown} (" in reason


def test_a_pick_at_the_threshold_reads_at_it():
    assert _reason({8: 1.0, 16: 0.8, 32: 0.5}).startswith(
        "16 GPUs: largest size with strong-scaling efficiency ≥ 0.80 (0.80,"
    )
