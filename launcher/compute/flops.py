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
Executed FLOPs (`executed_flops_per_token`, for the step time the planner predicts) are the
hardware FLOPs with every run of the attention core halved: its docstring states the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.compute.loss_bytes import LOSS_BYTES
from launcher.config.derived import head_dim
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


def expert_width(m: ModelConfig) -> int:
    """One MoE expert's SwiGLU hidden width: model.expert_ffn_hidden, or the dense width where 0."""
    return m.expert_ffn_hidden or ffn_width(m)


def moe_layers(m: ModelConfig) -> int:
    """Blocks that are MoE blocks: all but the first model.dense_layers; 0 for a dense model."""
    return m.n_layers - m.dense_layers if m.n_experts else 0


def expert_params(m: ModelConfig) -> int:
    """Parameters of one expert (a bias-free SwiGLU: w1, w3 d×h and w2 h×d)."""
    return 3 * m.d_model * expert_width(m)


def moe_ffn_params(m: ModelConfig, *, active: bool = False) -> int:
    """Feed-forward parameters of one MoE block: the router (d × n_experts), the routed experts
    (all of them, or with `active` the experts_per_token a token passes through) and the shared
    experts."""
    routed = m.experts_per_token if active else m.n_experts
    return m.d_model * m.n_experts + (routed + m.shared_experts) * expert_params(m)


def active_ffn_width(m: ModelConfig) -> float:
    """The feed-forward width a token passes through, averaged over the blocks: the dense width,
    and in a MoE block its experts_per_token + shared_experts experts' (what its activations scale with)."""
    moe = moe_layers(m)
    moe_width = (m.experts_per_token + m.shared_experts) * expert_width(m)
    return ((m.n_layers - moe) * ffn_width(m) + moe * moe_width) / m.n_layers


def routed_expert_params(m: ModelConfig) -> int:
    """Parameters of every MoE block's routed experts: what expert parallelism splits over ep."""
    return moe_layers(m) * m.n_experts * expert_params(m)


def inactive_params(m: ModelConfig) -> int:
    """Parameters a token does not pass through: the n_experts − experts_per_token routed experts
    of each MoE block it is not routed to (0 for a dense model)."""
    return moe_layers(m) * (m.n_experts - m.experts_per_token) * expert_params(m)


def model_parts(m: ModelConfig) -> ModelParts:
    d, f = m.d_model, ffn_width(m)
    if m.arch == "llama":
        q_width, kv_width = m.n_heads * head_dim(m), kv_heads(m) * head_dim(m)
        # q d×q_width, proj q_width×d, k and v d×kv_width; SwiGLU's w1, w3 (d×f) and w2 (f×d); two RMSNorms; no biases.
        block = 2 * d * q_width + 2 * d * kv_width + 3 * d * f + 2 * d
        # A MoE model's blocks differ (dense, MoE): `block` is their mean, so n_layers × block is every block.
        moe = moe_layers(m)
        block += round(moe * (moe_ffn_params(m) - 3 * d * f) / m.n_layers)
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
    moe = moe_layers(cfg) * (moe_ffn_params(cfg) - 3 * cfg.d_model * ffn_width(cfg))  # exact, not the mean block's
    non_embedding = cfg.n_layers * (p.block - round(moe / cfg.n_layers)) + moe + p.final_norm + p.head
    return p.embedding + non_embedding, non_embedding


def attention_forward_flops_per_token(cfg: ModelConfig) -> int:
    """Forward FLOPs per token of every layer's attention core (scores and weighted values,
    4·H·Q·T per layer); zero for the MLP model."""
    if cfg.arch == "mlp":
        return 0
    return 4 * cfg.n_layers * cfg.n_heads * head_dim(cfg) * cfg.seq_len


