"""What a rank's activations take, estimated before anything runs: the tensors each block saves for
backward under the layout's precision and activation checkpointing, held for as many micro-batches
as the pipeline schedule has in flight, and the logits around the loss on the last stage. Pure
arithmetic on the config (no torch); memory.py adds parameters, gradients, optimizer and runtime.

Activations are the tensors a block saves for backward (fused attention: no seq² term), the logits
and their log-softmax. Activation checkpointing (model.activation_checkpointing): `selective`
recomputes only the attention core, whose fused kernel keeps nothing a block would not keep anyway
(q, k, v are its inputs, its output is the projection's input) beyond per-head softmax statistics,
so it saves what `none` saves; `full` keeps only each block's input (the fp32 residual stream) plus
one block's activations while that block is recomputed; `op` (torchtitan's per-op policy) keeps
that input, the attention output and every second matmul's output. Recipes of other trainers say
what they keep unlike the built-in one (config/schema_trainer.py): a fused cross-entropy (16-bit
logits and their gradient, 4 bytes a logit), Megatron's vocab-parallel one (a float32 copy worked
in place, 6), 16-bit norms, 16-bit activations (Megatron's distributed optimizer; FSDP's
MixedPrecisionPolicy inside pipeline stages, torchtitan's), a fused SwiGLU (Megatron's), every n-th
block checkpointed whole (fms-fsdp's selective_checkpointing). A checkpointed block is recomputed in
its own backward, after the loss's backward freed the logits: the two peaks are not added.
"""

from __future__ import annotations

from launcher.compute.flops import active_ffn_width, kv_heads
from launcher.compute.loss_bytes import loss_kind
from launcher.config.derived import head_dim
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.layouts import DataParallel, traits
from launcher.trials.spec import Trial

FP32 = 4
SAVED_PER_LAYER = {
    ("gpt", "fp32"): 68,
    ("gpt", "mixed"): 46,
    ("gpt", "pure"): 32,
    ("mlp", "fp32"): 40,
    ("mlp", "mixed"): 26,
    ("mlp", "pure"): 21,
}
"""Bytes a block saves for backward per token, per unit of d_model (gpt fp32: 17 d-wide tensors
of 4 bytes — LayerNorm inputs and outputs, q, k, v, attention out, the ffn's 4d hidden twice).
`mixed`: under autocast (fp32 residual stream and LayerNorms); `pure`: FSDP's MixedPrecisionPolicy,
whose 16-bit parameters make every tensor 16-bit (gpt: the 17 at 2 bytes, 32 measured). Per-row
statistics come on top, per token (ROW_STATS). llama's depend on its kv and ffn widths:
`llama_saved_bytes`."""
ROW_STATS = 4
"""float32 values per token a gpt or llama block saves besides its d-wide tensors: its two norms'
mean and reciprocal deviation; one more per attention head (the fused attention's log-sum-exp) is
added to them. Per token, not per unit of d_model: at d_model 2048 they are 0.05 bytes a unit, at
128 about one (what the table counted for gpt `pure` before, 33)."""
LOGIT_BYTES = {"fp32": 16, "mixed": 14, "pure": 14}
"""Per logit around the loss at its peak (log-softmax's backward): the logits (16-bit under mixed
precision), the float32 log-softmax, its gradient and the gradient of its input."""


def mixed_precision(cfg: LauncherConfig, device: str) -> bool:
    """16-bit compute: precision bf16/fp16 (fp8: bf16 around its float8 matmuls), or `auto` on a GPU (bf16
    there, fp32 on CPU)."""
    return cfg.precision in ("bf16", "fp16", "fp8") or (cfg.precision == "auto" and device == "cuda")


