"""Checks on a transformer's attention heads that hold at every world size: the head width
(model.head_dim, or d_model ÷ n_heads, config/derived.py head_dim), grouped-query attention's
kv heads, and RoPE's even width; tensor parallel's split of the heads is per size
(launcher/trials/layout.py)."""

from __future__ import annotations

from launcher.config.checks import at_least
from launcher.config.errors import ConfigError
from launcher.config.schema import ModelConfig


def check_heads(m: ModelConfig) -> None:
    """model.head_dim, and the head counts against the width (the mlp model has no attention)."""
    if m.head_dim is not None:
        at_least("model.head_dim", m.head_dim, 1, max(2, m.d_model // max(1, m.n_heads)))
        if m.arch != "llama":
            # gpt's and mlp's saved-activation tables (perf/memory_activations.py) count multiples of d_model.
            raise ConfigError(
                f"model.head_dim={m.head_dim} applies to arch=llama only (gpt's memory estimate assumes heads of "
                f"d_model ÷ n_heads); remove it, or set model.arch=llama"
            )
    elif m.arch != "mlp" and m.d_model % m.n_heads:
        raise ConfigError(
            f"model.d_model={m.d_model} is not divisible by model.n_heads={m.n_heads}; "
            f"pick heads that divide the width, e.g. model.n_heads={_divisor_near(m.d_model, m.n_heads)}"
        )
    if m.arch == "llama":
        _check_llama_heads(m)
    elif m.n_kv_heads is not None and m.n_kv_heads != m.n_heads:
        raise ConfigError(
            f"model.n_kv_heads={m.n_kv_heads} applies to arch=llama only (grouped-query attention); "
            f"remove it, or set model.arch=llama"
        )


def _check_llama_heads(m: ModelConfig) -> None:
    """Grouped-query attention shares each kv head among n_heads/n_kv_heads query heads, and RoPE
    rotates pairs of a head's dimensions."""
    kv = m.n_kv_heads or m.n_heads
    if m.n_heads % kv:
        raise ConfigError(
            f"model.n_heads={m.n_heads} is not a multiple of model.n_kv_heads={kv}; each kv head serves a "
            "whole group of query heads: pick n_kv_heads dividing n_heads, e.g. "
            f"model.n_kv_heads={_divisor_near(m.n_heads, kv)}"
        )
    if m.head_dim is not None and m.head_dim % 2:
        raise ConfigError(
            f"model.head_dim={m.head_dim} is odd; RoPE rotates pairs of a head's dimensions: pick an even head "
            f"width, e.g. model.head_dim={m.head_dim + 1}"
        )
    head_dim = m.d_model // m.n_heads
    if m.head_dim is None and head_dim % 2:
        raise ConfigError(
            f"model.d_model={m.d_model} ÷ model.n_heads={m.n_heads} = {head_dim}, an odd head width; RoPE rotates "
            "pairs of dimensions: pick a width and head count giving an even head width, or set model.head_dim"
        )


def _divisor_near(width: int, heads: int) -> int:
    return min((h for h in range(1, width + 1) if width % h == 0), key=lambda h: abs(h - heads))
