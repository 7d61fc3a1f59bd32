"""Typed configs: keyword-only dataclasses, one docstring per field.

These classes are the single source of the config's shape. `OmegaConf.structured` turns them into the schema Hydra
composes recipes onto (`load.schema`, registered by `compose.py`), so composition rejects unknown keys, wrong types and
values outside a choice; `OmegaConf.to_object` turns a composed config back into these objects. Every config key is
its field's name.

A field with a closed set of values is typed by a `StrEnum` of launcher/config/choices.py (imported
here, so `from launcher.config.schema import Layout` keeps working).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.config.choices import (
    Arch,
    Backend,
    Checkpointing,
    ClusterKind,
    DataKind,
    DeviceKind,
    InputDtype,
    Launch,
    Layout,
    Link,
    LrScaling,
    OptimName,
    PolicyName,
    Precision,
    Schedule,
    Search,
    TokenDtype,
)
from launcher.config.job import JobConfig


@dataclass(kw_only=True, frozen=True)
class InputSpec:
    """One tensor of a `_target_` model's synthetic batch (an input, the loss's target); load.py reads it (not an
    OmegaConf node: a frozen dataclass's lists inside a Dict refuse merging)."""

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
    """Query attention heads (gpt, llama); d_model must be divisible by it."""
    ffn_mult: int = 4
    """Feed-forward width as a multiple of d_model, where `ffn_hidden` is null."""
    ffn_hidden: int | None = None
    """Feed-forward hidden width, explicitly (Llama 3 8B: 14336); null → ffn_mult × d_model. For llama it is the
    width of each of SwiGLU's gate and up projections."""
    n_kv_heads: int | None = None
    """Key/value heads (llama: grouped-query attention; n_heads must be a multiple); null → n_heads (multi-head
    attention). gpt always uses n_heads."""
    rope_theta: float = 10000.0
    """llama: RoPE base frequency (Llama 3: 500000)."""
    norm_eps: float = 1e-5
    """llama: RMSNorm epsilon."""
    activation_checkpointing: Checkpointing = Checkpointing.none
    """Recompute activations in backward instead of keeping them (torch.utils.checkpoint, non-reentrant): `none` keeps
    everything; `selective` is Megatron's selective recompute (Korthikanti et al. 2022): only each block's attention
    core (scaled_dot_product_attention: scores, causal softmax, weighted values) is recomputed in backward, the
    projections, norms and feed-forward keep their activations; `full` keeps only each block's input and recomputes the
    whole block's forward in backward. gpt and llama, every layout; `mlp` has no attention, so `selective` changes
    nothing there. Losses and parameters are unchanged (the same arithmetic, done twice); step time grows by the
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


@dataclass(kw_only=True, frozen=True)
class ParallelConfig:
    layout: Layout = Layout.ddp
    """How ranks split the work (dp × tp × pp = world size), a row of launcher/layouts.py: ddp, fsdp: all dp;
    pipeline: all pipeline stages; tp: all tensor parallel; dp_pp, fsdp_tp, fsdp_pp: 2-D; fsdp_tp_pp: 3-D."""
    tp: int | None = None
    """Tensor-parallel degree for fsdp_tp and fsdp_tp_pp (tp layout: the world size)."""
    pp: int | None = None
    """Pipeline degree (ranks holding stages) for dp_pp, fsdp_pp, fsdp_tp_pp (pipeline layout: world size)."""
    schedule: Schedule = Schedule["1f1b"]
    """Pipeline schedule."""
    microbatches: int = 4
    """Pipeline microbatches per micro-step (m); batch.micro must be divisible by it."""
    virtual_stages: int = 2
    """Stages per pipeline rank for interleaved_1f1b (v)."""
    reshard_after_forward: bool = True
    """FSDP: free gathered parameters after forward (≈ ZeRO-3); false keeps them (≈ ZeRO-2)."""
    fsdp_sync_each_microstep: bool = False
    """fsdp, fsdp_tp accumulating: reduce-scatter each micro-step, not only the last (accum× traffic, less memory)."""
    backend: Backend = Backend.auto
    """Process-group backend; `auto` picks NCCL on CUDA, gloo on CPU."""
    fsdp_units: list[str] = field(default_factory=list)
    """`_target_` models under fsdp: class names whose instances each become one FSDP unit (e.g. [Block,
    Bottleneck]); empty: the size policy (fsdp_min_params). The root holds the rest; built-ins shard each block."""
    fsdp_min_params: int = 1_000_000
    """`_target_` models under fsdp with no fsdp_units: bottom-up, every module whose parameters
    not already in a unit below it number at least this becomes a unit (FSDP1's size policy)."""
    tp_plan: dict[str, str] = field(default_factory=dict)
    """`_target_` models, layout tp: module name (fnmatch patterns) → colwise or rowwise (torch's
    parallelize_module), e.g. {blocks.*.fc1: colwise, blocks.*.fc2: rowwise}; engines/byo_tp.py."""
    pp_split: list[str] = field(default_factory=list)
    """`_target_` models, layouts pipeline and dp_pp: module names where a pipeline stage begins,
    e.g. [blocks.2] (2 stages: len + 1 = pp), traced by torch's pipelining; engines/byo_pipeline.py."""


@dataclass(kw_only=True, frozen=True)
class BatchConfig:
    micro: int = 8
    """Samples per rank per forward/backward (micro-batch)."""
    accum: int = 1
    """Micro-steps per optimizer step (gradient accumulation)."""
    global_batch: int | None = None
    """Optional global batch; fixing it makes a sweep strong-scaling. Per trial, accum left at 1 is derived as
    global_batch ÷ (micro × dp); any other accum must agree. (Was `batch.global`.)"""


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
class ClusterConfig:
    name: str = "local"
    """Cluster preset name, recorded with every trial."""
    kind: ClusterKind = ClusterKind.local
    """Executor: `local` runs a trial's ranks as processes here; `slurm` submits sbatch jobs."""
    device: DeviceKind = DeviceKind.auto
    """Device per rank; `auto` is CUDA when available, else CPU."""
    device_name: str = "cpu"
    """Name of the device, recorded, and the row of the peak table (launcher/compute/peaks.py) MFU uses, matched
    case-insensitively: "A100-SXM4-80GB", "NVIDIA H100 80GB HBM3" (torch.cuda.get_device_name's), "MI300X". On CUDA
    the GPU torch reports wins, over an unknown name ("cpu") silently, over one of other peaks (peak_flops_per_device
    too) with a line under the table; on CPU no row applies. `launcher plan` runs nothing: it uses this name."""
    peak_flops_per_device: float | None = None
    """Dense peak FLOP/s of one device at the precision its matmuls run in (bf16/fp16, or tf32 for fp32 on CUDA),
    overriding the table. null → the table's peak for the device; a device the table does not know (every CPU) → MFU
    is null. An explicit peak that does not fit the precision on a known device (H100's bf16 9.89e14 for fp32) is
    flagged in the report."""
    usd_per_device_hour: float | None = None
    """Price of one device-hour (one GPU-hour on GPU clusters); null → $ columns are null
    (device-hours per 1M tokens are always shown)."""
    spot_discount: float = 0.0
    """Fraction off the device-hour price for spot/preemptible capacity, in [0, 1): $ uses price × (1 − d)."""
    intra_link: Link = Link.nvlink
    """Link between devices of one node, for `launcher plan` when nothing measured says otherwise."""
    inter_link: Link = Link.ib400
    """Network link between nodes, one NIC's rate, for `launcher plan` when nothing measured says otherwise."""
    nics_per_node: int | None = None
    """Network interfaces (rails) per node carrying inter-node traffic at `inter_link` each: 8 on
    DGX/HGX-class nodes (one NIC per GPU). null → 1: the node's traffic shares one NIC."""
    threads_per_rank: int = 1
    """CPU threads per rank (torch.set_num_threads, OMP_NUM_THREADS); on Slurm at most cpus_per_task."""
    trial_timeout_s: float = 600.0
    """local: a trial still running after this many seconds is killed and recorded as failed."""
    pg_timeout_s: float = 1800.0
    """Collective timeout of every process group (world, mesh dims): a rank stuck on a dead peer gives up
    after it. 1800 s (gloo's default) outlasts a peer's first-step compile or checkpoint save of a big model."""
    device_memory_gb: float | None = None
    """Memory of one GPU in GiB (e.g. 80 for an 80 GB A100/H100); null: the peak table's for device_name
    (compute/peaks.py), unchecked for a device it lacks. Each trial's per-rank memory is estimated first
    (perf/memory.py): one that cannot fit is a predicted `oom`, not launched (plan: `oom (predicted)`)."""
    host_memory_gb: float | None = None
    """Memory of one host (node) in GiB, shared by the CPU ranks on it, for the same check on CPU trials. Null: this
    machine's MemTotal for cluster.kind=local; on Slurm, cluster.mem when set, else no check."""
    partition: str | None = None
    """`--partition`; null → the cluster's default partition."""
    account: str | None = None
    """`--account` to charge."""
    qos: str | None = None
    """`--qos`."""
    time_limit: str = "00:30:00"
    """`--time` per job ([D-]HH:MM:SS or minutes)."""
    nodes: int = 1
    """Nodes of a single `launcher run`."""
    gpus_per_node: int = 0
    """GPUs per node; > 0 adds `--gres=gpu:N` and one rank per GPU: each rank uses the GPU at its
    local rank among those it sees (CUDA_VISIBLE_DEVICES), never one another rank uses."""
    gpus_per_task: int | None = None
    """srun launch: `--gpus-per-task=N` (job and step) in place of `--gres=gpu:gpus_per_node`: Slurm binds each
    rank its own N GPUs, and each rank sees only those (its first is its device)."""
    gpu_bind: str | None = None
    """srun launch: `--gpu-bind=` (job and step): `single:1`, `closest`, `map_gpu:0,1`, … so each rank sees one GPU."""
    tasks_per_node: int | None = None
    """Ranks per node; null → gpus_per_node, or 1 without GPUs."""
    cpus_per_task: int = 1
    """CPUs for each rank: `--cpus-per-task` of the job and of its srun step (torchrun launch: the
    one task per node gets ranks per node × this). Slurm: at least threads_per_rank."""
    mem: str | None = None
    """`--mem` per node, e.g. 64G; null → the partition's default."""
    constraint: str | None = None
    """`--constraint` (node features), e.g. a100&ib."""
    exclusive: bool = False
    """`--exclusive`: no other job shares the nodes (clean measurements)."""
    sbatch_extra: list[str] = field(default_factory=list)
    """Extra `#SBATCH` options, one per item, e.g. ["--mail-type=END"]."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run before training (module load, venv activation): the user's own code, verbatim."""
    env: list[str] = field(default_factory=list)
    """Environment variables for every rank, `NAME=value` each, exported after the setup lines.
    Values are quoted in the script, so they stay data, except `${NAME}`, which expands when the job
    runs (unset → empty): `PATH=/opt/x/bin:${PATH}` (in YAML or an override, write `\\${PATH}`:
    OmegaConf would resolve `${...}` itself). Not for secrets: the script is a file; let secrets
    reach jobs through the environment sbatch inherits from your shell."""
    launch: Launch = Launch.srun
    """`srun`: one task per rank. `torchrun`: one task per node, torchrun spawns the ranks (c10d rendezvous)."""
    python: str | None = None
    """Python that runs the payload (and torchrun's module) on the nodes; null → `python` from the
    job's PATH when there are setup lines (what `module load` or an activation put there), else the
    launcher's own interpreter (nodes that share this filesystem and its venv)."""
    container_image: str | None = None
    """pyxis/enroot image each payload srun runs in (`--container-image`), e.g. `nvcr.io#nvidia/pytorch:24.05-py3`
    or a .sqsh path; it must hold torch and the launcher (cluster.python names its interpreter). Null: none."""
    container_mounts: list[str] = field(default_factory=list)
    """`src:dst[:flags]` bind mounts (`--container-mounts`); the results folder must be one: ranks write there."""
    signal_warning_s: int = 120
    """Seconds before the time limit at which Slurm sends USR1 (`--signal`)."""
    slurm_conf: str | None = None
    """SLURM_CONF for the Slurm client commands (the dev cluster's); null → Slurm's own default."""
    serialize_trials: bool = False
    """Run a sweep's jobs one at a time (`--dependency=singleton`): needed where nodes share cores."""


@dataclass(kw_only=True, frozen=True)
class SweepConfig:
    world_sizes: list[int] = field(default_factory=lambda: [1, 2])
    """World sizes (ranks) to measure; each becomes one trial (local; slurm when `nodes` is null)."""
    nodes: list[int] | None = None
    """slurm: node counts to measure; world size = nodes × ranks per node. Overrides world_sizes."""
    repeats: Any = 1
    """Trials per size: an integer ≥ 1, or `auto` (repeat each size until target_ci is met, at least 3 and at most
    max_repeats times). Sizes run interleaved, one repeat of each per round (1,2,4,1,2,4,…), so drift over the sweep
    hits every size alike; the table judges each size by its median, with a 90% bootstrap interval. Typed Any, not int,
    so that `auto` fits; validate.py holds the rule."""
    target_ci: float = 0.05
    """repeats=auto: repeat a size until its tokens/s interval's half-width is at most this
    fraction of its median (0.05: ±5%)."""
    max_repeats: int = 5
    """repeats=auto: the most trials of one size (at least 3, the rounds auto starts with)."""
    pack: bool = False
    """slurm: one allocation of the largest size; every trial runs inside it as a job step."""
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
    seed: int = 0
    """Seed for weights and synthetic data."""
    precision: Precision = Precision.auto
    """Training precision: fp32, or autocast (FSDP: MixedPrecisionPolicy) to bf16/fp16. `auto`:
    bf16 on CUDA, fp32 on CPU (no native bf16 there: ~10× slower), resolved by the payload per
    device and recorded as `metrics.precision`. fp32 on CUDA runs matmuls and convolutions in TF32."""
