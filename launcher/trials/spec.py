"""Pure planning: a validated config → frozen Trial specs. No I/O, no torch.

Every trial of a sweep is planned (and so checked) before any of them runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from launcher.config.cluster_traits import cluster_traits
from launcher.config.derived import batch_math, pipeline_batch, ranks_per_node, scaled_lr, scaling_mode
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, SweepConfig
from launcher.config.validate import AUTO_FIRST_REPEATS, parse_repeats
from launcher.config.validate_precision import check_fp8_layout, check_precision_device
from launcher.layouts import traits
from launcher.trials.layout import expert_degree, trial_degrees


@dataclass(kw_only=True, frozen=True)
class Trial:
    trial_id: str
    """Folder name of the trial inside the sweep, e.g. `001-ws2`."""
    index: int
    """Position in the sweep (0-based)."""
    world_size: int
    """Ranks (devices) of the trial."""
    nodes: int
    """Nodes the ranks span."""
    layout: str
    """Parallel layout name."""
    dp: int
    """Data-parallel degree."""
    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline-parallel degree."""
    ep: int = 1
    """Expert-parallel degree (fsdp_ep: parallel.ep, borrowed from dp; 1 elsewhere)."""
    cp: int = 1
    """Context-parallel degree (ranks splitting each sequence); world size = dp × cp × tp × pp."""
    shard: int = 0
    """FSDP shard group size: dp, or under hsdp parallel.shard (replicate = dp ÷ shard); 0 in a
    document written before it existed, read as dp."""
    micro: int
    """Samples per rank per micro-step."""
    accum: int
    """Micro-steps per optimizer step."""
    microbatches: int = 1
    """Pipeline micro-batches per micro-step (parallel.microbatches, or derived from a fixed global
    batch: config/derived.py pipeline_batch); 1 without a pipeline."""
    global_batch: int
    """Samples per optimizer step."""
    lr: float
    """Learning rate after the scaling rule."""
    steps: int
    """Optimizer steps, warm-up included."""
    warmup_steps: int
    """Leading steps excluded from throughput."""
    scaling: str
    """`weak` (per-rank batch fixed across sizes) or `strong` (global batch fixed)."""
    repeat: int = 0
    """Which repeat of this size (sweep.repeats > 1 measures each size several times)."""
    variant: str = ""
    """Label of the swept-override combination this trial belongs to ('' when nothing is swept)."""
    checkpoint: bool = False
    """Checkpoint and resume (`launcher run` with run.checkpoint_every or --requeue): resume from
    the trial folder's latest checkpoint, save on USR1."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (0: only on USR1)."""

    def __post_init__(self) -> None:
        if not self.shard:
            object.__setattr__(self, "shard", self.dp)

    @property
    def replicate(self) -> int:
        """HSDP replicas (dp ÷ shard); 1 without HSDP."""
        return self.dp // self.shard

    def to_dict(self) -> dict[str, Any]:
        # Every field is a scalar, so a shallow dict is dataclasses.asdict's result without its recursive
        # copy (512 calls, ~35 ms of submitting a 256-trial sweep: issue 30 item 11).
        return {name: getattr(self, name) for name in _TRIAL_FIELDS}


_TRIAL_FIELDS = tuple(f.name for f in dataclasses.fields(Trial))


def make_trial(
    cfg: LauncherConfig,
    *,
    index: int,
    world_size: int,
    steps: int,
    warmup_steps: int,
    nodes: int = 1,
    repeat: int = 0,
    variant: str = "",
) -> Trial:
    """One trial at `world_size`; ConfigError if this size cannot run this config."""
    degrees = trial_degrees(cfg, world_size)
    dp, tp, pp = degrees.dp, degrees.tp, degrees.pp
    run = pipeline_batch(cfg, dp)
    math_ = batch_math(run.batch, dp)
    name = f"{index:03d}-{variant}-ws{world_size}" if variant else f"{index:03d}-ws{world_size}"
    return Trial(
        trial_id=name + (f"-r{repeat}" if repeat or repeat_plan(cfg.sweep).planned > 1 else ""),
        index=index,
        world_size=world_size,
        nodes=nodes,
        layout=cfg.parallel.layout,
        dp=dp,
        tp=tp,
        pp=pp,
        ep=expert_degree(cfg, degrees.dp),
        cp=degrees.cp,
        shard=degrees.shard,
        micro=math_.micro,
        accum=math_.accum,
        microbatches=run.parallel.microbatches if traits(cfg.parallel.layout).splits("pp") else 1,
        global_batch=math_.global_batch,
        lr=scaled_lr(cfg.optim, math_.global_batch),
        steps=steps,
        warmup_steps=warmup_steps,
        scaling=scaling_mode(cfg),
        repeat=repeat,
        variant=variant,
    )


