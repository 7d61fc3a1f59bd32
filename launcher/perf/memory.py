"""Memory one rank of a trial needs, estimated before anything runs, and the room it has.

Pure arithmetic on the config (no torch): parameters, gradients, optimizer state and activations
of this rank's part of the model under its layout and precision, plus the process's runtime
(interpreter, torch and its communication library; on a GPU the CUDA context). A trial whose
estimate exceeds its room (cluster.device_memory_gb on a GPU; on CPU the host's memory,
cluster.host_memory_gb or this machine's MemTotal when local, shared by the ranks on it) is
recorded as a predicted `oom` and never launched.

Counts follow what the payload builds (launcher/train): fp32 master parameters; DDP keeps a
gradient and a bucket copy of it; FSDP keeps its shard of parameters, gradients and optimizer
state, plus the units gathered at a time (two blocks and the root with reshard_after_forward,
everything without), and whole unsharded gradients while accumulating (unless
parallel.fsdp_sync_each_microstep reduce-scatters each micro-step), and inside a pipeline stage the
whole stage gathered and its gradients unsharded (torch's stage turns FSDP's sync and
reshard-after-backward off until the step's last backward); autocast keeps a 16-bit copy of the
weights it casts. Activations are the tensors a block saves for backward (fused
attention: no seq² term), the logits and their log-softmax, held for as many microbatches as
the pipeline schedule has in flight on the rank. Activation checkpointing (model.
activation_checkpointing): `selective` recomputes only the attention core, whose fused kernel
keeps nothing a block would not keep anyway (q, k, v are its inputs, its output is the
projection's input) beyond per-head softmax statistics, so it saves what `none` saves; `full`
keeps only each block's input (the fp32 residual stream) plus one block's activations while that
block is recomputed; `op` (torchtitan's per-op policy) keeps that input, the attention output and
every second matmul's output. Recipes of other trainers say what they keep unlike the built-in
one (config/schema_trainer.py): a fused cross-entropy (16-bit logits and their gradient, 4 bytes a
logit), 16-bit norms, Megatron's distributed optimizer (16-bit weights whole, one float32 gradient
buffer, float32 master weights and moments sharded over dp, 16-bit activations). It is an
estimate: allocator fragmentation and communication buffers are left out, so a trial it passes
can still run out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from launcher.compute.flops import (
    ModelParts,
    active_ffn_width,
    kv_heads,
    model_parts,
    routed_expert_params,
    stage_params,
)
from launcher.compute.peaks import device_memory_gb
from launcher.config.cluster_traits import cluster_traits
from launcher.config.derived import pipeline_batch
from launcher.config.schema import ClusterConfig, LauncherConfig, ModelConfig
from launcher.layouts import DataParallel, traits
from launcher.trials.spec import Trial

GIB = float(1 << 30)
FP32 = 4
RUNTIME_BYTES = {"cpu": 0.4 * GIB, "cuda": 1.0 * GIB}
"""Per process before any tensor: interpreter + torch + gloo (cpu); CUDA context + NCCL (cuda)."""
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
OPTIMIZER_STATES = {"adamw": 2}
"""fp32 tensors per parameter the optimizer keeps (sgd: 1 with momentum, else 0)."""


@dataclass(kw_only=True, frozen=True)
class RankMemory:
    """Bytes one rank needs, by what holds them."""

    params: float
    """Parameters: this rank's fp32 shard or stage, plus gathered or 16-bit copies."""
    grads: float
    """Gradients (and DDP's bucket copy; FSDP's unsharded ones while they exist)."""
    optimizer: float
    """Optimizer state (AdamW: two fp32 moments per parameter)."""
    activations: float
    """What forward saves for backward, including the logits around the loss."""
    runtime: float
    """The process itself: interpreter, torch, communication library or CUDA context."""

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.runtime

    def describe(self) -> str:
        parts = ("params", "grads", "optimizer", "activations", "runtime")
        each = ", ".join(f"{p} {getattr(self, p) / GIB:.1f}" for p in parts)
        return f"needs ~{self.total / GIB:.1f} GiB per rank ({each} GiB)"


