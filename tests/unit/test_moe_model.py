"""The built-in mixture-of-experts model (launcher/train/models/moe.py): parameter counts against
the formula, capacity-free routing, the load-balancing loss, and its config checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from launcher.compute import flops
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.validate import validate
from launcher.train.models import build_model, param_counts
from launcher.train.models.moe import MoE, aux_loss, balance_loss
from launcher.trials.spec import make_trial


def tiny():
    return compose_config(["model=tiny_moe"]).model


def test_built_parameters_equal_the_formula_and_active_ones_are_fewer():
    cfg = tiny()
    torch.manual_seed(0)
    assert param_counts(build_model(cfg)) == flops.param_counts(cfg)
    # d=128, expert width 128: one expert 3·128·128 = 49152; 1 MoE block of 4 experts, top-2: 2 idle.
    assert flops.expert_params(cfg) == 49_152
    assert flops.inactive_params(cfg) == 2 * 49_152
    dense_n = flops.param_counts(cfg)[1]
    assert flops.flops_per_token(cfg) == flops.flops_per_token(cfg, dense_n)
    assert flops.flops_per_token(cfg) == 6 * (dense_n - 2 * 49_152) + 3 * flops.attention_forward_flops_per_token(cfg)


def test_each_token_output_depends_on_its_own_routing_only():
    """Capacity-free: a token's output is the same alone or in any batch (nothing dropped)."""
    torch.manual_seed(0)
    moe = MoE(16, 8, n_experts=4, top_k=2, shared=1, aux_coef=0.0)
    x = torch.randn(3, 5, 16)
    whole = moe(x)
    for i in range(3):
        torch.testing.assert_close(moe(x[i : i + 1]), whole[i : i + 1], rtol=1e-6, atol=1e-6)


def test_balance_loss_is_one_when_even_and_e_when_all_to_one():
    probs = torch.full((1, 4, 4), 0.25)
    chosen = torch.tensor([[[0, 1], [2, 3], [0, 1], [2, 3]]])
    assert balance_loss(probs, chosen).item() == pytest.approx(1.0)
    one = torch.tensor([[[1.0, 0, 0, 0]] * 4])
    assert balance_loss(one, torch.zeros(1, 4, 1, dtype=torch.int64)).item() == pytest.approx(4.0)


def test_aux_loss_is_taken_once_per_forward():
    cfg = tiny()
    torch.manual_seed(0)
    model = build_model(cfg)
    model(torch.randint(0, cfg.vocab_size, (2, cfg.seq_len)))
    first = aux_loss(model)
    assert isinstance(first, torch.Tensor) and 0.01 <= first.item() < 0.04  # coef 0.01 × (1 ≤ E·Σ fP ≤ 4)
    assert aux_loss(model) == 0.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.experts_per_token=5"], "model.experts_per_token=5 is more than model.n_experts=4"),
        (["model.dense_layers=2"], "model.dense_layers=2 must be in 0..1"),
        (["model.arch=gpt", "model.n_kv_heads=null"], "model.n_experts=4 makes the built-in llama blocks MoE"),
        (["parallel=fsdp_tp", "parallel.tp=2"], "parallel.layout=fsdp_tp does not run a mixture-of-experts"),
    ],
)
def test_moe_config_errors_are_one_line_with_the_numbers(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate(compose_config(["model=tiny_moe", *overrides]))


def test_a_dense_llama_is_unchanged():
    cfg = dataclasses.replace(tiny(), n_experts=0)
    assert flops.inactive_params(cfg) == 0 and flops.moe_layers(cfg) == 0


@pytest.mark.parametrize(
    ("overrides", "world", "message"),
    [
        (["parallel.ep=4"], 2, "parallel.ep=4 does not divide dp=2"),
        (["parallel.ep=3"], 3, "model.n_experts=4 is not divisible by parallel.ep=3"),
    ],
)
def test_expert_degree_is_checked_per_size_in_one_line(overrides, world, message):
    cfg = validate(compose_config(["model=tiny_moe", "parallel=fsdp_ep", *overrides]))
    with pytest.raises(ConfigError, match=f"^{message}"):
        make_trial(cfg, index=0, world_size=world, steps=2, warmup_steps=1)


def test_a_trial_of_fsdp_ep_carries_ep_and_dp_keeps_the_world():
    cfg = validate(compose_config(["model=tiny_moe", "parallel=fsdp_ep", "parallel.ep=2"]))
    trial = make_trial(cfg, index=0, world_size=4, steps=2, warmup_steps=1)
    assert (trial.dp, trial.ep, trial.tp, trial.pp) == (4, 2, 1, 1)
    assert make_trial(compose_config(["model=tiny_moe"]), index=0, world_size=2, steps=2, warmup_steps=1).ep == 1
