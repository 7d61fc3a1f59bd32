"""The commands README.md and docs/ show that no other test runs, run where it is cheap: composed
(`--cfg`), planned into trials, or dry-run, and what they mean checked field by field.
tests/unit/test_docs.py's REGISTRY names each test here beside the command it runs."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.load import load_config
from launcher.trials.spec import sweep_trials


def _cfg_of(argv: list[str], capsys) -> list:
    """`launcher sweep ARGV --cfg`: each printed combination, read back as a config."""
    assert main(["sweep", *argv, "--cfg"]) == 0
    out = capsys.readouterr().out
    docs = out.split("# --- ")[1:] or ["\n" + out]
    return [load_config(OmegaConf.to_container(OmegaConf.create(d.split("\n", 1)[1]))) for d in docs]


def test_weak_scaling_of_the_mlp_with_a_linear_learning_rate(capsys):
    """`launcher sweep model=mlp sweep.world_sizes='[1,2]' batch.micro=16 batch.accum=2 optim.lr_scaling=linear`."""
    argv = ["model=mlp", "sweep.world_sizes=[1,2]", "batch.micro=16", "batch.accum=2", "optim.lr_scaling=linear"]
    (cfg,) = _cfg_of(argv, capsys)
    assert (cfg.model.name, cfg.batch.micro, cfg.batch.accum, cfg.optim.lr_scaling) == ("mlp", 16, 2, "linear")
    trials = sweep_trials(compose_config(argv))
    assert [(t.world_size, t.accum, t.global_batch, t.scaling) for t in trials] == [
        (1, 2, 32, "weak"),
        (2, 2, 64, "weak"),
    ]
    assert trials[1].lr == pytest.approx(2 * trials[0].lr)


def test_strong_scaling_derives_the_accumulation_per_size():
    """`launcher sweep batch.global_batch=64 sweep.world_sizes='[1,2,4]'`: micro 8 (the default)."""
    trials = sweep_trials(compose_config(["batch.global_batch=64", "sweep.world_sizes=[1,2,4]"]))
    assert [(t.world_size, t.micro, t.accum, t.global_batch, t.scaling) for t in trials] == [
        (1, 8, 8, 64, "strong"),
        (2, 8, 4, 64, "strong"),
        (4, 8, 2, 64, "strong"),
    ]


def test_a_comma_sweep_of_layouts_and_accumulation_is_every_combination(capsys):
    """`launcher sweep parallel=ddp,fsdp batch.accum=1,4`."""
    cfgs = _cfg_of(["parallel=ddp,fsdp", "batch.accum=1,4"], capsys)
    assert [(c.parallel.layout, c.batch.accum) for c in cfgs] == [("ddp", 1), ("ddp", 4), ("fsdp", 1), ("fsdp", 4)]


def test_adaptive_search_over_the_sizes_shown(capsys):
    """`launcher sweep sweep.search=adaptive sweep.world_sizes='[1,2,3,4,6,8]'` (test_tuner.py runs the driver)."""
    (cfg,) = _cfg_of(["sweep.search=adaptive", "sweep.world_sizes=[1,2,3,4,6,8]"], capsys)
    assert (cfg.sweep.search, list(cfg.sweep.world_sizes)) == ("adaptive", [1, 2, 3, 4, 6, 8])


def test_a_price_a_spot_discount_and_a_token_budget(capsys):
    """`launcher sweep cluster.usd_per_device_hour=2.5 cluster.spot_discount=0.6 sweep.token_budget=2e11`."""
    (cfg,) = _cfg_of(
        ["cluster.usd_per_device_hour=2.5", "cluster.spot_discount=0.6", "sweep.token_budget=2e11"], capsys
    )
    assert (cfg.cluster.usd_per_device_hour, cfg.cluster.spot_discount, cfg.sweep.token_budget) == (2.5, 0.6, 2e11)


def test_the_fastest_size_within_a_budget(capsys):
    """`launcher sweep sweep.policy=fastest_within_budget sweep.token_budget=2e11 sweep.budget_device_hours=20000`
    (test_bad_input.py: without the budget it is refused; test_analysis.py: the policy's pick)."""
    argv = ["sweep.policy=fastest_within_budget", "sweep.token_budget=2e11", "sweep.budget_device_hours=20000"]
    (cfg,) = _cfg_of(argv, capsys)
    assert (cfg.sweep.policy, cfg.sweep.token_budget, cfg.sweep.budget_device_hours) == (
        "fastest_within_budget",
        2e11,
        20000,
    )


def test_a_local_run_dry_run_prints_each_ranks_command_and_creates_nothing(tmp_path, capsys, monkeypatch):
    """`launcher run run.world_size=2 --dry-run`."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "run.world_size=2", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    ranks = [ln for ln in out if ln.startswith("MASTER_ADDR=")]
    assert [ln.split()[1:3] for ln in ranks] == [["RANK=0", "WORLD_SIZE=2"], ["RANK=1", "WORLD_SIZE=2"]]
    assert all("-m launcher.train --trial" in ln for ln in ranks)
    assert list(tmp_path.iterdir()) == []


def test_a_plan_of_a_doubling_range_predicts_every_size(capsys):
    """`launcher plan model=gpt_1_3b parallel=fsdp cluster=example_gpu_site --gpus 8..16384`: nothing runs."""
    assert main(["plan", "model=gpt_1_3b", "parallel=fsdp", "cluster=example_gpu_site", "--gpus", "8..16384"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split("│")[1].strip() for ln in out.splitlines() if ln.startswith("│")]
    assert rows == [str(8 * 2**i) for i in range(12)]
    assert "predicted" in out and "Recommended GPUs: " in out


def test_analyze_judges_a_table_measured_elsewhere_and_prices_it(tmp_path, capsys):
    """`launcher analyze measured.csv --usd-per-gpu-hour 2.5` (test_analysis.py: time-to-train tables)."""
    table = tmp_path / "measured.csv"
    table.write_text("gpus,tokens_per_s\n8,1000\n16,1900\n32,3000\n")
    assert main(["analyze", str(table), "--usd-per-gpu-hour", "2.5"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
    # $ per 1M tokens = GPUs × $2.5/h ÷ (tokens/s × 3600 s) × 1e6
    assert [(r[0], r[3], r[4]) for r in rows] == [
        ("8", "1.00", "5.5556"),
        ("16", "0.95", "5.8480"),
        ("32", "0.75", "7.4074"),
    ]
    assert "Recommended GPUs: 16 — 16 GPUs: largest size with" in out
