"""What both transformer families share: causal self-attention (GPT's with biases and a key/value
head per query head; Llama's without biases, with rotary positions and grouped-query keys and
values), the pre-norm residual block, and activation checkpointing."""

from __future__ import annotations

from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

SEQUENCE_POSITIONS: ContextVar[torch.Tensor | None] = ContextVar("sequence_positions", default=None)
"""The global positions of the tokens this rank holds, where they are not 0..t−1: under context
parallelism each rank holds a piece of every sequence (engines/context_parallel.py sets it)."""


def positions(t: int, device: torch.device) -> torch.Tensor:
    """Positions of a sequence of `t` tokens: SEQUENCE_POSITIONS where set, else 0..t−1."""
    held = SEQUENCE_POSITIONS.get()
    return torch.arange(t, device=device) if held is None else held.to(device)


def rotary(x: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE on `x` [batch, heads, seq, head_dim], position p = index along seq (rotate-half
    pairing: dim i turns with dim i + head_dim/2). The angles are computed here from the sequence
    the attention sees, not from a table: under sequence-parallel TP that is the gathered full
    sequence and in a pipeline stage it is the stage's input, so no stage or rank needs a buffer
    (a meta-built model materialises parameters only)."""
    t, head_dim = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim)
    angles = torch.outer(positions(t, x.device).float(), inv_freq).repeat(1, 2)
    cos, sin = angles.cos(), angles.sin()
    half = head_dim // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scores, causal softmax and the weighted values: what selective recompute recomputes.
    Fewer key/value heads than query heads (grouped-query) are shared by consecutive q heads."""
    gqa = k.shape[1] != q.shape[1]
    if gqa and q.is_cuda and q.dtype == torch.float32:
        # On CUDA only flash attention (16-bit only) and the math kernel take enable_gqa; fp32
        # would fall to the math kernel, which keeps the seq² scores. Expanding the kv heads
        # keeps fp32 on the memory-efficient kernel.
        groups = q.shape[1] // k.shape[1]
        k, v, gqa = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1), False
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


class CausalSelfAttention(nn.Module):
    """Separate q, k, v projections (not one fused qkv) so that a column split across tensor-
    parallel ranks gives each rank whole heads; forward infers the local head counts from the
    projections' widths (n_heads // tp and n_kv_heads // tp under TP). With grouped-query
    attention q head h reads kv head h // (n_heads / n_kv_heads); a rank's q heads then read
    exactly that rank's kv heads, so the split needs no communication."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        n_kv_heads: int | None = None,
        bias: bool = True,
        rope_theta: float | None = None,
        recompute: bool = False,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if (head_dim is None and d_model % n_heads) or n_heads % n_kv_heads:
            raise ValueError(
                f"attention: d_model={d_model} must be divisible by n_heads={n_heads} (or head_dim given), "
                f"and n_heads by n_kv_heads={n_kv_heads}"
            )
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        # Heads may be wider or narrower than d_model / n_heads (Qwen3: 32 × 128 over a width of 2048):
        # q and the output projection are then n_heads · head_dim wide, not d_model.
        self.head_dim = head_dim or d_model // n_heads
        self.rope_theta = rope_theta
        # Selective recompute (Megatron's): the attention core's saved tensors are dropped after
        # forward and recomputed in backward; the projections keep theirs.
        self.recompute = recompute
        q_width, kv_width = n_heads * self.head_dim, n_kv_heads * self.head_dim
        self.q = nn.Linear(d_model, q_width, bias=bias)
        self.k = nn.Linear(d_model, kv_width, bias=bias)
        self.v = nn.Linear(d_model, kv_width, bias=bias)
        self.proj = nn.Linear(q_width, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]

        def heads(proj: nn.Linear) -> torch.Tensor:  # [b, t, heads·head_dim] → [b, heads, t, head_dim]
            return proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q), heads(self.k), heads(self.v)
        if self.rope_theta is not None:
            q, k = rotary(q, self.rope_theta), rotary(k, self.rope_theta)
        if self.recompute:
            # No dropout anywhere in these models: there is no random state to replay.
            y = checkpoint(attention_core, q, k, v, use_reentrant=False, preserve_rng_state=False)
        else:
            y = attention_core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


def run_block(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`block.body(x)`, recomputed in backward from `x` alone when `block.recompute` (full
    activation checkpointing). Called inside the block's forward, so that FSDP's hooks on the
    block (unshard before forward and before backward) stay outside the recompute, as torchtitan
    arranges it, and parameter names stay the block's own (no wrapper module)."""
    if block.recompute:
        return checkpoint(block.body, x, use_reentrant=False, preserve_rng_state=False)
    return block.body(x)


class PreNormBlock(nn.Module):
    """x + attn(ln1(x)), then + ffn(ln2(x)). Subclasses set ln1, attn, ln2, ffn and `recompute`;
    the names are shared by both families so stages, tensor-parallel plans and FSDP units treat
    them alike."""

    recompute: bool = False

    def body(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_block(self, x)
