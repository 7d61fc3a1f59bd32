"""Model size and training FLOPs from the config alone (pure: no torch), so planning a
1.3B-parameter run never builds it."""

from __future__ import annotations

from launcher.config.schema import ModelConfig


def param_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(all parameters, non-embedding parameters) of `train.models.TokenModel`, counted from its
    layers: the untied head is non-embedding (a real matmul per token), the lookups are not."""
    d, f = cfg.d_model, cfg.ffn_mult * cfg.d_model
    ffn = d * f + f + f * d + d
    if cfg.arch == "gpt":
        block = 4 * (d * d + d) + ffn + 2 * 2 * d  # q, k, v, proj; feed-forward; two LayerNorms
    else:
        block = ffn + 2 * d
    embedding = cfg.vocab_size * d + cfg.seq_len * d
    non_embedding = cfg.n_layers * block + 2 * d + d * cfg.vocab_size  # blocks, final norm, head
    return embedding + non_embedding, non_embedding


def flops_per_token(cfg: ModelConfig, non_embedding_params: int) -> float:
    """Training FLOPs per token ≈ 6N + 12·L·H·Q·T (attention scores; zero for the MLP model)."""
    attention = 0
    if cfg.arch == "gpt":
        head_dim = cfg.d_model // cfg.n_heads
        attention = 12 * cfg.n_layers * cfg.n_heads * head_dim * cfg.seq_len
    return float(6 * non_embedding_params + attention)