def flops_per_token(cfg: ModelConfig, non_embedding_params: int | None = None) -> float:
    """Model FLOPs per token of a training step: 6N + 12·L·H·Q·T (module docstring).
    `non_embedding_params`: N as counted on a built model; default: counted from the config.
    A mixture of experts counts its active parameters only (N less `inactive_params`: the router,
    the token's experts_per_token routed experts and the shared experts of each MoE block), so
    MFU is the work each token does, not the model's size."""
    n = param_counts(cfg)[1] if non_embedding_params is None else non_embedding_params
    n -= inactive_params(cfg)
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
        kv, q = kv_heads(cfg) * head_dim(cfg), cfg.n_heads * head_dim(cfg)
        rerun = d * kv + q * d + d * f if cfg.arch == "llama" else d * d + d
        return float(2 * cfg.n_layers * rerun) if cfg.arch != "mlp" else 0.0
    if mode == "full":
        d, f = cfg.d_model, ffn_width(cfg)
        ffn_out = f * d + (0 if cfg.arch == "llama" else d)  # llama's w2 has no bias
        # A MoE block's active share: its routed experts' outputs are combined after w2, so it reruns
        # whole (approximately: the mean block's ffn_out is taken off all the same).
        rerun = model_parts(cfg).block - ffn_out - inactive_params(cfg) / cfg.n_layers
        return float(2 * cfg.n_layers * rerun + attention_forward_flops_per_token(cfg))
    return 0.0


def hardware_flops_per_token(cfg: ModelConfig, non_embedding_params: int | None = None) -> float:
    """FLOPs per token the hardware executes (for HFU): model FLOPs plus the recompute."""
    return flops_per_token(cfg, non_embedding_params) + recompute_flops_per_token(cfg)


CAUSAL_EXECUTED_SHARE = 0.5
"""The share of the attention core's counted FLOPs a causal kernel executes: position i attends to
i + 1 of T positions, (T + 1)/2T of the square; flash-attention skips the masked tiles and runs the
diagonal ones whole, (n + 1)/2n of n tiles a side: ≤ 52% from 4K tokens at 128-wide tiles
(torch's SDPA, flash-attn, cuDNN and Transformer Engine alike)."""


def attention_core_runs(cfg: ModelConfig) -> int:
    """Forward-equivalents of the attention core per step: forward, backward's two, and a rerun
    under selective or full activation checkpointing (recompute_flops_per_token)."""
    return 3 + (1 if cfg.activation_checkpointing in ("selective", "full") else 0)


def executed_flops_per_token(cfg: ModelConfig, non_embedding_params: int | None = None) -> float:
    """FLOPs per token a step executes, the figure the planner turns into compute time: the
    hardware FLOPs with the attention core's scores and weighted values (every run of them,
    recompute included) at CAUSAL_EXECUTED_SHARE, since every built-in model is causal (the
    `llama` and `gpt` blocks mask the future) and so is every model of the published corpus.
    MFU, HFU and `flops_per_token` keep the usual convention (the whole square counted); only
    time is priced at what runs. Llama 3 8B's shape at 8K tokens: the core is 22% of the counted
    FLOPs, 13% of the executed; at 128K it is 82% of the counted, and a step executes 59% of them."""
    core = attention_forward_flops_per_token(cfg)
    skipped = attention_core_runs(cfg) * core * (1.0 - CAUSAL_EXECUTED_SHARE)
    return hardware_flops_per_token(cfg, non_embedding_params) - skipped


@dataclass(kw_only=True, frozen=True)
class Op:
    """One operation of a training step, as compute/shape_rate.py prices it."""

    name: str
    """What it is ("qkv", "w2", "attention", "norms", "loss")."""
    priced: str
    """`matmul` (rate by its shape), `attention` (the fused kernel's rate), `memory` (bandwidth)."""
    m: int = 0
    """matmul: rows (tokens of one micro-batch on one rank); attention: query positions."""
    n: int = 0
    """matmul: output features on one rank (tp splits them, or `k`); attention: key positions one kernel
    call sees (the sequence; a ring step's chunk, seq ÷ cp, under context parallel)."""
    k: int = 0
    """matmul: the inner dimension; attention: the head dimension."""
    flops: float = 0.0
    """Counted FLOPs per token of the whole model (not split by tp), every run (forward, backward's
    two, recompute): the ops' sum is hardware_flops_per_token."""
    nbytes: float = 0.0
    """memory: bytes moved per token of the whole model's work, every run (tp's ranks each move
    their share: sequence parallelism splits the norms' and activations' tokens as tp splits matmuls)."""
    fp8: bool = False
    """A block's linear layer: precision=fp8 runs it at the fp8 rate (compute/fp8.py)."""


