"""What is trained: the model's config (part of launcher/config/schema.py's LauncherConfig)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.config.choices import Arch, Checkpointing, InputDtype


@dataclass(kw_only=True, frozen=True)
class InputSpec:
    """One tensor of a `_target_` model's synthetic batch (an input, the loss's target); load.py
    reads it (not an OmegaConf node: a frozen dataclass's lists inside a Dict refuse merging)."""

    shape: list[int] = field(default_factory=list)
    """Shape of one sample, without the batch dimension ([] : one value per sample)."""
    dtype: InputDtype = InputDtype.float32
    """Element type. Integers (and bool) are drawn uniformly from [low, high); floats from N(0, 1)."""
    high: int | None = None
    """Integer dtypes: exclusive upper bound (a vocabulary size, a class count); required for them."""
    low: int = 0
    """Integer dtypes: inclusive lower bound."""


@dataclass(kw_only=True, frozen=True)
class ModelConfig:
    name: str = "tiny_gpt"
    """Recipe name, recorded with every trial."""
    arch: Arch = Arch.gpt
    """`gpt`: decoder-only transformer (LayerNorm, GELU, learned positions, biases). `llama`: Llama-style decoder
    (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases). `mlp`: per-token MLP stack (no attention)."""
    vocab_size: int = 256
    """Token vocabulary size."""
    seq_len: int = 64
    """Tokens per sample (T)."""
    d_model: int = 128
    """Hidden width."""
    n_layers: int = 2
    """Transformer blocks (gpt, llama) or hidden MLP layers (mlp)."""
    n_heads: int = 4
    """Query attention heads (gpt, llama); d_model must be divisible by it unless model.head_dim is set."""
    ffn_mult: int = 4
    """Feed-forward width as a multiple of d_model, where `ffn_hidden` is null."""
    ffn_hidden: int | None = None
    """Feed-forward hidden width, explicitly (Llama 3 8B: 14336); null → ffn_mult × d_model. For
    llama it is the width of each of SwiGLU's gate and up projections."""
    n_kv_heads: int | None = None
    """Key/value heads (llama: grouped-query attention; n_heads must be a multiple); null →
    n_heads (multi-head attention). gpt always uses n_heads."""
    head_dim: int | None = None
    """Width of one attention head (Q); null → d_model / n_heads, the old behaviour. llama (and its MoE
    blocks) honour it: q and the output projection are n_heads × head_dim wide, k and v n_kv_heads ×
    head_dim, RoPE turns head_dim dimensions, and d_model need not divide by n_heads (Qwen3-30B-A3B:
    d_model 2048, 32 heads of 128; Gemma 7B: 3072, 16 of 256). gpt and mlp refuse it (their memory
    tables count activations in multiples of d_model); it must be > 0 and even (RoPE rotates pairs)."""
    rope_theta: float = 10000.0
    """llama: RoPE base frequency (Llama 3: 500000)."""
    norm_eps: float = 1e-5
    """llama: RMSNorm epsilon."""
    n_experts: int = 0
    """Mixture of experts (arch=llama only): routed experts per MoE block; 0 = dense. Each token goes to its
    `experts_per_token` experts of highest router softmax probability, weighted by those probabilities renormalised
    to sum to 1; no capacity limit, so no token is ever dropped (train/models/moe.py)."""
    experts_per_token: int = 2
    """MoE: experts each token is routed to (top-k; Mixtral 2, DeepSeek-V3 8)."""
    shared_experts: int = 0
    """MoE: experts every token passes through besides its routed ones (DeepSeek-V3: 1)."""
    expert_ffn_hidden: int = 0
    """MoE: each expert's SwiGLU hidden width; 0 = the dense width (ffn_hidden, or ffn_mult × d_model)."""
    dense_layers: int = 0
    """MoE: the first this many blocks keep a dense SwiGLU (DeepSeek-V3: 3); the rest are MoE blocks."""
    aux_loss_coef: float = 0.01
    """MoE: weight α of the load-balancing loss α·E·Σᵢ fᵢ·Pᵢ (Switch/GShard; fᵢ the share of the sequence's
    routed slots sent to expert i, Pᵢ its mean router probability), per sequence and averaged over the batch
    (DeepSeek-V3's sequence-wise form), added to the cross-entropy; 0 turns it off."""
    activation_checkpointing: Checkpointing = Checkpointing.none
    """Recompute activations in backward instead of keeping them (torch.utils.checkpoint, non-reentrant): `none` keeps
    everything; `selective` is Megatron's selective recompute (Korthikanti et al. 2022): only each block's attention
    core (scaled_dot_product_attention: scores, causal softmax, weighted values) is recomputed in backward, the
    projections, norms and feed-forward keep their activations; `op`, torchtitan's per-op policy, keeps a block's input,
    attention output and every second matmul's output (another trainer's: see `trainer`); `full` keeps only each block's
    input and recomputes its forward in backward. gpt and llama, every layout; `mlp` has no attention, so `selective`
    changes nothing there. Losses and parameters are unchanged (the same arithmetic, done twice); step time grows by the
    recompute, which MFU excludes and HFU (hardware FLOPs utilisation) counts. `_target_` models: `full` checkpoints
    each FSDP unit (parallel.fsdp_units or the size policy; under ddp the same modules); `selective` is refused."""
    _target_: str | None = None
    """Your own model: a callable returning an nn.Module (Hydra's `instantiate`), e.g.
    `mypkg.models.build`; a recipe's keys this schema does not know are its keyword arguments
    (moved into `kwargs`). Null: the built-in model of `arch` (the keys above)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """`_target_` models: the callable's keyword arguments (a recipe writes them beside `_target_`)."""
    inputs: dict[str, Any] = field(default_factory=dict)
    """`_target_` models: the synthetic batch, name → InputSpec; each reaches the model as a keyword
    argument (`model(**inputs)`), batch dimension first."""
    target: Any = None
    """`_target_` models: an InputSpec, what `loss` compares the output with; null: the
    model's own loss (a scalar output, or its `.loss`: Hugging Face models given `labels`)."""
    loss: Any = None
    """`_target_` models: `cross_entropy` (output [batch, …, classes], integer targets), `mse`, or
    {_target_: mypkg.losses.my_loss} called as loss(output, target) → scalar; null: see `target`."""