MEMORY_MARGIN = 0.05
"""Share of a rank's memory kept free of the estimate, one margin for `launcher plan`
(memory_limit.py) and the sweep's predicted-OOM gate (predicted_oom): a configuration fits when
its estimate ≤ (1 − MEMORY_MARGIN) × the rank's memory. Derived in
benchmarks/results/memory_accuracy.json (`python -m benchmarks.memory_accuracy`): CPU trials of
every layout (and fsdp accumulating, with and without fsdp_sync_each_microstep) measured the peak
resident memory against the estimate, estimate ÷ measured 1.11–1.21 (never under: worst
under-estimate 0%), plus its stated 5% cushion for what a CPU trial does not see (the CUDA caching
allocator's fragmentation, NCCL buffers). On an H100 (gpu_smoke.md) the estimate was 1.15× (ddp,
bf16) and 1.25× (fsdp, bf16) the peak CUDA allocation; since FSDP is counted with 16-bit parameters
and the loss at 14 bytes per logit under mixed precision, the same measured peaks give 1.07× (ddp,
bf16), 1.04× (ddp, fp32) and 1.06× (fsdp, bf16): still over."""


@dataclass(kw_only=True, frozen=True)
class Room:
    """Memory one rank may use, and where that figure came from."""

    bytes_per_rank: float
    """Bytes available to one rank."""
    source: str
    """In words, e.g. `cluster.device_memory_gb` or `host memory 23.5 GiB (MemTotal) shared by 2 ranks`."""


