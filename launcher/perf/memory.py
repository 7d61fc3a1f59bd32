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
weights it casts. Activations: memory_activations.py. Recipes of other trainers say what they keep
unlike the built-in one (config/schema_trainer.py): Megatron's distributed optimizer (16-bit
weights whole, one float32 gradient buffer, float32 master weights and moments sharded over
dp × cp), FSDP's 16-bit gathered parameters inside pipeline stages (torchtitan's). It is an
estimate: allocator fragmentation and communication buffers are left out, so a trial it passes
can still run out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from launcher.compute.flops import ModelParts, model_parts, routed_expert_params, stage_params
from launcher.compute.peaks import device_memory_gb
from launcher.config.choices import JobKind
from launcher.config.cluster_traits import cluster_traits
from launcher.config.derived import pipeline_batch
from launcher.config.schema import ClusterConfig, LauncherConfig, ModelConfig
from launcher.layouts import DataParallel, traits
from launcher.perf.memory_activations import FP32, activation_bytes, mixed_precision
from launcher.trials.spec import Trial

GIB = float(1 << 30)
RUNTIME_BYTES = {"cpu": 0.4 * GIB, "cuda": 1.0 * GIB}
"""Per process before any tensor: interpreter + torch + gloo (cpu); CUDA context + NCCL (cuda)."""
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
"""Share of a rank's memory kept free of the estimate, one margin for `launcher plan` (memory_limit.py)
and the sweep's predicted-OOM gate (predicted_oom): a configuration fits when its estimate ≤
(1 − MEMORY_MARGIN) × the rank's memory. What it is: the memory the fullest published run left free,
1 − max(measured peak ÷ device) over the runs of benchmarks/data/published_memory.csv, rounded down to
a whole percent (NousResearch's DeepEP Qwen3-30B-A3B on 8 B200s reserved 167.93 GiB, 94.15% of the GPU:
5%), so an exact estimate never calls a run that ran an oom (`python -m benchmarks.memory_published`
derives it, tests/unit/test_memory_published.py checks it). What it is not: a bound on the estimate's
error. Against those peaks the estimate of the tensors is 0.68–1.09× the measured reservation, under on
15 of 24 runs (tensor- and pipeline-parallel torchtitan runs with Float8 and AsyncTP, the DeepEP
runs), and this margin covers 10 of them (benchmarks/results/memory_published.md): a plan that fits
by the estimate can still run out there. On CPU trials of every layout (benchmarks/memory_accuracy.py)
the estimate is over the measured peak."""


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
    # trainer.weights_16bit: the weights, their sharded gradients and the optimizer's moments in 16 bits.
    weight = compute if cfg.trainer.weights_16bit else FP32
    # trainer.experts_outside_fsdp (dp = ep): the rank's experts are neither gathered nor given unsharded grads.
    outside = own_experts_outside_fsdp(cfg, trial)
    unit = (parts.block - parts.block_norms) / trial.tp + parts.block_norms - (others + outside) / cfg.model.n_layers
    if cfg.trainer.distributed_optimizer:
        # Megatron: 16-bit weights whole, its float32 master weights sharded (none in fp32), one gradient
        # buffer of the whole part (float32; 16-bit with trainer.grad_sync_16bit); moments sharded below.
        # Sharded over dp × cp: Megatron-LM megatron/core/optimizer/__init__.py get_megatron_optimizer builds
        # the distributed optimizer on mpu.get_data_parallel_group(with_context_parallel=True) (cp ranks hold
        # the same weights).
        local = n / (trial.dp * trial.cp)
        master = 2 if cfg.trainer.master_weight_remainders else FP32  # Apex's remainders: the 16 bits bf16 lacks
        params = n * compute + (0 if compute == FP32 else local * master)
        grads = n * (2 if cfg.trainer.grad_sync_16bit else FP32)
    elif fsdp and trial.pp > 1:
        # torch's pipeline stage runs every backward but the step's last with FSDP's gradient sync
        # and reshard-after-backward off: the stage's parameters stay gathered and its gradients
        # unsharded (FSDP2 accumulates them in its reduce dtype, float32). Gathered in fp32 with
        # autocast's 16-bit copy beside them (the built-in trainer: no MixedPrecisionPolicy there), or in
        # 16 bits only where the trainer applies that policy in stages too (trainer.pipeline_fsdp_16bit).
        autocast_copy = 0 if compute == FP32 else n * compute
        in_16bit = cfg.trainer.pipeline_fsdp_16bit or cfg.trainer.weights_16bit
        params = local * weight + (n * compute if in_16bit else n * FP32 + autocast_copy)
        grads = local * weight + n * FP32
    elif fsdp:
        wrapped = n - outside  # what FSDP gathers and gives unsharded gradients
        gathered = wrapped if not cfg.parallel.reshard_after_forward else min(wrapped, root + 2 * unit)
        params = local * weight + gathered * compute
        # Unsharded gradients persist across micro-steps unless each one reduce-scatters.
        keeps_unsharded = trial.accum > 1 and not cfg.parallel.fsdp_sync_each_microstep
        unsharded_grads = wrapped if keeps_unsharded else min(wrapped, root + 2 * unit)
        grads = local * weight + unsharded_grads * FP32
    else:
        params = n * weight + (0 if compute == weight else n * compute)
        grads = n * weight * (2 if dp_kind == DataParallel.ddp else 1)
    o = cfg.optim
    states = OPTIMIZER_STATES.get(o.name, 1 if o.momentum else 0)
    activations = activation_bytes(cfg, trial, pp_rank, device)
    return RankMemory(
        params=params,
        grads=grads,
        optimizer=local * (FP32 if cfg.trainer.distributed_optimizer else weight) * states,
        activations=activations,
        runtime=RUNTIME_BYTES[device],
    )


def own_experts_outside_fsdp(cfg: LauncherConfig, trial: Trial) -> float:
    """Parameters of this rank's routed experts that FSDP leaves out (trainer.experts_outside_fsdp where
    expert parallelism spans the whole data-parallel group, dp = ep); 0 otherwise."""
    if not cfg.trainer.experts_outside_fsdp or trial.ep <= 1 or trial.dp * trial.cp != trial.ep:
        return 0.0
    return routed_expert_params(cfg.model) / trial.ep


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
    OOM is recorded as it happens. Nor is a command trial whose recipe does not describe its program
    (job.model_describes_program false): its model, layout and optimizer groups are then the built-in
    trainer's defaults, and an 8B program sharded by FSDP would read as DDP with AdamW, `oom` at every
    size. Where the recipe does describe it, the reason says the estimate is the recipe's."""
    if cfg.model._target_ is not None:
        return None
    command = cfg.job.kind == JobKind.command
    if command and not cfg.job.model_describes_program:
        return None
    where = room(cfg, trial, gpu=gpu, host_bytes=host_bytes)
    if where is None:
        return None
    need = estimate(cfg, trial, "cuda" if gpu else "cpu")
    if need.total <= where.bytes_per_rank * (1 - MEMORY_MARGIN):
        return None
    of = " from the recipe's model and layout (job.model_describes_program)" if command else ""
    return (
        f"oom (predicted{of}): estimate {need.total / GIB:.1f} GiB > {where.bytes_per_rank / GIB:.1f} GiB × "
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
