"""FLOPs per token from the config (launcher/compute/flops.py, pure) against an independent count:
torch's FlopCounterMode on a real forward and backward of the built model (matmuls, attention
through the math kernel so its two batched matmuls are seen), with and without activation
checkpointing. Parameter counts against the module built on the meta device are in
test_metrics.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from launcher.compute import flops
from launcher.config.compose import compose_config
from launcher.config.schema import ModelConfig
from launcher.train.models import build_model, param_counts

BATCH = 2
# Small shapes that still exercise what the formulas distinguish: grouped-query attention
# (8 q heads, 2 kv heads), an ffn width that is no multiple of d, a head wider than d.
LLAMA = ModelConfig(
    arch="llama", vocab_size=96, seq_len=16, d_model=32, n_layers=2, n_heads=8, n_kv_heads=2, ffn_hidden=88
)
GPT = ModelConfig(arch="gpt", vocab_size=96, seq_len=16, d_model=32, n_layers=2, n_heads=4)
MLP = ModelConfig(arch="mlp", vocab_size=96, seq_len=16, d_model=32, n_layers=2, n_heads=1)


def fused_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """CPU's fused attention forward: scores and weighted values, 2·b·H·Tq·Tk·Q each (query
    heads: grouped-query keys and values are shared, not fewer scores)."""
    b, h, t_q, q = query
    return 4 * b * h * t_q * key[2] * q


def fused_attention_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return 2 * fused_attention_flops(query, key, value)


FUSED = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: fused_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: fused_attention_backward_flops,
}


def counted_per_token(cfg: ModelConfig, *, fused: bool = False) -> float:
    """FlopCounterMode's FLOPs of one training step's forward and backward, per token. Attention
    through the math kernel (torch counts its batched matmuls), or `fused`: the kernel training
    uses, which saves its output and so reruns whole under selective recompute (the math
    kernel's last matmul would not), counted by the formula above."""
    torch.manual_seed(0)
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (BATCH, cfg.seq_len + 1))
    kernel = sdpa_kernel(SDPBackend.FLASH_ATTENTION if fused else SDPBackend.MATH)
    with kernel, FlopCounterMode(display=False, custom_mapping=FUSED) as counter:
        logits = model(idx[:, :-1])
        F.cross_entropy(logits.reshape(-1, cfg.vocab_size), idx[:, 1:].reshape(-1)).backward()
    return counter.get_total_flops() / (BATCH * cfg.seq_len)


def not_matmul(model: nn.Module, *, blocks_only: bool = False) -> int:
    """Non-embedding parameters no matmul multiplies (norm weights, biases): in the 6N convention
    they count as if they did; a matmul counter does not see them."""
    scope = model.blocks if blocks_only else model
    linear_weights = sum(m.weight.numel() for m in scope.modules() if isinstance(m, nn.Linear))
    if blocks_only:
        return sum(p.numel() for p in scope.parameters()) - linear_weights
    return param_counts(model)[1] - linear_weights


@pytest.mark.parametrize("cfg", [LLAMA, GPT, MLP], ids=["llama", "gpt", "mlp"])
def test_model_flops_per_token_equal_the_counted_matmuls(cfg):
    with torch.device("meta"):
        model = build_model(cfg)
    expected = flops.flops_per_token(cfg) - 6 * not_matmul(model)
    assert counted_per_token(cfg) == expected
    assert counted_per_token(cfg, fused=True) == expected  # the fused kernel's formula agrees with torch's count


def rerun_not_matmul(model: nn.Module) -> int:
    """Block parameters full recompute counts at 2 FLOPs each that no recomputed matmul
    multiplies: norms and biases, less the bias of each block's last Linear (never rerun)."""
    total = 0
    for block in model.blocks:
        last = block.ffn.w2 if hasattr(block.ffn, "w2") else block.ffn[2]
        total += sum(p.numel() for p in block.parameters()) - sum(
            m.weight.numel() for m in block.modules() if isinstance(m, nn.Linear)
        )
        total -= last.bias.numel() if last.bias is not None else 0
    return total


@pytest.mark.parametrize("cfg", [LLAMA, GPT, MLP], ids=["llama", "gpt", "mlp"])
@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recompute_flops_are_what_a_checkpointed_step_runs_more(cfg, mode):
    """The same step, with checkpointing and without: the difference is the recompute."""
    ac = dataclasses.replace(cfg, activation_checkpointing=mode)
    with torch.device("meta"):
        model = build_model(ac)
    extra = counted_per_token(ac, fused=True) - counted_per_token(cfg, fused=True)
    by_formula = flops.recompute_flops_per_token(ac) - (2 * rerun_not_matmul(model) if mode == "full" else 0)
    assert extra == by_formula
    assert flops.hardware_flops_per_token(ac) == flops.flops_per_token(ac) + flops.recompute_flops_per_token(ac)
    assert flops.flops_per_token(ac) == flops.flops_per_token(cfg)  # MFU's numerator ignores recompute


def test_recompute_terms_by_hand():
    """selective: the attention cores' forward, 4·L·H·Q·T; full: 2 per block parameter on top,
    but for the feed-forward's output projection. Grouped-query attention changes the
    projections, not the score term."""
    head_dim = LLAMA.d_model // LLAMA.n_heads
    core = 4 * LLAMA.n_layers * LLAMA.n_heads * head_dim * LLAMA.seq_len
    assert flops.recompute_flops_per_token(LLAMA) == 0
    assert flops.recompute_flops_per_token(dataclasses.replace(LLAMA, activation_checkpointing="selective")) == core
    assert flops.attention_forward_flops_per_token(dataclasses.replace(LLAMA, n_kv_heads=8)) == core
    rerun = flops.model_parts(LLAMA).block - LLAMA.ffn_hidden * LLAMA.d_model  # all but w2
    full = dataclasses.replace(LLAMA, activation_checkpointing="full")
    assert flops.recompute_flops_per_token(full) == 2 * LLAMA.n_layers * rerun + core
    assert flops.recompute_flops_per_token(dataclasses.replace(MLP, activation_checkpointing="selective")) == 0


def test_the_llama3_presets_have_meta_s_parameter_counts():
    """Llama 3 8B and 70B: 8,030,261,248 and 70,553,706,496 parameters (the released
    checkpoints' counts: untied 128256-token embedding and head), and FLOPs by the convention."""
    cfg = compose_config(["model=llama3_8b"]).model
    total, non_emb = flops.param_counts(cfg)
    assert total == 8_030_261_248
    assert flops.flops_per_token(cfg) == 6 * non_emb + 12 * 32 * 32 * 128 * 8192
    assert flops.param_counts(compose_config(["model=llama3_70b"]).model)[0] == 70_553_706_496
