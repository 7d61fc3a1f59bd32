"""Models the payload trains: TokenModel over GPT-style, Llama-style or MLP blocks (gpt.py,
llama.py, common.py), built on the meta device and materialised per rank (init.py)."""

from __future__ import annotations

import torch
from torch import nn

from launcher.compute.flops import expert_width, ffn_width, kv_heads
from launcher.config.derived import head_dim
from launcher.config.schema import ModelConfig
from launcher.train.models.byo import build_target, is_byo, reference_values
from launcher.train.models.common import CausalSelfAttention, PreNormBlock, positions
from launcher.train.models.gpt import Block, FeedForward, MLPBlock
from launcher.train.models.init import initial_value, materialise, param_seed
from launcher.train.models.llama import LlamaBlock, RMSNorm, SwiGLU
from launcher.train.models.moe import MoEBlock

__all__ = [
    "Block",
    "CausalSelfAttention",
    "FeedForward",
    "LlamaBlock",
    "MLPBlock",
    "PreNormBlock",
    "RMSNorm",
    "SwiGLU",
    "TokenModel",
    "build_blocks",
    "build_model",
    "initial_value",
    "materialise",
    "param_counts",
    "param_seed",
    "token_model",
]


def build_blocks(cfg: ModelConfig) -> list[nn.Module]:
    """cfg.n_layers blocks of cfg.arch, with cfg.activation_checkpointing applied; llama with
    model.n_experts > 0: MoE blocks (models/moe.py) after the first model.dense_layers."""
    ac, d, hidden = str(cfg.activation_checkpointing), cfg.d_model, ffn_width(cfg)
    if cfg.arch == "gpt":
        return [Block(d, cfg.n_heads, hidden, checkpointing=ac) for _ in range(cfg.n_layers)]
    if cfg.arch == "llama":
        attn = {"rope_theta": cfg.rope_theta, "norm_eps": cfg.norm_eps, "checkpointing": ac, "head_dim": head_dim(cfg)}
        moe = {
            "n_experts": cfg.n_experts,
            "top_k": cfg.experts_per_token,
            "shared": cfg.shared_experts,
            "aux_coef": cfg.aux_loss_coef,
        }
        return [
            MoEBlock(d, cfg.n_heads, kv_heads(cfg), expert_width(cfg), **moe, **attn)
            if cfg.n_experts and i >= cfg.dense_layers
            else LlamaBlock(d, cfg.n_heads, kv_heads(cfg), hidden, **attn)
            for i in range(cfg.n_layers)
        ]
    return [MLPBlock(d, hidden, checkpointing=ac) for _ in range(cfg.n_layers)]


class TokenModel(nn.Module):
    """Embeddings → blocks → final norm → untied head. Returns logits [batch, seq, vocab].
    gpt and mlp add a learned position table (`pos_emb`); llama has none (`pos_emb` is None:
    its attention rotates q and k by position instead) and an RMSNorm as `ln_f`."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        llama = cfg.arch == "llama"
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = None if llama else nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(build_blocks(cfg))
        self.ln_f = RMSNorm(cfg.d_model, cfg.norm_eps) if llama else nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = embed(self, idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def embed(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """Token embedding, plus the position table where `model` has one (the full model or a
    pipeline's first stage)."""
    x = model.tok_emb(idx)
    if model.pos_emb is None:
        return x
    return x + model.pos_emb(positions(idx.shape[1], idx.device))


def build_model(cfg: ModelConfig, *, seed: int | None = None) -> nn.Module:
    """The full model: a TokenModel, or model._target_'s module. Under `with torch.device("meta")`
    it stays on the meta device, allocating nothing (the payload's way: each layout then
    materialises only this rank's part, see `materialise`); otherwise it is materialised on the
    default device, initialised from `seed` (default: torch's current seed,
    `torch.initial_seed()`), exactly as a layout would."""
    device = torch.get_default_device()
    with torch.device("meta"):
        # .to("meta"): a builder that allocates anyway (an explicit device=) is put on meta too; its
        # values come back from the seed and the reference build like everyone's (byo.py).
        model = build_target(cfg).to("meta") if is_byo(cfg) else TokenModel(cfg)
    if device.type != "meta":
        seed = torch.initial_seed() if seed is None else seed
        materialise(model, device, seed=seed, fallback=reference_values(cfg, seed))
    return model


def token_model(**fields) -> TokenModel:
    """The built-in model from ModelConfig's fields as keyword arguments: a `_target_` for the
    built-in GPT/Llama/MLP (`_target_: launcher.train.models.token_model`, `arch: gpt`, …), with
    which the `_target_` path is checked against the built-in one (tests/multiprocess/test_byo_model.py)."""
    return TokenModel(ModelConfig(**fields))


def param_counts(model: nn.Module) -> tuple[int, int]:
    """(all parameters, non-embedding parameters). The untied head counts as non-embedding:
    its matmul is real compute on every token, unlike the embedding lookups."""
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters())
    return total, total - embedding
