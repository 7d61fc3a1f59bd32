"""model.head_dim (issue 32, nous_deepep_2511): heads wider than d_model / n_heads, as Qwen3's 128 over a
width of 2048 with 32 heads. The parameter count, FLOPs and activation memory from the config (launcher/
compute/flops.py, perf/memory_activations.py) against a hand count and the built model; the built llama
and MoE models have those parameters and train; bad values are one line and exit 2 through `launcher
plan`; the published replay maps Qwen3-30B-A3B with its config's 128."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmarks.replay_mapping import map_row
from launcher.cli import main
from launcher.compute import flops
from launcher.config.compose import compose_config
from launcher.config.derived import head_dim
from launcher.config.schema import ModelConfig
from launcher.perf import memory_activations as act
from launcher.train.models import build_model, param_counts
from tests.unit.test_memory import measured_saved_bytes_per_token

ROOT = Path(__file__).resolve().parents[2]
# d 32 over 8 heads would be 4 wide; these heads are 12 wide (q and o 96, k and v 2 × 12 = 24).
WIDE = ModelConfig(
    arch="llama", vocab_size=96, seq_len=16, d_model=32, n_layers=2, n_heads=8, n_kv_heads=2, ffn_hidden=88, head_dim=12
)


def test_the_head_width_is_model_head_dim_or_d_over_h():
    assert head_dim(WIDE) == 12
    assert head_dim(dataclasses.replace(WIDE, head_dim=None)) == 4


def test_parameters_and_flops_per_token_of_wide_heads_equal_a_hand_count():
    d, q, kv, f, v, L, T = 32, 8 * 12, 2 * 12, 88, 96, 2, 16
    block = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d  # wq, wk, wv, wo, SwiGLU, two RMSNorms
    non_embedding = L * block + d + d * v  # final norm, untied head
    assert flops.param_counts(WIDE) == (v * d + non_embedding, non_embedding)
    # 6N + 12·L·H·Q·T with Q the head width, not d / H.
    assert flops.flops_per_token(WIDE) == 6 * non_embedding + 12 * L * 8 * 12 * T
    assert flops.attention_forward_flops_per_token(WIDE) == 4 * L * 8 * 12 * T


def test_the_ops_price_the_wide_projections_and_sum_to_the_hardware_flops():
    ops = {op.name: op for op in flops.model_ops(WIDE, tokens=64)}
    assert (ops["wq"].n, ops["wq"].k, ops["wo"].n, ops["wo"].k, ops["wk"].n) == (96, 32, 32, 96, 24)
    assert ops["attention"].k == 12
    assert sum(op.flops for op in ops.values()) == pytest.approx(flops.hardware_flops_per_token(WIDE))


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_the_built_llama_with_head_dim_has_exactly_those_parameters_and_trains_a_step(moe):
    cfg = dataclasses.replace(WIDE, n_experts=4, experts_per_token=2, dense_layers=1) if moe else WIDE
    model = build_model(cfg, seed=5)
    attn = model.blocks[0].attn
    assert (tuple(attn.q.weight.shape), tuple(attn.k.weight.shape), tuple(attn.proj.weight.shape)) == (
        (96, 32),
        (24, 32),
        (32, 96),
    )
    assert param_counts(model) == flops.param_counts(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len + 1), generator=torch.Generator().manual_seed(0))
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    losses = []
    for _ in range(2):  # one step, then the loss after it
        loss = F.cross_entropy(model(idx[:, :-1]).reshape(-1, cfg.vocab_size), idx[:, 1:].reshape(-1))
        losses.append(loss.item())
        optim.zero_grad()
        loss.backward()
        optim.step()
    assert losses[1] < losses[0]
    assert not torch.equal(before["blocks.0.attn.q.weight"], model.blocks[0].attn.q.weight)


@pytest.mark.parametrize("mixed", [False, True], ids=["fp32", "mixed"])
def test_activation_memory_grows_with_head_dim_as_a_built_block_saves(mixed):
    """Each step of the head width adds q and the attention output (n_heads wide) and k and v (n_kv_heads
    wide) to what a block saves; the estimate follows a built block within 3% (as test_memory.py's)."""
    base = dataclasses.replace(compose_config(["model=tiny_llama"]).model, head_dim=None)  # 8 heads of 16
    wide = dataclasses.replace(base, head_dim=32)
    grown = act.saved_bytes_per_token(wide, mixed) - act.saved_bytes_per_token(base, mixed)
    assert grown == (4 if not mixed else 2) * (2 * 8 + 2 * 4) * (32 - 16)
    measured = measured_saved_bytes_per_token(wide, mixed)
    assert act.saved_bytes_per_token(wide, mixed) == pytest.approx(measured, rel=0.03)
    op = dataclasses.replace(wide, activation_checkpointing="op")
    assert act.op_kept_bytes(op, mixed, False) > act.op_kept_bytes(dataclasses.replace(op, head_dim=None), mixed, False)


PLAN = ["plan", "cluster=example_gpu_site"]


@pytest.mark.parametrize(
    "over, message",
    [
        (
            ["model=tiny_llama", "model.head_dim=0"],
            "model.head_dim=0 must be a positive integer; set e.g. model.head_dim=16",
        ),
        (
            ["model=tiny_llama", "model.head_dim=15"],
            "model.head_dim=15 is odd; RoPE rotates pairs of a head's dimensions: pick an even head width, "
            "e.g. model.head_dim=16",
        ),
        (
            ["model=tiny_gpt", "model.head_dim=64"],
            "model.head_dim=64 applies to arch=llama only (gpt's memory estimate assumes heads of d_model ÷ "
            "n_heads); remove it, or set model.arch=llama",
        ),
    ],
    ids=["zero", "odd", "gpt"],
)
def test_a_bad_head_dim_is_one_line_and_exit_2_through_plan(over, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*PLAN, *over, "--gpus", "8"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {message}\n"
    assert list(tmp_path.iterdir()) == []


def test_wide_heads_need_no_width_divisible_by_the_head_count(capsys):
    """Gemma-style: d_model 120 over 8 heads is refused without model.head_dim, planned with it."""
    over = ["model=tiny_llama", "model.d_model=120", "model.n_heads=8", "model.n_kv_heads=4"]
    assert main([*PLAN, *over, "model.head_dim=16", "--gpus", "8"]) == 0
    capsys.readouterr()
    assert main([*PLAN, *over, "--gpus", "8"]) == 2
    assert "or set model.head_dim" in capsys.readouterr().err


def _published(model: str) -> list[dict]:
    with open(ROOT / "benchmarks/data/published_scaling.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["model"] == model]


def test_the_replay_maps_qwen3_with_its_128_wide_heads_and_counts_its_flops():
    """Qwen/Qwen3-30B-A3B config.json: head_dim 128 (d 2048 / 32 heads would be 64). The planned model
    then does Qwen3's 26.0 GFLOP a token in its blocks, 27.9 with the output head (20.4 before)."""
    for row in _published("Qwen3-30B-A3B"):  # nous_deepep_2511 and automodel_ephybrid_2607
        mapped = map_row(row)
        assert "model.head_dim=128" in mapped.overrides
        assert any(a.startswith("head_dim 128, not d/H = 64: Qwen/Qwen3-30B-A3B config.json") for a in mapped.assumed)
    nous = next(r for r in _published("Qwen3-30B-A3B") if r["source"] == "nous_deepep_2511")
    model = compose_config(map_row(nous).overrides).model
    assert flops.flops_per_token(model) == 27_914_809_344
    assert flops.flops_per_token(model) - 6 * flops.model_parts(model).head == 26_047_819_776
    llama = map_row(_published("Llama-3.1-8B")[0])
    assert not any(o.startswith("model.head_dim=") for o in llama.overrides)  # 4096 / 32 = 128 already
