"""Values derived from the config, computed once here and nowhere else."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from launcher.config.errors import ConfigError
from launcher.config.schema import BatchConfig, ClusterConfig, LauncherConfig, ModelConfig, OptimConfig
from launcher.layouts import DataParallel, traits


@dataclass(kw_only=True, frozen=True)
class BatchMath:
    micro: int
    """Samples per rank per micro-step."""
    accum: int
    """Micro-steps per optimizer step."""
    dp: int
    """Data-parallel degree."""
    global_batch: int
    """Samples per optimizer step: micro × accum × dp."""


def batch_math(batch: BatchConfig, dp: int) -> BatchMath:
    """Global batch = micro × accum × dp.

    Without batch.global_batch the per-rank batch is fixed (weak scaling). With it the
    global batch is fixed (strong scaling): accum left at 1 is derived as
    global_batch ÷ (micro × dp); an explicit accum must agree with it.
    """
    per_step = batch.micro * dp
    if batch.global_batch is None:
        return BatchMath(micro=batch.micro, accum=batch.accum, dp=dp, global_batch=per_step * batch.accum)
    if batch.global_batch % per_step:
        raise ConfigError(
            f"batch.global_batch={batch.global_batch} is not divisible by batch.micro({batch.micro}) × dp({dp}) = "
            f"{per_step}; choose a multiple of {per_step} or another batch.micro"
        )
    accum = batch.global_batch // per_step
    if batch.accum not in (1, accum):
        raise ConfigError(
            f"batch.global_batch={batch.global_batch} ≠ batch.micro({batch.micro}) × batch.accum({batch.accum}) × "
            f"dp({dp}) = {per_step * batch.accum}; set batch.accum={accum} or leave it at 1 to derive it"
        )
    return BatchMath(micro=batch.micro, accum=accum, dp=dp, global_batch=batch.global_batch)


def derives_microbatches(cfg: LauncherConfig) -> bool:
    """Megatron's batch semantics: a fixed batch.global_batch on a pipeline layout makes batch.micro
    the micro-batch size and derives the schedule's micro-batches per size (pipeline_batch)."""
    return cfg.batch.global_batch is not None and traits(cfg.parallel.layout).splits("pp")


def pipeline_batch(cfg: LauncherConfig, dp: int) -> LauncherConfig:
    """`cfg` as a trial at data-parallel degree `dp` runs it. Under derives_microbatches the
    schedule's micro-batches are m = global_batch ÷ (micro × accum × dp) (accumulation folds into
    the schedule: one step of m micro-batches, not m steps), written in the per-rank form the
    engines read: batch.micro = micro × m split into parallel.microbatches = m, the global batch
    then fixed by them (global_batch None, so applying this twice changes nothing). Otherwise `cfg`."""
    b = cfg.batch
    if not derives_microbatches(cfg):
        return cfg
    per = b.micro * b.accum * dp
    if b.global_batch % per:
        raise ConfigError(
            f"batch.global_batch={b.global_batch} is not divisible by batch.micro({b.micro}) × batch.accum({b.accum})"
            f" × dp({dp}) = {per}: a pipeline runs global ÷ (micro × accum × dp) micro-batches per step; choose a "
            f"multiple of {per} or another batch.micro"
        )
    m = b.global_batch // per
    return dataclasses.replace(
        cfg,
        batch=dataclasses.replace(b, micro=b.micro * m, global_batch=None),
        parallel=dataclasses.replace(cfg.parallel, microbatches=m),
    )


def head_dim(m: ModelConfig) -> int:
    """The width of one attention head (Q): model.head_dim, or d_model ÷ n_heads where it is null. The one
    place the head width is derived: FLOPs, parameters, memory, shapes and the built models read it here."""
    return m.head_dim or m.d_model // m.n_heads


def scaling_mode(cfg: LauncherConfig) -> str:
    """`weak` (per-rank batch fixed) unless the global batch is fixed across sizes (`strong`): by
    batch.global_batch, or by a layout without data parallelism (its launcher/layouts.py row's
    data_parallel is none: dp = 1 at every size, so micro × accum is the whole global batch: tp, pipeline)."""
    if cfg.batch.global_batch is not None or traits(cfg.parallel.layout).data_parallel == DataParallel.none:
        return "strong"
    return "weak"


def ranks_per_node(cluster: ClusterConfig) -> int:
    """Ranks on one node: tasks_per_node, else one per GPU, else 1."""
    return cluster.tasks_per_node or cluster.gpus_per_node or 1


def nvlink_domain(cluster: ClusterConfig) -> int:
    """Ranks sharing one NVLink domain: cluster.nvlink_domain, else one node's; ConfigError (one line) for
    a domain that does not hold whole nodes."""
    rpn = ranks_per_node(cluster)
    domain = cluster.nvlink_domain or rpn
    if domain < rpn or domain % rpn:
        raise ConfigError(
            f"cluster.nvlink_domain={cluster.nvlink_domain} must be a multiple of the {rpn} ranks per node "
            f"(an NVLink domain holds whole nodes); set e.g. cluster.nvlink_domain={rpn * max(1, domain // rpn)} "
            "or null (one node's)"
        )
    return domain


def scaled_lr(optim: OptimConfig, global_batch: int) -> float:
    """lr at `global_batch` under the configured scaling rule relative to base_global_batch."""
    ratio = global_batch / optim.base_global_batch
    if optim.lr_scaling == "linear":
        return optim.lr * ratio
    if optim.lr_scaling == "sqrt":
        return optim.lr * math.sqrt(ratio)
    return optim.lr
