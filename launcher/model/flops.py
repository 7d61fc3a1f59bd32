"""Model size and training FLOPs from the config alone (pure: no torch), so planning a
1.3B-parameter run never builds it."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.schema import ModelConfig


@dataclass(kw_only=True, frozen=True)
class ModelParts:
    """Parameter counts of `train.models.TokenModel`'s pieces, counted from its layers."""

    embedding: int
    """Token and position tables."""
    block: int
    """One block, LayerNorms included."""
    block_norms: int
    """One block's LayerNorm parameters (replicated, not split, under tensor parallel)."""
    head: int
    """The untied output projection."""
    final_norm: int
    """The final LayerNorm."""


def model_parts(m: ModelConfig) -> ModelParts:
    d, f = m.d_model, m.ffn_mult * m.d_model
    ffn = d * f + f + f * d + d
    norms = (2 if m.arch == "gpt" else 1) * 2 * d
    attention = 4 * (d * d + d) if m.arch == "gpt" else 0
    return ModelParts(embedding=(m.vocab_size + m.seq_len) * d, block=attention + ffn + norms, block_norms=norms,
                      head=d * m.vocab_size, final_norm=2 * d)  # fmt: skip


def param_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(all parameters, non-embedding parameters): the untied head is non-embedding (a real
    matmul per token), the lookups are not."""
    p = model_parts(cfg)
    non_embedding = cfg.n_layers * p.block + p.final_norm + p.head
    return p.embedding + non_embedding, non_embedding


def flops_per_token(cfg: ModelConfig, non_embedding_params: int) -> float:
    """Training FLOPs per token ≈ 6N + 12·L·H·Q·T (attention scores; zero for the MLP model)."""
    attention = 0
    if cfg.arch == "gpt":
        head_dim = cfg.d_model // cfg.n_heads
        attention = 12 * cfg.n_layers * cfg.n_heads * head_dim * cfg.seq_len
    return float(6 * non_embedding_params + attention)
