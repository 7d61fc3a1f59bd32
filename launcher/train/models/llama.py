"""Llama-style blocks: RMSNorm, grouped-query attention with rotary positions, SwiGLU, no biases
(Touvron et al. 2023; Meta, "The Llama 3 Herd of Models", 2024)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from launcher.train.models.common import CausalSelfAttention, PreNormBlock


class RMSNorm(nn.Module):
    """x / rms(x) · weight, computed in float32 and returned in x's dtype (as Meta's reference).
    Written out in elementwise ops rather than nn.RMSNorm's fused kernel so that DTensor runs it
    sequence-sharded under tensor parallel (a mean over the last dim, local to every shard)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class SwiGLU(nn.Module):
    """w2(silu(w1 x) · w3 x): w1 the gate, w3 the up projection, w2 the down projection, each
    `hidden` wide (model.ffn_hidden), no biases. Tensor parallel splits w1 and w3 by columns and
    w2 by rows: every rank holds whole hidden units."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def attention_half(
    block: PreNormBlock,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    *,
    rope_theta: float,
    norm_eps: float,
    checkpointing: str,
    head_dim: int | None = None,
) -> None:
    """A Llama block's norms and attention (its ffn is the caller's: SwiGLU, or moe.MoE), built in the
    order the parity references build them, so a seed gives every block the same initial weights.
    `head_dim`: each head's width (model.head_dim; None: d_model / n_heads)."""
    block.recompute = checkpointing == "full"
    block.ln1 = RMSNorm(d_model, norm_eps)
    block.attn = CausalSelfAttention(
        d_model,
        n_heads,
        n_kv_heads=n_kv_heads,
        bias=False,
        rope_theta=rope_theta,
        recompute=checkpointing == "selective",
        head_dim=head_dim,
    )
    block.ln2 = RMSNorm(d_model, norm_eps)


class LlamaBlock(PreNormBlock):
    """Llama block (RMSNorm, GQA with RoPE, SwiGLU). `checkpointing` as gpt.Block's."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        ffn_hidden: int,
        *,
        rope_theta: float,
        norm_eps: float,
        checkpointing: str = "none",
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        attention_half(
            self,
            d_model,
            n_heads,
            n_kv_heads,
            rope_theta=rope_theta,
            norm_eps=norm_eps,
            checkpointing=checkpointing,
            head_dim=head_dim,
        )
        self.ffn = SwiGLU(d_model, ffn_hidden)