def in_flight(cfg: LauncherConfig, trial: Trial, pp_rank: int) -> tuple[float, float]:
    """(layers' worth of whole micro-batches whose activations pipeline rank `pp_rank` holds at
    its peak; fraction of a micro-batch's tokens whose logits its last stage holds at once)."""
    m, L, pp = cfg.parallel.microbatches, cfg.model.n_layers, trial.pp
    if not traits(trial.layout).splits("pp"):
        return float(L), 1.0
    schedule = cfg.parallel.schedule
    if schedule == "gpipe":  # every microbatch forward before any backward
        return L / pp, 1.0
    if schedule == "1f1b":
        return min(m, pp - pp_rank) * (L / pp) / m, 1 / m
    v = cfg.parallel.virtual_stages  # interleaved: warm-up forwards of one chunk (L / (pp·v) layers) each
    held = min(m * v, (v - 1) * pp + 2 * (pp - 1 - pp_rank) + 1)
    return held * (L / (pp * v)) / m, 1 / m


def llama_saved_bytes(m: ModelConfig, mixed: bool, pure: bool = False, norm_16bit: bool = False) -> float:
    """Bytes a llama block saves for backward per token (checked against a built block's saved
    tensors in tests/unit/test_memory.py). Each RMSNorm: its input and float32 normalised value, and
    its output as the next Linears' input; then q, the attention output (also the projection's
    input), k and v (kv width each), and SwiGLU's gate, up, silu and product (ffn width each).
    fp32: all 4 bytes. Mixed (autocast): the norms' float32 tensors stay 4 bytes; the rest are
    2, with a norm's output cast once per Linear reading it (3 for q, k, v; 2 for w1, w3). Pure
    (16-bit parameters, FSDP's MixedPrecisionPolicy): a norm keeps its float32 input copy, its
    16-bit normalised value and its output; everything else is 2 bytes, read once. `norm_16bit`
    (trainer.norm_16bit, a fused norm): a norm keeps its input as it comes (the float32 residual
    under autocast, 16-bit with 16-bit parameters) and its 16-bit output, read by every Linear."""
    d, f = m.d_model, active_ffn_width(m)  # a MoE block's: its token's experts' (the dense width otherwise)
    q_width, kv_width = m.n_heads * head_dim(m), kv_heads(m) * head_dim(m)
    norm_fp32 = 2 * 2 * d  # input and normalised value, per norm
    if not mixed:
        return FP32 * (norm_fp32 + 2 * d + 2 * q_width + 2 * kv_width + 4 * f)
    rest = 2 * (2 * q_width + 2 * kv_width + 4 * f)  # q, attention output, k, v, SwiGLU's four
    if pure:
        return 2 * ((2 + 2) if norm_16bit else (4 + 2 + 2)) * d + rest
    if norm_16bit:
        return FP32 * 2 * d + 2 * 2 * d + rest
    return FP32 * norm_fp32 + 2 * (3 + 2) * d + rest


def saved_bytes_per_token(m: ModelConfig, mixed: bool, pure: bool = False, norm_16bit: bool = False) -> float:
    """Bytes one block saves for backward per token without checkpointing (`pure`: 16-bit parameters;
    `norm_16bit`: fused norms with 16-bit outputs)."""
    if m.arch == "mlp":
        return SAVED_PER_LAYER[(m.arch, precision_kind(mixed, pure))] * m.d_model
    row_stats = FP32 * (ROW_STATS + m.n_heads)
    if m.arch == "llama":
        return llama_saved_bytes(m, mixed, pure, norm_16bit) + row_stats
    saved = SAVED_PER_LAYER[(m.arch, precision_kind(mixed, pure))] * m.d_model + row_stats
    if m.arch == "gpt" and norm_16bit and mixed and not pure:
        saved -= 2 * FP32 * m.d_model  # its two LayerNorms' float32 outputs (the 16-bit casts stay, as outputs)
    return saved


def op_kept_bytes(m: ModelConfig, mixed: bool, pure: bool) -> float:
    """Bytes a block keeps per token under `op` (torchtitan's per-op selective recompute): its input
    (the residual stream), the attention output and every second matmul's output (llama: wq, wv, w1,
    w2; gpt: qkv, fc1), at the compute precision. mlp has no such policy: it keeps what `none` keeps."""
    d, e, residual = m.d_model, 2 if mixed else FP32, 2 if pure else FP32
    if m.arch == "llama":
        q_width, kv_width = m.n_heads * head_dim(m), kv_heads(m) * head_dim(m)  # wq's and the attention's outputs
        return e * (d + 2 * q_width + kv_width + active_ffn_width(m)) + residual * d
    if m.arch == "gpt":
        return e * (3 * d + d + 4 * d) + residual * d
    return saved_bytes_per_token(m, mixed, pure)


