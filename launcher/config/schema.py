"""Typed configs: keyword-only dataclasses, one docstring per field.

These classes are the single source of the config's shape. `OmegaConf.structured` turns them
into the schema Hydra composes recipes onto (`load.schema`, registered by `compose.py`), so
composition rejects unknown keys, wrong types and values outside a choice; `OmegaConf.to_object`
turns a composed config back into these objects. Every config key is its field's name.

A field with a closed set of values is typed by a `StrEnum` of launcher/config/choices.py (imported
here, so `from launcher.config.schema import Layout` keeps working).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Re-exported (`X as X`): the choices and the parts' classes keep their `launcher.config.schema` names.
from launcher.config.choices import ClusterKind as ClusterKind
from launcher.config.choices import DataKind, LrScaling, OptimName, PolicyName, Precision, Search, TokenDtype
from launcher.config.choices import InputDtype as InputDtype
from launcher.config.choices import Launch as Launch
from launcher.config.choices import Layout as Layout
from launcher.config.cluster_schema import ClusterConfig
from launcher.config.job import JobConfig
from launcher.config.model_schema import InputSpec as InputSpec
from launcher.config.model_schema import ModelConfig
from launcher.config.parallel_schema import ParallelConfig
from launcher.config.schema_trainer import TrainerConfig


@dataclass(kw_only=True, frozen=True)
class BatchConfig:
    micro: int = 8
    """Samples per rank per forward/backward (micro-batch)."""
    accum: int = 1
    """Micro-steps per optimizer step (gradient accumulation)."""
    global_batch: int | None = None
    """Optional global batch; fixing it makes a sweep strong-scaling. Per trial, accum left at 1
    is derived as global_batch ÷ (micro × dp); any other accum must agree. (Was `batch.global`.)"""


@dataclass(kw_only=True, frozen=True)
class OptimConfig:
    name: OptimName = OptimName.adamw
    """Optimizer: adamw, or sgd (with momentum)."""
    lr: float = 1e-3
    """Learning rate at `base_global_batch`; scaled by `lr_scaling` for other global batches."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    momentum: float = 0.9
    """SGD momentum."""
    warmup_steps: int = 0
    """Linear LR warm-up steps (optimizer steps)."""
    lr_scaling: LrScaling = LrScaling.none
    """How lr follows the global batch: none, linear (lr·G/G₀) or sqrt (lr·√(G/G₀))."""
    base_global_batch: int = 8
    """G₀: the global batch at which `lr` was tuned."""
    clip_grad_norm: float | None = 1.0
    """Clip gradients to this global L2 norm before each step (1.0, as LLM recipes); 0 or null: off."""


@dataclass(kw_only=True, frozen=True)
class DataConfig:
    kind: DataKind = DataKind.synthetic
    """`synthetic`: seeded token sequences (a `_target_` model: drawn from model.inputs). `file`:
    a flat binary token file. `dataset`: your own map-style Dataset (`_target_`)."""
    path: str | None = None
    """Token file for kind=file (little-endian integers of `dtype`)."""
    dtype: TokenDtype = TokenDtype.uint16
    """Element type of the token file."""
    _target_: str | None = None
    """kind=dataset: a callable returning a map-style torch Dataset, e.g. `mypkg.data.make`
    (Hydra's `instantiate` with `kwargs`); its items: launcher/train/data.py, `as_dict`."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """kind=dataset: the callable's keyword arguments (written beside `_target_`, moved here)."""


