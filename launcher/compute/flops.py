"""Model size and training FLOPs from the config alone (pure: no torch), so planning a
70B-parameter run never builds it.

Convention (Kaplan et al. 2020; Narayanan et al. 2021), per token of a training step:
- 6N for the parameters: a forward multiply-add (2 FLOPs) per non-embedding parameter, twice that
  in backward (the input's and the weight's gradients). N counts every non-embedding parameter
  (norm weights and biases too, where an exact matmul count would leave them out: ≤ 0.1% at
  d_model ≥ 1024) and the untied head (a real matmul on every token);
- 12·L·H·Q·T for attention (H query heads of width Q over a sequence of T): scores Q·Kᵀ and the
  weighted values, 2·H·Q·T each in forward, twice that in backward, every position against the
  whole sequence (the causal half is not discounted, as MFU is usually quoted). With grouped-
  query attention the score term depends on the query heads only: fewer key/value heads shrink
  the k and v projections (in N), not the scores.
The embedding lookups, norms' arithmetic, activations and softmax are not counted.

Model FLOPs (`flops_per_token`, for MFU) exclude what activation checkpointing recomputes;
hardware FLOPs (`hardware_flops_per_token`, for HFU) add it (`recompute_flops_per_token`).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.schema import ModelConfig


@dataclass(kw_only=True, frozen=True)
class ModelParts:
    """Parameter counts of `train.models.TokenModel`'s pieces, counted from its layers."""

    embedding: int
    """Token table, and the position table (gpt and mlp; llama has none)."""
    block: int
    """One block, norms included."""
    block_norms: int
    """One block's norm parameters (replicated, not split, under tensor parallel)."""
    head: int
    """The untied output projection."""
    final_norm: int
    """The final norm (LayerNorm: weight and bias; llama's RMSNorm: weight only)."""


def ffn_width(m: ModelConfig) -> int:
    """The feed-forward hidden width: model.ffn_hidden, or ffn_mult × d_model where it is null."""
    return m.ffn_hidden or m.ffn_mult * m.d_model


def kv_heads(m: ModelConfig) -> int:
    """Key/value heads: model.n_kv_heads for llama (null → n_heads); gpt has one per query head."""
    return (m.n_kv_heads or m.n_heads) if m.arch == "llama" else m.n_heads


def model_parts(m: ModelConfig) -> ModelParts:
    d, f = m.d_model, ffn_width(m)
    if m.arch == "llama":
        kv_width = kv_heads(m) * (d // m.n_heads)
        # q and proj d×d, k and v d×kv_width; SwiGLU's w1, w3 (d×f) and w2 (f×d); two RMSNorms; no biases.
        block = 2 * d * d + 2 * d * kv_width + 3 * d * f + 2 * d
        return ModelParts(
            embedding=m.vocab_size * d, block=block, block_norms=2 * d, head=d * m.vocab_size, final_norm=d
        )
    ffn = d * f + f + f * d + d
    norms = (2 if m.arch == "gpt" else 1) * 2 * d
    attention = 4 * (d * d + d) if m.arch == "gpt" else 0
    return ModelParts(
        embedding=(m.vocab_size + m.seq_len) * d,
        block=attention + ffn + norms,
        block_norms=norms,
        head=d * m.vocab_size,
        final_norm=2 * d,
    )


def stage_params(parts: ModelParts, n_layers: int, *, tp: int, pp: int, pp_rank: int) -> tuple[float, float]:
    """(parameters of pipeline rank `pp_rank`'s stage on one tp rank, of them outside the blocks),
    before any FSDP sharding: tp splits all but the norms; the first stage also holds the
    embeddings, the last the head and the final norm (one stage: both)."""
    block = (parts.block - parts.block_norms) / tp + parts.block_norms
    root = (parts.embedding / tp if pp_rank == 0 else 0.0) + (
        parts.head / tp + parts.final_norm if pp_rank == pp - 1 else 0.0
    )
    return n_layers / pp * block + root, root


def param_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(all parameters, non-embedding parameters): the untied head is non-embedding (a real
    matmul per token), the lookups are not."""
    p = model_parts(cfg)
    non_embedding = cfg.n_layers * p.block + p.final_norm + p.head
    return p.embedding + non_embedding, non_embedding


def attention_forward_flops_per_token(cfg: ModelConfig) -> int:
    """Forward FLOPs per token of every layer's attention core (scores and weighted values,
    4·H·Q·T per layer); zero for the MLP model."""
    if cfg.arch == "mlp":
        return 0
    head_dim = cfg.d_model // cfg.n_heads
    return 4 * cfg.n_layers * cfg.n_heads * head_dim * cfg.seq_len


def flops_per_token(cfg: ModelConfig, non_embedding_params: int | None = None) -> float:
    """Model FLOPs per token of a training step: 6N + 12·L·H·Q·T (module docstring).
    `non_embedding_params`: N as counted on a built model; default: counted from the config."""
    n = param_counts(cfg)[1] if non_embedding_params is None else non_embedding_params
    return float(6 * n + 3 * attention_forward_flops_per_token(cfg))


def recompute_flops_per_token(cfg: ModelConfig) -> float:
    """Forward FLOPs per token that model.activation_checkpointing runs a second time in
    backward (torch.utils.checkpoint, non-reentrant, early stop on: torch's defaults):
    - none: 0;
    - selective: every attention core's forward, 4·L·H·Q·T (a fused attention kernel saves its
      own output, so it reruns whole);
    - op (torchtitan's per-op policy): the matmuls it does not keep, every second one of a block
      (llama: wk, wo, w3; gpt: the attention projection); the attention core's output is kept;
    - full: every block's forward but its last matmul, the feed-forward's output projection:
      recompute stops once every tensor backward needs is back, and that matmul saves only its
      inputs, which exist before it runs. 2 FLOPs per block parameter outside it, plus the cores.
    Embeddings, final norm and head are never recomputed."""
    mode = cfg.activation_checkpointing
    if mode == "selective":
        return float(attention_forward_flops_per_token(cfg))
    if mode == "op":
        d, f = cfg.d_model, ffn_width(cfg)
        kv = kv_heads(cfg) * (d // cfg.n_heads)
        rerun = d * kv + d * d + d * f if cfg.arch == "llama" else d * d + d
        return float(2 * cfg.n_layers * rerun) if cfg.arch != "mlp" else 0.0
    if mode == "full":
        d, f = cfg.d_model, ffn_width(cfg)
        ffn_out = f * d + (0 if cfg.arch == "llama" else d)  # llama's w2 has no bias
        rerun = model_parts(cfg).block - ffn_out
        return float(2 * cfg.n_layers * rerun + attention_forward_flops_per_token(cfg))
    return 0.0


def hardware_flops_per_token(cfg: ModelConfig, non_embedding_params: int | None = None) -> float:
    """FLOPs per token the hardware executes (for HFU): model FLOPs plus the recompute."""
    return flops_per_token(cfg, non_embedding_params) + recompute_flops_per_token(cfg)
