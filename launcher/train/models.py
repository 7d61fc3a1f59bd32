"""Models the payload trains, and their FLOPs per token."""

from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

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


def build_model(cfg: ModelConfig, *, seed: int | None = None) -> TokenModel:
    """The full model. Under `with torch.device("meta")` it stays on the meta device, allocating
    nothing (the payload's way: each layout then materialises only this rank's part, see
    `materialise`); otherwise it is materialised on the default device, initialised from `seed`
    (default: torch's current seed, `torch.initial_seed()`), exactly as a layout would."""
    device = torch.get_default_device()
    with torch.device("meta"):
        model = TokenModel(cfg)
    if device.type != "meta":
        materialise(model, device, seed=torch.initial_seed() if seed is None else seed)
    return model


def materialise(module: nn.Module, device: torch.device, *, seed: int) -> nn.Module:
    """Allocate a meta-device module (already cut up, sharded or parallelised: only this rank's
    part is allocated) on `device` and initialise every parameter from (seed, its name).

    Each parameter's full value is drawn from its own CPU generator seeded by (seed, name) and
    moved to `device`, then this rank keeps its piece (a DTensor's local shard), so every layout starts
    from the same parameters as the 1-process reference: names are the reference TokenModel's
    (stages and FSDP/TP keep them). A module with no meta parameters is returned as it is."""
    params = list(module.parameters())
    on_meta = [p.is_meta for p in params]
    if not any(on_meta):
        return module
    if not all(on_meta):
        raise ValueError(f"materialise: {on_meta.count(False)} of {len(params)} parameters are already allocated; "
                         "expected a module wholly on the meta device")  # fmt: skip
    module.to_empty(device=device)
    with torch.no_grad():
        for prefix, owner in module.named_modules():
            for name, p in owner.named_parameters(recurse=False):
                full_name = f"{prefix}.{name}" if prefix else name
                _assign(p, initial_value(owner, name, tuple(p.shape), device, param_seed(seed, full_name)))
    return module


def param_seed(seed: int, name: str) -> int:
    """The generator seed of parameter `name` (e.g. `blocks.3.attn.q.weight`) under `seed`."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63)


def initial_value(owner: nn.Module, name: str, shape: tuple[int, ...], device: torch.device, seed: int) -> torch.Tensor:
    """The full initial value of `owner.<name>`, distributed as torch's defaults: Linear
    U(±1/√fan_in) (kaiming_uniform with a=√5, and its bias), Embedding N(0, 1), LayerNorm 1 and 0."""
    # Drawn on the CPU whatever the device: a CUDA generator gives other numbers for the same seed,
    # and a GPU run must start where the CPU reference (and every parity test) starts.
    value = torch.empty(shape)
    g = torch.Generator().manual_seed(seed)
    if isinstance(owner, nn.Linear):
        bound = 1 / math.sqrt(owner.in_features)
        return value.uniform_(-bound, bound, generator=g).to(device)
    if isinstance(owner, nn.Embedding):
        return value.normal_(0.0, 1.0, generator=g).to(device)
    if isinstance(owner, nn.LayerNorm):
        return value.fill_(1.0 if name == "weight" else 0.0).to(device)
    raise TypeError(f"materialise: no initialisation for {type(owner).__name__}.{name}")


def _assign(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy `full` into `param`, or this rank's piece of it into a DTensor (no communication:
    every rank drew the same full value)."""
    if isinstance(param, DTensor):
        piece = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local()
        param.to_local().copy_(piece)
    else:
        param.copy_(full)


def param_counts(model: nn.Module) -> tuple[int, int]:
    """(all parameters, non-embedding parameters). The untied head counts as non-embedding:
    its matmul is real compute on every token, unlike the embedding lookups."""
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters())
    return total, total - embedding
