"""arch=llama (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases) and activation
checkpointing, in-process: the model's shape, its rotary positions and grouped-query attention
against plain formulas, and checkpointing recomputing exactly what it names with bitwise the
same gradients. Launched under every layout: tests/multiprocess/test_llama_parity.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from launcher.config.compose import compose_config
from launcher.train.models import build_model, common
from launcher.train.models.common import rotary

LLAMA = ["model=tiny_llama"]


"""With layout_parity.BASE: 4 layers, 8 query heads, 4 key/value heads, ffn_hidden 344."""


def tiny(**changes):
    return dataclasses.replace(compose_config(LLAMA).model, **changes)


def test_the_llama_model_has_no_biases_no_position_table_and_grouped_kv_projections():
    model = build_model(tiny(), seed=3)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert not any(k.endswith(".bias") for k in shapes) and "pos_emb.weight" not in shapes
    assert shapes["blocks.0.attn.q.weight"] == (128, 128)
    assert shapes["blocks.0.attn.k.weight"] == shapes["blocks.0.attn.v.weight"] == (64, 128)  # 4 kv heads × 16
    assert shapes["blocks.1.ffn.w1.weight"] == shapes["blocks.1.ffn.w3.weight"] == (344, 128)
    assert shapes["blocks.1.ffn.w2.weight"] == (128, 344)
    assert shapes["ln_f.weight"] == (128,) and shapes["head.weight"] == (256, 128)
    assert torch.equal(model.blocks[0].ln1.weight, torch.ones(128))  # RMSNorm starts at 1
    assert not torch.equal(model.head.weight, model.tok_emb.weight.T)  # untied


def test_rotary_scores_depend_only_on_relative_position():
    """RoPE: q at position m against k at n scores the same as at m+s against n+s."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)
    seq_q, seq_k = q.expand(1, 1, 12, 16), k.expand(1, 1, 12, 16)
    scores = rotary(seq_q, 500000.0) @ rotary(seq_k, 500000.0).transpose(-1, -2)  # [12, 12]: positions m × n
    torch.testing.assert_close(scores[0, 0, 7, 2], scores[0, 0, 10, 5])
    torch.testing.assert_close(rotary(seq_q, 10000.0)[..., 0, :], q[..., 0, :])  # position 0: unrotated


def test_grouped_query_attention_shares_each_kv_head_among_consecutive_q_heads():
    attn = build_model(tiny(), seed=3).blocks[0].attn
    x = torch.randn(2, 64, 128)
    b, t, hd = 2, 64, 16
    q = rotary(attn.q(x).view(b, t, 8, hd).transpose(1, 2), 10000.0)
    k = rotary(attn.k(x).view(b, t, 4, hd).transpose(1, 2), 10000.0).repeat_interleave(2, dim=1)
    v = attn.v(x).view(b, t, 4, hd).transpose(1, 2).repeat_interleave(2, dim=1)
    scores = (q @ k.transpose(-1, -2)) / hd**0.5
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    by_hand = attn.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, 128))
    torch.testing.assert_close(attn(x), by_hand, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt"])
def test_checkpointing_recomputes_what_it_names_with_the_same_gradients(arch, monkeypatch):
    """selective reruns the attention core once more per layer in backward; full reruns each
    block's body; the loss and every gradient stay bitwise those of no checkpointing."""
    calls = {"core": 0}
    core = common.attention_core

    def counted(*args):
        calls["core"] += 1
        return core(*args)

    monkeypatch.setattr(common, "attention_core", counted)
    base = compose_config([f"model={arch}"]).model
    idx = torch.randint(0, base.vocab_size, (2, base.seq_len + 1), generator=torch.Generator().manual_seed(1))
    results = {}
    for mode in ("none", "selective", "full"):
        model = build_model(dataclasses.replace(base, activation_checkpointing=mode), seed=5)
        calls["core"] = 0
        loss = F.cross_entropy(model(idx[:, :-1]).reshape(-1, base.vocab_size), idx[:, 1:].reshape(-1))
        loss.backward()
        results[mode] = (loss.item(), {k: p.grad for k, p in model.named_parameters()}, calls["core"])
    assert [results[m][2] for m in ("none", "selective", "full")] == [
        base.n_layers,
        2 * base.n_layers,
        2 * base.n_layers,
    ]
    for mode in ("selective", "full"):
        assert results[mode][0] == results["none"][0]
        assert all(torch.equal(g, results["none"][1][k]) for k, g in results[mode][1].items()), mode