def precision_kind(mixed: bool, pure: bool) -> str:
    return "fp32" if not mixed else "pure" if pure else "mixed"


def pure_16bit(cfg: LauncherConfig, trial: Trial, device: str) -> bool:
    """Whether the trial computes with 16-bit parameters rather than under autocast: FSDP outside a
    pipeline (engines/fsdp.py shards with a MixedPrecisionPolicy and runs no autocast), inside one
    where the trainer applies that policy there too (trainer.pipeline_fsdp_16bit), or any layout of a
    trainer with 16-bit weights (Megatron's, trainer.distributed_optimizer; trainer.weights_16bit)."""
    row = traits(trial.layout)
    fsdp_16bit = row.data_parallel == DataParallel.fsdp and (not row.splits("pp") or cfg.trainer.pipeline_fsdp_16bit)
    weights_16bit = cfg.trainer.distributed_optimizer or cfg.trainer.weights_16bit
    return mixed_precision(cfg, device) and (fsdp_16bit or weights_16bit)


def kept_bytes_per_token(cfg: LauncherConfig, mixed: bool, pure: bool, per_layer: float) -> float:
    """Bytes a block keeps per token between its forward and its backward, averaged over the blocks:
    under `full` its input (the residual stream, fp32 under autocast, 16-bit with 16-bit parameters),
    under `op` also its kept matmul outputs, else what it saves (`per_layer`); every n-th block
    checkpointed whole (trainer.checkpoint_every_nth_block; fms-fsdp's ac_handler wraps blocks n, 2n, …
    of L, so L // n of them) keeps only its input."""
    m, every = cfg.model, cfg.trainer.checkpoint_every_nth_block
    whole = (2 if pure else FP32) * m.d_model
    if m.activation_checkpointing == "full":
        return whole
    rest = op_kept_bytes(m, mixed, pure) if m.activation_checkpointing == "op" else per_layer
    wrapped = (m.n_layers // every) / m.n_layers if every else 0.0
    return (1 - wrapped) * rest + wrapped * whole


def activation_bytes(cfg: LauncherConfig, trial: Trial, pp_rank: int, device: str) -> float:
    m = cfg.model
    tokens = trial.micro * m.seq_len // trial.cp  # context parallel: this rank's piece of each sequence
    layers, logits = in_flight(cfg, trial, pp_rank)
    mixed, pure = mixed_precision(cfg, device), pure_16bit(cfg, trial, device)
    per_layer = saved_bytes_per_token(m, mixed, pure, cfg.trainer.norm_16bit)
    if cfg.trainer.fused_swiglu and m.arch == "llama":
        per_layer -= (2 if mixed else FP32) * active_ffn_width(m)  # silu's output, recomputed from gate in backward
    blocks = layers * tokens * kept_bytes_per_token(cfg, mixed, pure, per_layer) / trial.tp
    recomputed = 0.0
    if m.activation_checkpointing in ("full", "op") or cfg.trainer.checkpoint_every_nth_block:
        # One block's activations, of one (pipeline) micro-batch, exist while it is recomputed in backward.
        one = tokens / cfg.parallel.microbatches if traits(trial.layout).splits("pp") else tokens
        recomputed = one * per_layer / trial.tp
    if pp_rank != trial.pp - 1:
        return blocks + recomputed
    # A fused cross-entropy keeps the logits at the compute precision and writes their gradient beside them.
    # Megatron's vocab-parallel one: the 16-bit logits and one float32 copy worked in place (the copy is the logits
    # in fp32).
    per_logit = {"fused": 2 * (2 if mixed else FP32), "vocab_parallel": FP32 + (2 if mixed else 0)}.get(
        loss_kind(cfg.trainer), LOGIT_BYTES[precision_kind(mixed, pure)]
    )
    around_loss = logits * tokens * per_logit * m.vocab_size / trial.tp
    # A checkpointed block is recomputed in its own backward, after the loss's backward has freed the logits
    # and their gradients: the two peaks come one after the other, not together.
    return blocks + max(recomputed, around_loss)
