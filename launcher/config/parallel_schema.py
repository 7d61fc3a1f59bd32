"""How ranks split the work: the parallel config (part of launcher/config/schema.py's LauncherConfig)."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.config.choices import Backend, Layout, Schedule


@dataclass(kw_only=True, frozen=True)
class ParallelConfig:
    layout: Layout = Layout.ddp
    """How ranks split the work (dp × tp × pp = world size), a row of launcher/layouts.py: ddp, fsdp: all dp;
    pipeline: all pipeline stages; tp: all tensor parallel; dp_pp, fsdp_tp, fsdp_pp: 2-D; fsdp_tp_pp: 3-D;
    hsdp: fsdp on a replicate × shard mesh; fsdp_cp, fsdp_tp_cp: context parallel (dp × cp × tp = world size)."""
    tp: int | None = None
    """Tensor-parallel degree for fsdp_tp and fsdp_tp_pp (tp layout: the world size)."""
    pp: int | None = None
    """Pipeline degree (ranks holding stages) for dp_pp, fsdp_pp, fsdp_tp_pp (pipeline layout: world size)."""
    ep: int | None = None
    """Expert-parallel degree for fsdp_ep and ddp_ep: each group of ep dp ranks splits a MoE model's experts,
    n_experts ÷ ep a rank, exchanging tokens by all-to-all; borrowed from dp (ep divides dp): world = dp × tp × pp."""
    cp: int | None = None
    """Context-parallel degree for fsdp_cp and fsdp_tp_cp: ranks splitting each sequence (ring attention)."""
    shard: int = 0
    """hsdp: ranks in one FSDP shard group (all-gather, reduce-scatter); replicate = dp ÷ shard replicas
    all-reduce across them; 0: the ranks of one node (cluster.gpus_per_node; the whole world on one machine)."""
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