ACT_BYTES = 2
"""Bytes of one activation element (bf16 autocast; fp32 runs move twice: ignored, priced at bf16)."""


def _reruns(cfg: ModelConfig, name: str) -> int:
    """Forward runs activation checkpointing adds to op `name` (recompute_flops_per_token's rule)."""
    mode = cfg.activation_checkpointing
    if mode == "full":
        return 0 if name in ("w2", "fc2", "expert_w2", "shared_w2") else 1
    if mode == "selective":
        return 1 if name == "attention" else 0
    if mode == "op":
        return 1 if name in ("wk", "wo", "w3", "proj", "expert_w3", "shared_w3") else 0
    return 0


def block_matmuls(cfg: ModelConfig, tokens: int, tp: int, ep: int = 1) -> list[tuple[str, int, int, int, int]]:
    """(name, m, n, k, how many per model) of the blocks' matmuls on one rank: tp splits each layer's output
    features or its inner dimension; a routed expert's GEMM takes its rows from all `ep` ranks (see step_parts)."""
    d, f, L = cfg.d_model, ffn_width(cfg), cfg.n_layers
    if cfg.arch == "mlp":
        return [("fc1", tokens, f // tp, d, L), ("fc2", tokens, d, f // tp, L)]
    if cfg.arch == "gpt":
        qkv, proj = ("qkv", tokens, 3 * d // tp, d, L), ("proj", tokens, d, d // tp, L)
        return [qkv, proj, ("fc1", tokens, f // tp, d, L), ("fc2", tokens, d, f // tp, L)]
    q, kv, moe = cfg.n_heads * head_dim(cfg), kv_heads(cfg) * head_dim(cfg), moe_layers(cfg)
    out = [(w, tokens, width // tp, d, L) for w, width in (("wq", q), ("wk", kv), ("wv", kv))]
    out += [("wo", tokens, d, q // tp, L)]
    out += [(w, tokens, f // tp, d, L - moe) for w in ("w1", "w3")] + [("w2", tokens, d, f // tp, L - moe)]
    if moe:
        h, routed = expert_width(cfg), max(1, tokens * ep * cfg.experts_per_token // cfg.n_experts)
        out += [("router", tokens, cfg.n_experts, d, moe)]
        for group, m, count in (("expert", routed, cfg.experts_per_token), ("shared", tokens, cfg.shared_experts)):
            out += [(f"{group}_{w}", m, h // tp, d, moe * count) for w in ("w1", "w3") if count]
            out += [(f"{group}_w2", m, d, h // tp, moe * count)] if count else []
    return out


BLOCK_PASS_BYTES = {
    # (arch, compiled): bytes per token of one block's memory-bound kernels, forward and backward, as
    # coefficients of d (d_model), f (the feed-forward width) and qk (the rotated widths, q + kv), in
    # the built-in blocks under bf16 autocast: the residual stream and the norms in fp32 (4 bytes),
    # matmul operands and outputs bf16 (2 bytes), each cast fp32 → bf16 reading 4 and writing 2.
    # Eager: every op is its own kernel reading its inputs from HBM and writing its output there.
    #   gpt forward 60d + 4f: LayerNorm 8d ×2; the normed x cast once per q, k, v and fc1 linear
    #   (autocast caches no activation casts) 6d ×4; residual adds 10d ×2; GELU 4f.
    #   gpt backward 118d + 8f: the stream's gradient cast to bf16 per branch 6d ×2, each linear's
    #   input gradient cast back 6d ×4 and the q, k, v three summed 12d ×2, LayerNorm backward 12d ×2,
    #   the two gradient paths accumulated 12d ×2, bias gradients 2d ×5; GELU backward 6f, fc1's bias 2f.
    #   llama forward 106d + 10f + 20qk: RMSNorm as written (pow, mean, ×rsqrt, ×weight in fp32) 28d ×2;
    #   casts 6d ×5 (wq, wk, wv, w1, w3); residual adds 10d ×2; rotary on q and k (neg, cat, two
    #   products and their sum in bf16) 20qk; silu 4f and the gate product 6f.
    #   llama backward 178d + 18f + 20qk: RMSNorm backward ~2× its forward 56d ×2, casts 6d ×5 + sums
    #   12d, accumulations 12d ×2, rotary 20qk; the product's two gradients 12f, silu's 6f.
    # Compiled (inductor, per block): each chain of such ops between two matmul or attention kernels is
    #   one kernel reading the chain's inputs and writing its outputs once (a cast is a store's dtype).
    #   gpt forward 28d + 4f: norm+cast 6d; add+norm+cast 12d; bias+GELU 4f; bias+add 10d.
    #   gpt backward 40d + 6f: cast+bias gradient 6d; GELU backward with fc1's bias 6f; sum+norm
    #   backward+accumulate+cast 16d and 18d.
    #   llama forward 28d + 6f + 4qk: norm+cast 6d, add+norm+cast 12d, add 10d; rotary 4qk; silu·gate 6f.
    #   llama backward 42d + 10f + 4qk: cast 6d, sum+norm backward+accumulate+cast 18d ×2; rotary 4qk;
    #   silu·gate backward 10f.
    # mlp (LayerNorm, GELU feed-forward, one residual add): eager 60d + 12f, compiled 36d + 10f.
    ("gpt", False): (178, 12, 0),
    ("gpt", True): (68, 10, 0),
    ("llama", False): (284, 28, 40),
    ("llama", True): (70, 16, 8),
    ("mlp", False): (60, 12, 0),
    ("mlp", True): (36, 10, 0),
}
"""(d, f, qk) coefficients of a block's memory-bound bytes per token (the comment above counts them).
The dtypes are the built-in trainer's (launcher/train/engines/base.autocast); a stack that keeps its
residual stream in bf16 moves fewer, ignored here."""


def _elementwise_bytes(cfg: ModelConfig, *, compiled: bool) -> float:
    """Bytes one block moves per token outside its matmuls and attention kernel, forward and backward:
    norms, residual adds, the activation, rotary positions and autocast's casts, each its own kernel in
    eager, fused into one kernel per chain between matmuls when compiled (BLOCK_PASS_BYTES)."""
    d, f = cfg.d_model, active_ffn_width(cfg)
    qk = (cfg.n_heads + kv_heads(cfg)) * head_dim(cfg) if cfg.arch == "llama" else 0  # q and k, rotated
    cd, cf, cqk = BLOCK_PASS_BYTES[cfg.arch if cfg.arch in ("gpt", "mlp") else "llama", compiled]
    return cd * d + cf * f + cqk * qk


RING_BYTES = {"merge": 38, "once": 12, "send": 4, "grad_q": 10, "grad_kv": 18}
"""Bytes per element torch's ring attention moves outside its kernels (torch/distributed/tensor/experimental/
_context_parallel/_attention.py; each op its own kernel). merge: one step's partial output merged into the
running one, forward (_SDPAMerger, convert_to_f32 its default): the bf16 block cast to fp32 (2 + 4),
out − block_out (8 + 4), × sigmoid of the logsumexps' difference (4 + 4), out − that (8 + 4); once: the first
step's cast to fp32 and the result's back (6 + 6); send: torch.cat of k and v before each send (2 + 2),
forward and backward; backward, every step: grad_q added into its fp32 accumulator (4 + 2 read, 4 written),
grad_kv the same for each key and value gradient, then concatenated to be sent on (+ 4 + 4)."""


def ring_bytes(cfg: ModelConfig, cp: int) -> float:
    """Bytes per token one block's ring attention moves outside its kernels under context parallel `cp`
    (torch's _templated_ring_attention and its backward; RING_BYTES), counted whole on the load-balanced
    steps that merge half the rows (an upper bound); a rerun forward merges again. 0 without cp."""
    if cp <= 1 or cfg.arch == "mlp":
        return 0.0
    q, kv = cfg.n_heads * head_dim(cfg), 2 * kv_heads(cfg) * head_dim(cfg)  # output; k and v
    r = RING_BYTES
    forward = r["once"] * q + (cp - 1) * (r["merge"] * q + r["send"] * kv)
    backward = cp * (r["grad_q"] * q + r["grad_kv"] * kv) + (cp - 1) * r["send"] * kv
    return forward * (1 + _reruns(cfg, "attention")) + backward


def model_ops(
    cfg: ModelConfig, *, tokens: int, tp: int = 1, cp: int = 1, ep: int = 1, compiled: bool = False, loss: str = "torch"
) -> list[Op]:
    """A training step's operations: `tokens` rows per matmul (a micro-batch's tokens on one rank), tp, cp and
    ep (block_matmuls) as the layout splits them; `compiled`: the blocks run under torch.compile (train.compile),
    their memory-bound ops fused (BLOCK_PASS_BYTES); `loss`: the cross-entropy's kind (loss_bytes.LOSS_BYTES).
    Matmul and attention FLOPs count every run (forward,
    backward's two, recompute); norms and biases carry their 6 FLOPs per parameter (the 6N
    convention's) on the memory op they run in, so the ops' FLOPs sum to hardware_flops_per_token."""
    d, L, parts = cfg.d_model, cfg.n_layers, model_parts(cfg)
    ops = [
        Op(
            name=name,
            priced="matmul",
            m=m,
            n=n,
            k=k,
            flops=2.0 * n * k * tp * count * (3 + _reruns(cfg, name)),
            fp8=True,
        )
        for name, m, n, k, count in block_matmuls(cfg, tokens, tp, ep)
    ]
    matmul_params = sum(n * k * tp * count for _, _, n, k, count in block_matmuls(cfg, tokens, tp, ep))
    if cfg.arch != "mlp":
        core, runs, seq = attention_forward_flops_per_token(cfg), 3 + _reruns(cfg, "attention"), cfg.seq_len
        # Under cp, torch's ring runs the kernel once per step on its chunk: seq/cp keys a call (ring_bytes).
        ops.append(
            Op(name="attention", priced="attention", m=seq // cp, n=seq // cp, k=head_dim(cfg), flops=core * runs)
        )
        if cp > 1:
            ops.append(Op(name="ring_merge", priced="memory", nbytes=L * ring_bytes(cfg, cp)))
    # Norm weights and biases: what N counts beyond the matmuls' weights (exact for a dense model;
    # a MoE model's mean block in model_parts carries its rounding).
    small = parts.block * L - inactive_params(cfg) - matmul_params
    rerun_small = 2.0 * L * (d if cfg.arch == "gpt" else 0) if cfg.activation_checkpointing == "op" else 0.0
    if cfg.activation_checkpointing == "full":
        rerun_small = 2.0 * (small - L * (d if cfg.arch != "llama" else 0))  # not the output projection's bias
    full = 1.0 + 0.4 * (cfg.activation_checkpointing == "full")  # a rerun forward moves ~2 of its 5 passes' bytes
    elementwise = L * _elementwise_bytes(cfg, compiled=compiled) * full
    ops.append(Op(name="elementwise", priced="memory", flops=6.0 * small + rerun_small, nbytes=elementwise))
    ops.append(Op(name="head", priced="matmul", m=tokens, n=cfg.vocab_size // tp, k=d, flops=6.0 * parts.head))
    nbytes = LOSS_BYTES[loss] * cfg.vocab_size + ACT_BYTES * 5 * d
    ops.append(Op(name="loss", priced="memory", flops=6.0 * parts.final_norm, nbytes=nbytes))
    return ops
