"""Models the payload trains, and their FLOPs per token."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from launcher.config.schema import ModelConfig


class CausalSelfAttention(nn.Module):
    """Separate q, k, v projections (not one fused qkv) so that a column split across tensor-
    parallel ranks gives each rank whole heads; forward infers the local head count from the
    projection's width (n_heads // tp under TP, n_heads otherwise)."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]

        def heads(proj: nn.Linear) -> torch.Tensor:  # [b, t, heads·head_dim] → [b, heads, t, head_dim]
            return proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q), heads(self.k), heads(self.v), is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Sequential):
    def __init__(self, d_model: int, mult: int) -> None:
        super().__init__(nn.Linear(d_model, mult * d_model), nn.GELU(), nn.Linear(mult * d_model, d_model))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mult: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, mult)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class MLPBlock(nn.Module):
    def __init__(self, d_model: int, mult: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, mult)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(self.ln(x))


class TokenModel(nn.Module):
    """Embeddings → blocks → final norm → untied head. Returns logits [batch, seq, vocab]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        if cfg.arch == "gpt":
            blocks = [Block(cfg.d_model, cfg.n_heads, cfg.ffn_mult) for _ in range(cfg.n_layers)]
        else:
            blocks = [MLPBlock(cfg.d_model, cfg.ffn_mult) for _ in range(cfg.n_layers)]
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_model(cfg: ModelConfig) -> TokenModel:
    return TokenModel(cfg)


def param_counts(model: nn.Module) -> tuple[int, int]:
    """(all parameters, non-embedding parameters). The untied head counts as non-embedding:
    its matmul is real compute on every token, unlike the embedding lookups."""
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters())
    return total, total - embedding
