"""GPT-style blocks (LayerNorm, GELU feed-forward, biases) and the attention-free MLP block."""

from __future__ import annotations

import torch
from torch import nn

from launcher.train.models.common import CausalSelfAttention, PreNormBlock, run_block


class FeedForward(nn.Sequential):
    """Linear(d, hidden) → GELU → Linear(hidden, d), with biases."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))


class Block(PreNormBlock):
    """GPT block. `checkpointing`: none, selective (the attention core is recomputed in
    backward) or full (the whole block is, from its input)."""

    def __init__(self, d_model: int, n_heads: int, ffn_hidden: int, *, checkpointing: str = "none") -> None:
        super().__init__()
        self.recompute = checkpointing == "full"
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, recompute=checkpointing == "selective")
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_hidden)


class MLPBlock(nn.Module):
    """Residual feed-forward layer (arch=mlp). It has no attention: selective recompute leaves it
    as it is; full recomputes it from its input."""

    def __init__(self, d_model: int, ffn_hidden: int, *, checkpointing: str = "none") -> None:
        super().__init__()
        self.recompute = checkpointing == "full"
        self.ln = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_hidden)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(self.ln(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_block(self, x)