def sweep_sizes(cfg: LauncherConfig) -> list[tuple[int, int]]:
    """(nodes, world size) per size, smallest first."""
    if cluster_traits(cfg.cluster).ranks_here:  # one machine: sizes count ranks
        return [(1, w) for w in sorted(cfg.sweep.world_sizes)]
    rpn = ranks_per_node(cfg.cluster)
    if cfg.sweep.nodes is not None:
        return [(n, n * rpn) for n in sorted(cfg.sweep.nodes)]
    sizes = []
    for w in sorted(cfg.sweep.world_sizes):
        if w % rpn:
            raise ConfigError(
                f"sweep.world_sizes holds {w}, not a multiple of {rpn} ranks per node; "
                f"use sweep.nodes=[...] or sizes that are multiples of {rpn}"
            )
        sizes.append((w // rpn, w))
    return sizes


@dataclass(kw_only=True, frozen=True)
class RepeatPlan:
    planned: int
    """Trials planned per size: sweep.repeats, or sweep.max_repeats for `auto`."""
    first: int
    """Rounds every size runs before `auto` judges it (all of them for a fixed count)."""
    auto: bool
    """sweep.repeats=auto: later rounds only for sizes whose interval is still wider than target_ci."""
    target_ci: float
    """auto: the relative half-width of the tokens/s interval that ends a size's repeats."""


def repeat_plan(s: SweepConfig) -> RepeatPlan:
    """How many trials of each size a sweep plans and runs (sweep.repeats, max_repeats, target_ci)."""
    k = parse_repeats(s.repeats)
    if k is None:
        return RepeatPlan(planned=s.max_repeats, first=AUTO_FIRST_REPEATS, auto=True, target_ci=s.target_ci)
    return RepeatPlan(planned=k, first=k, auto=False, target_ci=s.target_ci)


def sweep_trials(
    cfg: LauncherConfig, *, first_index: int = 0, variant: str = "", skipped: list[str] | None = None
) -> list[Trial]:
    """All trials of the sweep in the order they run: round by round, one repeat of every size
    per round, smallest first (1,2,4,1,2,4,…), so drift over the sweep hits every size alike.

    Strict by default: the first impossible trial raises, naming its size, before anything has
    run. With `skipped` (a sweep over several combinations), an impossible size is appended
    there with its reason instead, and the others are kept."""
    # Training only (a plan may model fp16 and fp8); `auto`: the local executor or the payload checks the device it
    # got, except that a built-in Slurm job asking for GPUs will get CUDA: fp16 is refused now, not after submission.
    device = str(cfg.cluster.device)
    if device == "auto" and cfg.job.kind == "builtin" and not cluster_traits(cfg.cluster).ranks_here:
        device = "cuda" if cfg.cluster.gpus_per_node or cfg.cluster.gpus_per_task else "auto"
    if device != "auto":
        check_precision_device(str(cfg.precision), device)
    check_fp8_layout(str(cfg.precision), cfg.parallel.layout)
    sizes: list[tuple[int, int]] = []
    for nodes, world_size in sweep_sizes(cfg):
        try:
            make_trial(
                cfg,
                index=0,
                world_size=world_size,
                steps=cfg.sweep.steps,
                warmup_steps=cfg.sweep.warmup_steps,
                nodes=nodes,
            )
        except ConfigError as exc:
            reason = f"world size {world_size}: {exc}"
            if skipped is None:
                raise ConfigError(reason) from None
            skipped.append(f"{variant} at {reason}" if variant else reason)
            continue
        sizes.append((nodes, world_size))
    trials: list[Trial] = []
    for repeat in range(repeat_plan(cfg.sweep).planned):
        for nodes, world_size in sizes:
            trials.append(
                make_trial(
                    cfg,
                    index=first_index + len(trials),
                    world_size=world_size,
                    steps=cfg.sweep.steps,
                    warmup_steps=cfg.sweep.warmup_steps,
                    nodes=nodes,
                    repeat=repeat,
                    variant=variant,
                )
            )
    return trials