def rank_params(parts: ModelParts, m: ModelConfig, trial: Trial, pp_rank: int) -> tuple[float, float]:
    """(parameters of pipeline rank `pp_rank`'s stages on one tp rank, of them outside blocks),
    before any FSDP sharding (flops.stage_params)."""
    return stage_params(parts, m.n_layers, tp=trial.tp, pp=trial.pp, pp_rank=pp_rank)


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
    kv_width = kv_heads(m) * (d // m.n_heads)
    norm_fp32 = 2 * 2 * d  # input and normalised value, per norm
    if not mixed:
        return FP32 * (norm_fp32 + 2 * d + 2 * d + 2 * kv_width + 4 * f)
    rest = 2 * (2 * d + 2 * kv_width + 4 * f)  # q, attention output, k, v, SwiGLU's four
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
        kv_width = kv_heads(m) * (d // m.n_heads)
        return e * (3 * d + kv_width + active_ffn_width(m)) + residual * d
    if m.arch == "gpt":
        return e * (3 * d + d + 4 * d) + residual * d
    return saved_bytes_per_token(m, mixed, pure)


def precision_kind(mixed: bool, pure: bool) -> str:
    return "fp32" if not mixed else "pure" if pure else "mixed"


def pure_16bit(cfg: LauncherConfig, trial: Trial, device: str) -> bool:
    """Whether the trial computes with 16-bit parameters rather than under autocast: FSDP outside a
    pipeline (engines/fsdp.py shards with a MixedPrecisionPolicy and runs no autocast), or any layout
    of a trainer with Megatron's 16-bit weights (trainer.distributed_optimizer)."""
    row = traits(trial.layout)
    fsdp_alone = row.data_parallel == DataParallel.fsdp and not row.splits("pp")
    return mixed_precision(cfg, device) and (fsdp_alone or cfg.trainer.distributed_optimizer)


def activation_bytes(cfg: LauncherConfig, trial: Trial, pp_rank: int, device: str) -> float:
    m = cfg.model
    tokens = trial.micro * m.seq_len // trial.cp  # context parallel: this rank's piece of each sequence
    layers, logits = in_flight(cfg, trial, pp_rank)
    mixed, pure = mixed_precision(cfg, device), pure_16bit(cfg, trial, device)
    per_layer = saved_bytes_per_token(m, mixed, pure, cfg.trainer.norm_16bit)
    if m.activation_checkpointing in ("full", "op"):
        # Each block keeps its input (the residual stream, fp32 under autocast, 16-bit with 16-bit
        # parameters; `op` also its kept matmul outputs), and one block's activations, of one
        # (pipeline) microbatch, exist at a time while it is recomputed.
        one = tokens / cfg.parallel.microbatches if traits(trial.layout).splits("pp") else tokens
        kept = (
            (2 if pure else FP32) * m.d_model if m.activation_checkpointing == "full" else op_kept_bytes(m, mixed, pure)
        )
        blocks = (layers * tokens * kept + one * per_layer) / trial.tp
    else:
        blocks = layers * tokens * per_layer / trial.tp
    if pp_rank != trial.pp - 1:
        return blocks
    # A fused cross-entropy keeps the logits at the compute precision and writes their gradient beside them.
    per_logit = 2 * (2 if mixed else FP32) if cfg.trainer.fused_loss else LOGIT_BYTES[precision_kind(mixed, pure)]
    return blocks + logits * tokens * per_logit * m.vocab_size / trial.tp


def rank_memory(cfg: LauncherConfig, trial: Trial, pp_rank: int, device: str) -> RankMemory:
    """What pipeline rank `pp_rank` (any dp and tp coordinate) of `trial` needs, in bytes."""
    cfg = pipeline_batch(cfg, trial.dp)  # the micro-batches the trial runs (derived from a fixed global batch)
    parts = model_parts(cfg.model)
    n, root = rank_params(parts, cfg.model, trial, pp_rank)
    dp_kind = traits(trial.layout).data_parallel
    fsdp = dp_kind == DataParallel.fsdp
    # FSDP shards over dp × cp (the cp ranks hold the same parameters); under hsdp over one shard group.
    local = n / (trial.shard * trial.cp) if fsdp else n
    # Expert parallel (fsdp_ep, tp = pp = 1): a rank gathers n_experts ÷ ep of each MoE block's experts;
    # sharded over the dp ÷ ep ranks holding them, its share (`local`) is the dp-th part as before.
    others = routed_expert_params(cfg.model) * (1 - 1 / trial.ep)
    n -= others
    compute = 2 if mixed_precision(cfg, device) else FP32
    unit = (parts.block - parts.block_norms) / trial.tp + parts.block_norms - others / cfg.model.n_layers
    if cfg.trainer.distributed_optimizer:
        # Megatron: 16-bit weights whole, its float32 master weights sharded over dp (none in fp32),
        # one float32 gradient buffer of the whole part; the optimizer's moments sharded below.
        local = n / trial.dp
        params = n * compute + (0 if compute == FP32 else local * FP32)
        grads = n * FP32
    elif fsdp and trial.pp > 1:
        # torch's pipeline stage runs every backward but the step's last with FSDP's gradient sync
        # and reshard-after-backward off: the stage's parameters stay gathered (fp32: no
        # MixedPrecisionPolicy there; autocast's 16-bit copy beside them) and its gradients unsharded.
        params = local * FP32 + n * FP32 + (0 if compute == FP32 else n * compute)
        grads = local * FP32 + n * FP32
    elif fsdp:
        gathered = n if not cfg.parallel.reshard_after_forward else min(n, root + 2 * unit)
        params = local * FP32 + gathered * compute
        # Unsharded gradients persist across micro-steps unless each one reduce-scatters.
        keeps_unsharded = trial.accum > 1 and not cfg.parallel.fsdp_sync_each_microstep
        unsharded_grads = n if keeps_unsharded else min(n, root + 2 * unit)
        grads = local * FP32 + unsharded_grads * FP32
    else:
        params = n * FP32 + (0 if compute == FP32 else n * compute)
        grads = n * FP32 * (2 if dp_kind == DataParallel.ddp else 1)
    o = cfg.optim
    states = OPTIMIZER_STATES.get(o.name, 1 if o.momentum else 0)
    activations = activation_bytes(cfg, trial, pp_rank, device)
    return RankMemory(
        params=params,
        grads=grads,
        optimizer=local * FP32 * states,
        activations=activations,
        runtime=RUNTIME_BYTES[device],
    )


def estimate(cfg: LauncherConfig, trial: Trial, device: str = "cpu") -> RankMemory:
    """The neediest rank of `trial` (pipeline ranks differ: the first holds the embeddings, the
    last the head and logits, the early ones more microbatches in flight). A middle rank holds
    no more than the first in any part (the same blocks, no root, no more in flight), so only
    the two ends are counted: a 20-stage pipeline costs two ranks' arithmetic, not twenty."""
    ends = sorted({0, trial.pp - 1})
    return max((rank_memory(cfg, trial, r, device) for r in ends), key=lambda mem: mem.total)


def runs_on_gpu(cfg: LauncherConfig, gpu_here: bool | None = None) -> bool:
    """Whether the trial's ranks use GPUs: device=cuda; device=auto with GPUs per node asked for
    (Slurm) or, locally, a GPU on this machine."""
    c = cfg.cluster
    if c.device != "auto":
        return c.device == "cuda"
    if cluster_traits(c).ranks_here:
        return local_gpu() if gpu_here is None else gpu_here
    return c.gpus_per_node > 0


def room(cfg: LauncherConfig, trial: Trial, *, gpu: bool, host_bytes: float | None) -> Room | None:
    """Memory per rank, or None where nothing says (a GPU without cluster.device_memory_gb; a
    Slurm CPU node without cluster.host_memory_gb or cluster.mem). `host_bytes`: this machine's
    memory, used for local CPU trials when cluster.host_memory_gb is not set."""
    c = cfg.cluster
    if gpu:
        return gpu_room(c)
    if c.host_memory_gb:
        total, what = c.host_memory_gb * GIB, "cluster.host_memory_gb"
    elif cluster_traits(c).batch_jobs and c.mem and (per_node := slurm_mem_bytes(c.mem)) is not None:
        total, what = per_node, f"cluster.mem={c.mem}"
    elif cluster_traits(c).ranks_here and host_bytes:
        total, what = host_bytes, "this machine's MemTotal"
    else:
        return None
    ranks = math.ceil(trial.world_size / max(1, trial.nodes))  # a local trial is one node: all its ranks share it
    shared = f", shared by {ranks} ranks" if ranks > 1 else ""
    return Room(bytes_per_rank=total / ranks, source=f"host memory {total / GIB:.1f} GiB ({what}){shared}")


def gpu_room(c: ClusterConfig) -> Room | None:
    """One GPU's memory: cluster.device_memory_gb, else the peak table's for cluster.device_name
    (None where neither says)."""
    if c.device_memory_gb:
        return Room(bytes_per_rank=c.device_memory_gb * GIB, source="cluster.device_memory_gb")
    table = device_memory_gb(c.device_name)
    if table is None:
        return None
    return Room(bytes_per_rank=table * GIB, source=f"{c.device_name}'s {table:g} GiB (the peak table)")


def predicted_oom(cfg: LauncherConfig, trial: Trial, *, gpu: bool, host_bytes: float | None) -> str | None:
    """The reason `trial` cannot fit (its estimate over the room less MEMORY_MARGIN), or None when it
    fits or the room is unknown. A `_target_` model is not estimated: no config field describes its
    activations, and a guess from the built-in defaults would pass anything; its trials run, and an
    OOM is recorded as it happens."""
    if cfg.model._target_ is not None:
        return None
    where = room(cfg, trial, gpu=gpu, host_bytes=host_bytes)
    if where is None:
        return None
    need = estimate(cfg, trial, "cuda" if gpu else "cpu")
    if need.total <= where.bytes_per_rank * (1 - MEMORY_MARGIN):
        return None
    return (
        f"oom (predicted): estimate {need.total / GIB:.1f} GiB > {where.bytes_per_rank / GIB:.1f} GiB × "
        f"(1 − {MEMORY_MARGIN:.0%} margin) ({where.source}); {need.describe()}"
    )


_MEM = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)B?", re.IGNORECASE)


def slurm_mem_bytes(mem: str) -> float | None:
    """`--mem` as bytes: `64G`, `500M`, `1T`, or a bare number (megabytes, Slurm's unit); None if unreadable."""
    m = _MEM.fullmatch(mem.strip())
    if not m:
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return float(m.group(1)) * scale


def host_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """This machine's MemTotal in bytes (None where /proc/meminfo does not say)."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    found = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return float(found.group(1)) * 1024 if found else None


def local_gpu(driver: Path = Path("/proc/driver/nvidia/gpus")) -> bool:
    """Whether this machine has an NVIDIA driver loaded (where `device: auto` may pick CUDA)."""
    return driver.exists()
