"""The 3-D layout fsdp_tp_pp (dp × pp × tp, tp innermost): pipeline stages whose modules are
tensor-parallel over tp and fully sharded over dp. Its rules (degrees, divisibility) checked
without processes; its parity on 8 real ranks: tests/multiprocess/test_layouts_3d_parity.py."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.trials.layout import layout_degrees
from launcher.trials.spec import sweep_trials

THREE_D = ["parallel=fsdp_tp_pp", "parallel.tp=2", "parallel.pp=2"]


def test_degrees_are_dp_times_tp_times_pp():
    cfg = compose_config(THREE_D)
    assert layout_degrees(cfg, 8) == (2, 2, 2)
    assert layout_degrees(cfg, 4) == (1, 2, 2)
    assert layout_degrees(compose_config([*THREE_D, "parallel.tp=4", "model.n_heads=8"]), 16) == (2, 4, 2)


def test_a_sweep_of_multiples_of_tp_times_pp_plans_each_size():
    cfg = compose_config([*THREE_D, "sweep.world_sizes=[4,8]"])
    assert [(t.world_size, t.dp, t.tp, t.pp, t.global_batch) for t in sweep_trials(cfg)] == [
        (4, 1, 2, 2, 8),
        (8, 2, 2, 2, 16),
    ]


@pytest.mark.parametrize(
    "overrides, world_size, message",
    [
        (
            [],
            6,
            "world size 6 is not a multiple of parallel.tp × parallel.pp = 2 × 2 = 4; dp × tp × pp must equal "
            "the world size: pick sizes that are multiples of 4",
        ),
        (
            ["model.n_heads=8", "parallel.tp=4", "model.arch=llama", "model.n_kv_heads=2"],
            8,
            "model.n_kv_heads=2 is not divisible by tp=4; tensor parallel splits it across ranks: choose a tp that "
            "divides 2",
        ),
        (
            ["model.n_heads=8", "parallel.tp=4", "model.ffn_hidden=90"],
            8,
            "model.ffn_hidden=90 is not divisible by tp=4; tensor parallel splits it across ranks: choose a tp that "
            "divides 90",
        ),
        (
            ["model.arch=mlp", "model.d_model=31", "model.ffn_mult=1"],
            4,
            "the ffn width model.ffn_mult(1) × model.d_model(31)=31 is not divisible by tp=2; tensor parallel splits "
            "it across ranks: choose a tp that divides 31",
        ),
        (
            ["model.n_layers=3"],
            4,
            # parallel.pp sets pp here, not the world size (issue 31 item 13: the hint named the world size)
            "model.n_layers=3 is not divisible by pipeline stages pp(2) × v(1) = 2; change model.n_layers, "
            "parallel.pp or parallel.virtual_stages",
        ),
    ],
)
def test_impossible_sizes_are_one_line_with_the_numbers(overrides, world_size, message):
    with pytest.raises(ConfigError) as err:
        layout_degrees(compose_config([*THREE_D, *overrides]), world_size)
    assert str(err.value) == message


def test_grouped_query_heads_that_tp_divides_are_accepted():
    cfg = compose_config([*THREE_D, "model.n_heads=8", "parallel.tp=4", "model.arch=llama", "model.n_kv_heads=4"])
    assert layout_degrees(cfg, 8) == (1, 4, 2)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["parallel.tp=null"], "parallel.layout=fsdp_tp_pp needs parallel.tp=<degree ≥ 1>; set e.g. parallel.tp=2"),
        (["parallel.pp=null"], "parallel.layout=fsdp_tp_pp needs parallel.pp=<degree ≥ 1>; set e.g. parallel.pp=2"),
        (
            ["parallel.tp=0", "parallel.pp=null"],
            "parallel.layout=fsdp_tp_pp needs parallel.tp=<degree ≥ 1> and "
            "parallel.pp=<degree ≥ 1>; set e.g. parallel.tp=2 parallel.pp=2",
        ),
        (
            ["sweep.world_sizes=[4,6]"],
            "world size 6: world size 6 is not a multiple of parallel.tp × parallel.pp = "
            "2 × 2 = 4; dp × tp × pp must equal the world size: pick sizes that are "
            "multiples of 4",
        ),
    ],
)
def test_sweep_refuses_a_3d_layout_it_cannot_run(overrides, message, tmp_path, capsys):
    """One line, exit 2, no sweep folder: before any trial starts."""
    results = tmp_path / "results"
    assert main(["sweep", "parallel=fsdp_tp_pp", *overrides, f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {message}\n"
    assert not results.exists()


def test_a_checkpointed_run_refuses_the_3d_layout_as_every_pipeline_layout():
    with pytest.raises(ConfigError) as err:
        compose_config([*THREE_D, "run.checkpoint_every=5"])
    assert str(err.value) == (
        "parallel.layout=fsdp_tp_pp cannot be checkpointed yet (run.checkpoint_every / --requeue); use one of ddp, "
        "fsdp, tp, fsdp_tp for a checkpointed run"
    )
