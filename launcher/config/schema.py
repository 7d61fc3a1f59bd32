"""Typed configs: keyword-only dataclasses, one docstring per field.

These classes are the single source of the config's shape. `store.py` derives the
Hydra/OmegaConf schema from them (so composition rejects unknown keys and wrong types),
and `load.py` turns a composed config back into these objects.

A field whose config key differs from its Python name (``batch.global`` — ``global`` is a
Python keyword) says so with ``metadata={"key": ...}``. A string field with a closed set of
values lists them in ``metadata={"choices": ...}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass(kw_only=True, frozen=True)
class ModelConfig:
    name: str = "tiny_gpt"
    """Recipe name, recorded with every trial."""
    arch: str = field(default="gpt", metadata={"choices": ("gpt", "mlp")})
    """`gpt`: decoder-only transformer. `mlp`: per-token MLP stack (no attention)."""
    vocab_size: int = 256
    """Token vocabulary size."""
    seq_len: int = 64
    """Tokens per sample (T)."""
    d_model: int = 128
    """Hidden width."""
    n_layers: int = 2
    """Transformer blocks (gpt) or hidden MLP layers (mlp)."""
    n_heads: int = 4
    """Attention heads (gpt only); d_model must be divisible by it."""
    ffn_mult: int = 4
    """Feed-forward width as a multiple of d_model."""


# Interconnect presets (launcher/perfmodel.py LINKS holds their bandwidth and latency).
LINK_NAMES = ("nvlink", "pcie", "ib400", "ib200", "eth100", "eth10")
POLICIES = ("max_efficient", "min_cost", "fastest_within_budget")

LAYOUTS = ("ddp", "fsdp", "pipeline", "tp", "dp_pp", "fsdp_tp", "fsdp_pp")


@dataclass(kw_only=True, frozen=True)
class ParallelConfig:
    layout: str = field(default="ddp", metadata={"choices": LAYOUTS})
    """How ranks split the work; dp × tp × pp = world size. ddp/fsdp: all data parallel;
    pipeline: all pipeline stages; tp: all tensor parallel; dp_pp, fsdp_tp, fsdp_pp: 2-D."""
    tp: Optional[int] = None
    """Tensor-parallel degree for fsdp_tp (tp layout: the world size)."""
    pp: Optional[int] = None
    """Pipeline degree (ranks holding stages) for dp_pp and fsdp_pp (pipeline layout: the world size)."""
    schedule: str = field(default="1f1b", metadata={"choices": ("gpipe", "1f1b", "interleaved_1f1b")})
    """Pipeline schedule."""
    microbatches: int = 4
    """Pipeline microbatches per micro-step (m); batch.micro must be divisible by it."""
    virtual_stages: int = 2
    """Stages per pipeline rank for interleaved_1f1b (v)."""
    reshard_after_forward: bool = True
    """FSDP: free gathered parameters after forward (≈ ZeRO-3); false keeps them (≈ ZeRO-2)."""
    backend: str = field(default="auto", metadata={"choices": ("auto", "gloo", "nccl")})
    """Process-group backend; `auto` picks NCCL on CUDA, gloo on CPU."""


@dataclass(kw_only=True, frozen=True)
class BatchConfig:
    micro: int = 8
    """Samples per rank per forward/backward (micro-batch)."""
    accum: int = 1
    """Micro-steps per optimizer step (gradient accumulation)."""
    global_batch: Optional[int] = field(default=None, metadata={"key": "global"})
    """Optional global batch (config key `batch.global`); fixing it makes a sweep strong-scaling.
    Per trial, accum left at 1 is derived as global ÷ (micro × dp); any other accum must agree."""


@dataclass(kw_only=True, frozen=True)
class OptimConfig:
    name: str = field(default="adamw", metadata={"choices": ("adamw", "sgd")})
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
    lr_scaling: str = field(default="none", metadata={"choices": ("none", "linear", "sqrt")})
    """How lr follows the global batch: none, linear (lr·G/G₀) or sqrt (lr·√(G/G₀))."""
    base_global_batch: int = 8
    """G₀: the global batch at which `lr` was tuned."""


@dataclass(kw_only=True, frozen=True)
class DataConfig:
    kind: str = field(default="synthetic", metadata={"choices": ("synthetic", "file")})
    """`synthetic`: seeded learnable token sequences. `file`: a flat binary token file."""
    path: Optional[str] = None
    """Token file for kind=file (little-endian integers of `dtype`)."""
    dtype: str = field(default="uint16", metadata={"choices": ("uint16", "int32", "int64")})
    """Element type of the token file."""


@dataclass(kw_only=True, frozen=True)
class ClusterConfig:
    name: str = "local"
    """Cluster preset name, recorded with every trial."""
    kind: str = field(default="local", metadata={"choices": ("local", "slurm")})
    """Executor: `local` runs a trial's ranks as processes here; `slurm` submits sbatch jobs."""
    device: str = field(default="auto", metadata={"choices": ("auto", "cpu", "cuda")})
    """Device per rank; `auto` is CUDA when available, else CPU."""
    device_name: str = "cpu"
    """Human name of the device (recorded; e.g. A100-80GB)."""
    peak_flops_per_device: Optional[float] = None
    """Peak FLOP/s of one device at the training precision. Unknown (null) → MFU is null."""
    usd_per_device_hour: Optional[float] = None
    """Price of one device-hour (one GPU-hour on GPU clusters); null → $ columns are null
    (device-hours per 1M tokens are always shown)."""
    spot_discount: float = 0.0
    """Fraction off the device-hour price for spot/preemptible capacity, in [0, 1): $ uses price × (1 − d)."""
    intra_link: str = field(default="nvlink", metadata={"choices": LINK_NAMES})
    """Link between devices of one node, for `launcher plan` when nothing measured says otherwise."""
    inter_link: str = field(default="ib400", metadata={"choices": LINK_NAMES})
    """Link between nodes (per device), for `launcher plan` when nothing measured says otherwise."""
    threads_per_rank: int = 1
    """CPU threads per rank (torch.set_num_threads, OMP_NUM_THREADS)."""
    trial_timeout_s: float = 600.0
    """local: a trial still running after this many seconds is killed and recorded as failed."""
    pg_timeout_s: float = 120.0
    """torch.distributed collective timeout: a rank stuck on a dead peer gives up after this."""
    # --- slurm only ---------------------------------------------------------------------
    partition: Optional[str] = None
    """`--partition`; null → the cluster's default partition."""
    account: Optional[str] = None
    """`--account` to charge."""
    qos: Optional[str] = None
    """`--qos`."""
    time_limit: str = "00:30:00"
    """`--time` per job ([D-]HH:MM:SS or minutes)."""
    nodes: int = 1
    """Nodes of a single `launcher run`."""
    gpus_per_node: int = 0
    """GPUs per node; > 0 adds `--gres=gpu:N` and one rank per GPU."""
    tasks_per_node: Optional[int] = None
    """Ranks per node; null → gpus_per_node, or 1 without GPUs."""
    cpus_per_task: int = 1
    """`--cpus-per-task` for each rank."""
    mem: Optional[str] = None
    """`--mem` per node, e.g. 64G; null → the partition's default."""
    constraint: Optional[str] = None
    """`--constraint` (node features), e.g. a100&ib."""
    exclusive: bool = False
    """`--exclusive`: no other job shares the nodes (clean measurements)."""
    sbatch_extra: List[str] = field(default_factory=list)
    """Extra `#SBATCH` options, one per item, e.g. ["--mail-type=END"]."""
    setup: List[str] = field(default_factory=list)
    """Shell lines run before training (module load, venv activation): the user's own code, verbatim."""
    env: List[str] = field(default_factory=list)
    """Environment variables for every rank, `NAME=value` each (quoted in the script, so values
    stay data). Not for secrets: the script is a file; let secrets reach jobs through the
    environment sbatch inherits from your shell."""
    launch: str = field(default="srun", metadata={"choices": ("srun", "torchrun")})
    """`srun`: one task per rank. `torchrun`: one task per node, torchrun spawns the ranks (c10d rendezvous)."""
    python: Optional[str] = None
    """Python that runs the payload on the nodes; null → the launcher's own interpreter."""
    signal_warning_s: int = 120
    """Seconds before the time limit at which Slurm sends USR1 (`--signal`)."""
    slurm_conf: Optional[str] = None
    """SLURM_CONF for the Slurm client commands (the dev cluster's); null → Slurm's own default."""
    serialize_trials: bool = False
    """Run a sweep's jobs one at a time (`--dependency=singleton`): needed where nodes share cores."""


