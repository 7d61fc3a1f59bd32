"""Batch arithmetic and LR scaling: tables of hand-computed cases."""

from __future__ import annotations

import math

import pytest

from launcher.config.compose import compose_config
from launcher.config.derived import batch_math, scaled_lr
from launcher.config.errors import ConfigError
from launcher.config.schema import BatchConfig, OptimConfig
from launcher.trials.spec import sweep_trials


@pytest.mark.parametrize(
    "micro, accum, global_, dp, want_accum, want_global",
    [
        (8, 1, None, 1, 1, 8),
        (8, 1, None, 4, 1, 32),
        (4, 4, None, 2, 4, 32),
        (16, 2, None, 8, 2, 256),
        (8, 1, 64, 1, 8, 64),  # strong scaling: accum derived
        (8, 1, 64, 2, 4, 64),
        (8, 1, 64, 8, 1, 64),
        (8, 4, 64, 2, 4, 64),  # explicit accum that agrees
    ],
)
def test_global_batch_is_micro_times_accum_times_dp(micro, accum, global_, dp, want_accum, want_global):
    m = batch_math(BatchConfig(micro=micro, accum=accum, global_batch=global_), dp)
    assert (m.micro, m.accum, m.dp, m.global_batch) == (micro, want_accum, dp, want_global)
    assert m.global_batch == m.micro * m.accum * m.dp


@pytest.mark.parametrize(
    "micro, accum, global_, dp, message",
    [
        (
            8,
            1,
            100,
            4,
            "batch.global_batch=100 is not divisible by batch.micro(8) × dp(4) = 32; choose a multiple of 32 or "
            "another batch.micro",
        ),
        (
            8,
            1,
            32,
            8,
            "batch.global_batch=32 is not divisible by batch.micro(8) × dp(8) = 64; choose a multiple of 64 or "
            "another batch.micro",
        ),
        (
            8,
            2,
            64,
            2,
            "batch.global_batch=64 ≠ batch.micro(8) × batch.accum(2) × dp(2) = 32; set batch.accum=4 or leave it at "
            "1 to derive it",
        ),
    ],
)
def test_impossible_batches_carry_the_numbers(micro, accum, global_, dp, message):
    with pytest.raises(ConfigError) as info:
        batch_math(BatchConfig(micro=micro, accum=accum, global_batch=global_), dp)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "rule, global_batch, want",
    [("none", 64, 1e-3), ("linear", 64, 8e-3), ("linear", 4, 5e-4), ("sqrt", 32, 2e-3), ("sqrt", 8, 1e-3)],
)
def test_lr_scaling_rules(rule, global_batch, want):
    assert math.isclose(scaled_lr(OptimConfig(lr=1e-3, lr_scaling=rule, base_global_batch=8), global_batch), want)


def test_sweep_plan_weak_and_strong():
    weak = sweep_trials(compose_config(["sweep.world_sizes=[4,1,2]", "optim.lr_scaling=linear"]))
    assert [(t.trial_id, t.world_size, t.global_batch, t.accum, t.lr, t.scaling) for t in weak] == [
        ("000-ws1", 1, 8, 1, 1e-3, "weak"),
        ("001-ws2", 2, 16, 1, 2e-3, "weak"),
        ("002-ws4", 4, 32, 1, 4e-3, "weak"),
    ]
    strong = sweep_trials(compose_config(["sweep.world_sizes=[1,2,4]", "batch.global_batch=32"]))
    assert [(t.world_size, t.global_batch, t.accum, t.scaling) for t in strong] == [
        (1, 32, 4, "strong"),
        (2, 32, 2, "strong"),
        (4, 32, 1, "strong"),
    ]


@pytest.mark.parametrize(
    "world_sizes, want",
    [
        # dp_pp pp=2, global 32, micro 2: m = 32 ÷ (2 × dp); the rank's micro-step is micro × m
        ([2, 4, 8], [(1, 16, 32), (2, 8, 16), (4, 4, 8)]),
    ],
)
def test_a_fixed_global_batch_derives_a_pipelines_microbatches_per_size(world_sizes, want):
    """Megatron's semantics: batch.micro is the micro-batch size, m = global ÷ (micro × dp), accum folds in."""
    cfg = compose_config(
        [
            "parallel=dp_pp",
            "parallel.pp=2",
            "batch.global_batch=32",
            "batch.micro=2",
            f"sweep.world_sizes={world_sizes}",
        ]
    )
    trials = sweep_trials(cfg)
    assert [(t.dp, t.microbatches, t.micro) for t in trials] == want
    assert {(t.accum, t.global_batch, t.scaling) for t in trials} == {(1, 32, "strong")}


def test_without_a_global_batch_parallel_microbatches_still_splits_batch_micro():
    over = ["parallel=dp_pp", "parallel.pp=2", "batch.micro=8", "parallel.microbatches=4", "sweep.world_sizes=[2]"]
    cfg = compose_config(over)
    (t,) = sweep_trials(cfg)
    assert (t.micro, t.microbatches, t.accum, t.global_batch, t.scaling) == (8, 4, 1, 8, "weak")


def test_the_trial_document_carries_the_derived_split_and_reading_it_again_changes_nothing():
    from launcher.config.derived import pipeline_batch  # lazy: only this test reads it
    from launcher.trials.folder import from_document, trial_document  # lazy: only this test reads it

    cfg = compose_config(["parallel=pipeline", "batch.global_batch=8", "batch.micro=2", "sweep.world_sizes=[2]"])
    (trial,) = sweep_trials(cfg)
    _, run = from_document(trial_document(trial, cfg))
    assert (run.batch.micro, run.parallel.microbatches, run.batch.accum) == (8, 4, 1)
    assert pipeline_batch(run, trial.dp) == run


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["batch.global_batch=30", "batch.micro=4"],
            "world size 4: batch.global_batch=30 is not divisible by batch.micro(4) × batch.accum(1) × dp(2) = 8: "
            "a pipeline runs global ÷ (micro × accum × dp) micro-batches per step; choose a multiple of 8 or "
            "another batch.micro",
        ),
        (
            ["batch.global_batch=8", "batch.micro=8", "sweep.world_sizes=[2]"],
            "world size 2: batch.global_batch(8) ÷ (batch.micro(8) × batch.accum(1) × dp(1)) = 1 micro-batches < "
            "pp=2 pipeline ranks: a schedule needs at least one microbatch per rank; lower batch.micro",
        ),
    ],
)
def test_a_global_batch_a_pipeline_cannot_split_is_one_line_with_the_numbers(overrides, message):
    cfg = compose_config(["parallel=dp_pp", "parallel.pp=2", "sweep.world_sizes=[4]", *overrides])
    with pytest.raises(ConfigError) as err:
        sweep_trials(cfg)
    assert str(err.value) == message