@dataclass(kw_only=True, frozen=True)
class SweepConfig:
    world_sizes: list[int] = field(default_factory=lambda: [1, 2])
    """World sizes (ranks) to measure; each becomes one trial (local; slurm when `nodes` is null)."""
    nodes: list[int] | None = None
    """slurm: node counts to measure; world size = nodes × ranks per node. Overrides world_sizes."""
    repeats: Any = 1
    """Trials per size: an integer ≥ 1, or `auto` (repeat each size until target_ci is met, at least 3 and at most
    max_repeats times). Sizes run interleaved, one repeat of each per round (1,2,4,1,2,4,…; on Slurm one array per size,
    array_throttle of its repeats at once), so drift over the sweep hits every size alike; the table judges each size by
    its median, with a 90% bootstrap interval. Typed Any, not int, so that `auto` fits; validate.py holds the rule."""
    target_ci: float = 0.05
    """repeats=auto: repeat a size until its tokens/s interval's half-width is at most this
    fraction of its median (0.05: ±5%)."""
    max_repeats: int = 5
    """repeats=auto: the most trials of one size (at least 3, the rounds auto starts with)."""
    pack: bool = False
    """slurm: one allocation of the largest size; every trial runs inside it as a job step."""
    array_throttle: int = 4
    """slurm: the repeats of one size go as one job array (`--array=0-N%K`); K, this, is the most of them that run at
    once, so sizes submitted together run their repeats side by side, each size K at a time, not one size's 64 before
    the next's. 4: sizes advance together within 4 repeats of each other, and a sweep holds at most 4× the nodes of
    its sizes at once; the common 3-5 repeats barely wait. 0: no throttle."""
    steps: int = 30
    """Optimizer steps per trial, warm-up included."""
    warmup_steps: int = 5
    """Leading steps excluded from throughput."""
    threshold: float = 0.8
    """Scaling efficiency a size must keep (max_efficient policy; adaptive search stops below it)."""
    search: Search = Search.grid
    """`grid`: measure every size. `adaptive`: start at the smallest, double while efficiency holds, stop
    below the threshold (or when the calibrated model says the next size cannot meet it), then refine."""
    policy: PolicyName = PolicyName.max_efficient
    """How to pick the size: `max_efficient` (largest with efficiency ≥ threshold), `min_cost`
    (lowest cost per token), `fastest_within_budget` (highest throughput whose cost of
    `token_budget` tokens fits budget_device_hours and/or budget_usd)."""
    token_budget: float | None = None
    """Tokens the real run will train on; adds hours and $ to that budget per size."""
    budget_device_hours: float | None = None
    """fastest_within_budget: device-hours (GPU-hours) the run may spend on token_budget tokens."""
    budget_usd: float | None = None
    """fastest_within_budget: dollars the run may spend on token_budget tokens."""
    force_sizes: list[int] = field(default_factory=list)
    """Sizes run although their memory estimate predicts `oom` (world sizes; node counts with `nodes`),
    e.g. `sweep.force_sizes=[8]`: the predicted-OOM gate says it let them through; the real end is the row."""
    results_dir: str = "results"
    """Folder that receives `<sweep-id>/`."""
    name: str | None = None
    """Sweep id; default is `<timestamp>-<model>-<layout>`."""
    pending_timeout_s: float = 600.0
    """slurm: when none of the sweep's jobs has run for this long (all waiting in the queue), the sweep detaches instead
    of waiting forever: it prints Slurm's Reason for each waiting job and how to follow it (`launcher status` /
    `launcher collect`), and leaves the jobs queued. 0: wait as long as it takes."""
    profile: bool = False
    """torch.profiler trace of a few extra steps after the timed ones (so no figure carries its
    overhead) into the trial folder's `trace-rank0.pt.trace.json`, linked from the report."""


@dataclass(kw_only=True, frozen=True)
class RunConfig:
    world_size: int = 1
    """Ranks of a single `launcher run`."""
    steps: int = 100
    """Optimizer steps of a single run."""
    warmup_steps: int = 5
    """Leading steps excluded from the run's throughput."""
    checkpoint_every: int = 0
    """Save a torch.distributed.checkpoint every this many steps (0: only on Slurm's USR1
    warning, with requeue); a rerun of the job resumes from the latest one."""
    requeue: bool = False
    """Slurm: `--requeue`; on the USR1 warning (time limit near, preemption) checkpoint and
    requeue the job, which resumes from the checkpoint (`launcher run --requeue`)."""


@dataclass(kw_only=True, frozen=True)
class TrainConfig:
    compile: bool = False
    """torch.compile each block (FSDP unit) in place, ddp and fsdp; compiled during warm-up
    (warmup_steps ≥ 1), its time is `metrics.compile_s`, apart from the step times."""


@dataclass(kw_only=True, frozen=True)
class LauncherConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """What is trained."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """How ranks split the work."""
    batch: BatchConfig = field(default_factory=BatchConfig)
    """Micro-batch, accumulation, optional global batch."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and LR rule."""
    data: DataConfig = field(default_factory=DataConfig)
    """Training tokens."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """Where trials run and what a device costs."""
    sweep: SweepConfig = field(default_factory=SweepConfig)
    """Which sizes a sweep measures and how it judges them."""
    run: RunConfig = field(default_factory=RunConfig)
    """A single `launcher run`."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """How the payload trains (compilation)."""
    job: JobConfig = field(default_factory=JobConfig)
    """What a trial runs: the built-in training loop, or your own command (launcher/config/job.py)."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """What the trainer that runs the recipe keeps in memory where it is not the built-in one (planning)."""
    seed: int = 0
    """Seed for weights and synthetic data."""
    precision: Precision = Precision.auto
    """Training precision: fp32, or autocast (FSDP: MixedPrecisionPolicy) to bf16/fp16. `auto`:
    bf16 on CUDA, fp32 on CPU (no native bf16 there: ~10× slower), resolved by the payload per
    device and recorded as `metrics.precision`. fp32 on CUDA runs matmuls and convolutions in TF32.
    `fp8`: bf16 with the blocks' linear layers in float8 (torchao, `pip install launcher[fp8]`; FSDP
    all-gathers their weights in fp8), on a GPU of compute capability ≥ 8.9 (H100, L40S, B200) only."""