@dataclass(kw_only=True, frozen=True)
class SweepConfig:
    world_sizes: List[int] = field(default_factory=lambda: [1, 2])
    """World sizes (ranks) to measure; each becomes one trial (local; slurm when `nodes` is null)."""
    nodes: Optional[List[int]] = None
    """slurm: node counts to measure; world size = nodes × ranks per node. Overrides world_sizes."""
    repeats: int = 1
    """Trials per size (a Slurm job array); the table judges each size by its median throughput."""
    pack: bool = False
    """slurm: one allocation of the largest size; every trial runs inside it as a job step."""
    steps: int = 30
    """Optimizer steps per trial, warm-up included."""
    warmup_steps: int = 5
    """Leading steps excluded from throughput."""
    threshold: float = 0.8
    """Scaling efficiency a size must keep (max_efficient policy; adaptive search stops below it)."""
    search: str = field(default="grid", metadata={"choices": ("grid", "adaptive")})
    """`grid`: measure every size. `adaptive`: start at the smallest, double while efficiency holds,
    stop when it falls below the threshold (or the calibrated model says the next size cannot meet
    it), then refine between the last good and the first bad size."""
    policy: str = field(default="max_efficient", metadata={"choices": POLICIES})
    """How to pick the size: `max_efficient` (largest with efficiency ≥ threshold), `min_cost`
    (lowest cost per token), `fastest_within_budget` (highest throughput whose cost of
    `token_budget` tokens fits budget_device_hours and/or budget_usd)."""
    token_budget: Optional[float] = None
    """Tokens the real run will train on; adds hours and $ to that budget per size."""
    budget_device_hours: Optional[float] = None
    """fastest_within_budget: device-hours (GPU-hours) the run may spend on token_budget tokens."""
    budget_usd: Optional[float] = None
    """fastest_within_budget: dollars the run may spend on token_budget tokens."""
    results_dir: str = "results"
    """Folder that receives `<sweep-id>/`."""
    name: Optional[str] = None
    """Sweep id; default is `<timestamp>-<model>-<layout>`."""


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
    seed: int = 0
    """Seed for weights and synthetic data."""
    precision: str = field(default="fp32", metadata={"choices": ("fp32", "bf16", "fp16")})
    """Training precision: fp32, or autocast (FSDP: MixedPrecisionPolicy) to bf16/fp16."""
