"""One way to turn a layout's numbers into the model's Shape, whether they come from a measured
trial (`calibrate.shape_at`) or from a config nothing ran yet (`shape_for`, what `plan` predicts):
the traffic every layout puts on the wire (bytes at their dtype, how often), the topology, the
recompute. Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.compute.flops import (
    CAUSAL_EXECUTED_SHARE,
    ModelParts,
    attention_forward_flops_per_token,
    executed_flops_per_token,
    flops_per_token,
    kv_heads,
    model_parts,
    moe_layers,
    recompute_flops_per_token,
    routed_expert_params,
    stage_params,
)
from launcher.compute.peaks import resolve_precision
from launcher.config.derived import BatchMath, batch_math, head_dim, nvlink_domain, pipeline_batch, ranks_per_node
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.layouts import DataParallel, Degree, traits
from launcher.perf.comm import Leaf, Traffic, ddp_buckets
from launcher.perf.step import Shape
from launcher.perf.stragglers import site_jitter
from launcher.trials.layout import expert_degree, pipeline_bubble, trial_degrees, virtual_stages

__all__ = ["LayoutSpec", "ddp_buckets", "layout_shape", "planned_device", "rank_numel", "shape_for"]

WIRE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
"""Bytes per element of activations (autocast) and FSDP's gathered parameters, per precision."""
BLOCK_GATHER_BYTES = WIRE_BYTES | {"fp8": 1}
"""…of FSDP's all-gathered block parameters: fp8 gathers its float8 linear layers' weights in fp8
(train/float8.py, enable_fsdp_float8_all_gather), half a bf16 gather's bytes; the root unit (embeddings,
head, final norm) stays bf16, and so do the blocks' norms, counted as fp8 here (≤ 0.1% of a block)."""
REDUCE_BYTES = 4
"""Gradients cross the dp group in fp32: DDP's parameters stay fp32 under autocast (so are their
gradients), FSDP reduces at reduce_dtype=float32 (engines/fsdp.py)."""
TP_PER_BLOCK = {"gpt": 8, "llama": 8, "mlp": 4}
"""Tensor-parallel collectives per block and pass (engines/tp.py, sequence parallel): an
all-gather before and a reduce-scatter after attention and after the feed-forward in forward
(the mlp model has no attention), the same again in backward (each one's transpose)."""
TP_OUTSIDE_BLOCKS = 4
"""…and outside them: the embeddings' reduce-scatter and the head's all-gather, each with its
transpose in backward."""


@dataclass(kw_only=True, frozen=True)
class LayoutSpec:
    """What of a recipe its traffic depends on, beyond the degrees and the batch."""

    layout: str
    """parallel.layout."""
    model: ModelConfig
    """The model trained."""
    precision: str
    """Resolved precision (fp32, bf16, fp16, fp8): what activations and FSDP's gathers move."""
    reshard_after_forward: bool = True
    """parallel.reshard_after_forward (FSDP)."""
    sync_each_microstep: bool = False
    """parallel.fsdp_sync_each_microstep (FSDP without a pipeline)."""
    microbatches: int = 1
    """Pipeline microbatches per micro-step (m), under pp > 1."""
    virtual: int = 1
    """Stages per pipeline rank (v)."""
    clip: bool = False
    """optim.clip_grad_norm is on: the global norm's scalar all-reduces (Traffic.norm_groups)."""
    ep: int = 1
    """Expert-parallel degree (fsdp_ep's parallel.ep): the rank holds n_experts ÷ ep of each MoE block's
    routed experts and exchanges its tokens with the ep group by all-to-all."""
    reduce_bytes: int = REDUCE_BYTES
    """Bytes a gradient element crosses the dp group in: REDUCE_BYTES, or 2 where the trainer reduces in
    16 bits (trainer.grad_sync_16bit)."""
    tp_overlap: bool = False
    """trainer.tp_comm_overlap: tp collectives run in chunks under their matmuls (Traffic.tp_overlap)."""
    ep_copies: int = 0
    """trainer.ep_dispatch_copies: copies of a token one expert-parallel dispatch sends (0: experts_per_token)."""
    measured_numel: int | None = None
    """Elements of one rank's parameters as a trial measured them (the gradient it all-reduced);
    None: counted from the model config. A measured model (one the config does not describe, or
    does so only roughly) is taken as it ran."""


def rank_numel(parts: ModelParts, n_layers: int, tp: int, pp: int) -> tuple[float, float]:
    """(parameters on one rank of the neediest pipeline stage, of them outside the blocks), tp-
    local and before FSDP sharding: tp splits all but the norms, the first stage holds the
    embeddings, the last the head and final norm."""
    # Every stage holds as many blocks, so the neediest is the end stage with the bigger root.
    return max(stage_params(parts, n_layers, tp=tp, pp=pp, pp_rank=r) for r in (0, pp - 1))


def recompute_ratio(model: ModelConfig) -> float:
    """r: recompute FLOPs ÷ model FLOPs under model.activation_checkpointing."""
    return recompute_flops_per_token(model) / flops_per_token(model)


def traffic(spec: LayoutSpec, *, tp: int, pp: int, batch: BatchMath, cp: int = 1) -> Traffic:
    """What one rank of `spec` at these degrees communicates per optimizer step."""
    m = spec.model
    numel, root = rank_numel(model_parts(m), m.n_layers, tp, pp)
    numel -= routed_expert_params(m) * (1 - 1 / spec.ep) / (tp * pp)  # the other ep ranks' experts
    if spec.measured_numel is not None:
        numel, root = spec.measured_numel, root * spec.measured_numel / numel
    mb = spec.microbatches if pp > 1 else 1
    wire = WIRE_BYTES[spec.precision]
    # Under cp a rank's activations (what tp gathers, what a stage sends) hold its 1/cp of the sequence.
    activation = batch.micro // mb * m.seq_len // cp * m.d_model * wire
    blocks = m.n_layers // pp
    row = traits(spec.layout)
    dp_kind, params, param_root = row.data_parallel, 0, None
    if dp_kind == DataParallel.fsdp:
        # Every FSDP layout, pipeline stages included, gathers parameters in the run's precision
        # (MixedPrecisionPolicy, engines/fsdp.py and pipeline.py).
        params = round((numel - root) * BLOCK_GATHER_BYTES[spec.precision] + root * wire)
        if BLOCK_GATHER_BYTES[spec.precision] != wire:
            param_root = root * wire / params
    tp_count = 0
    if tp > 1:
        # Full checkpointing replays each block's forward, its collectives (half the block's) with it;
        # selective recomputes only the attention core, which has none; op (another trainer's per-op
        # policy) replays only the all-reduce of the matmuls it recomputes, left out here.
        per_block = TP_PER_BLOCK[m.arch] * (3 if m.activation_checkpointing == "full" else 2) // 2
        tp_count = blocks * per_block + TP_OUTSIDE_BLOCKS
    return Traffic(
        data_parallel=dp_kind,
        grad_bytes=round(numel) * spec.reduce_bytes if dp_kind != DataParallel.none else 0,
        param_bytes=params,
        root_share=root / numel,
        param_root_share=param_root,
        blocks=max(1, blocks),
        reshard=spec.reshard_after_forward,
        gathered_once=dp_kind == DataParallel.fsdp and pp > 1 and not spec.reshard_after_forward,
        passes=batch.accum * mb,
        syncs=batch.accum if spec.sync_each_microstep and dp_kind == DataParallel.fsdp and pp == 1 else 1,
        tp_bytes=activation,
        tp_collectives=tp_count,
        tp_overlap=spec.tp_overlap,
        # Sequence-parallel stages hand over their sequence shard: each tp rank sends 1/tp of it.
        pp_bytes=activation // tp if pp > 1 else 0,
        pp_sends=batch.accum * 2 * (spec.virtual * mb + pp - 1) if pp > 1 else 0,
        norm_groups=norm_groups(spec, dp_kind, tp=tp, pp=pp),
        # Each token's k routed rows (a per-rank dispatcher's copies: trainer.ep_dispatch_copies) to their
        # experts' ranks and back, forward and backward (full recompute replays forward's); the experts' FSDP
        # traffic runs on the dp ÷ ep ranks holding them, modelled on the dp group (same bytes, a smaller ring).
        ep_bytes=batch.micro * m.seq_len * (spec.ep_copies or m.experts_per_token) * m.d_model * wire
        if spec.ep > 1
        else 0,
        ep_all_to_alls=batch.accum * moe_layers(m) * (6 if m.activation_checkpointing == "full" else 4)
        if spec.ep > 1
        else 0,
        **(ring_traffic(m, activation, tp=tp, blocks=blocks) if cp > 1 else {}),
    )


def ring_traffic(m: ModelConfig, activation: int, *, tp: int, blocks: int) -> dict:
    """Traffic's context-parallel fields: one exchange holds keys and values of this rank's
    sequence piece (`activation` bytes at d_model width) at their kv width, split over tp."""
    kv = activation * kv_heads(m) * head_dim(m) // m.d_model
    # Shares of the executed FLOPs, as the compute time the ring hides behind is priced (causal halves).
    share = 3 * attention_forward_flops_per_token(m) * CAUSAL_EXECUTED_SHARE / executed_flops_per_token(m)
    return {
        "cp_bytes": 2 * kv // tp,
        "cp_layers": blocks,
        "cp_recompute": m.activation_checkpointing == "full",
        "attention_share": share,
    }


def norm_groups(spec: LayoutSpec, dp_kind: DataParallel, *, tp: int, pp: int) -> tuple[str, ...]:
    """Where clipping's norm is all-reduced (train/clipping.py): over the mesh dims that shard a
    DTensor gradient (FSDP's dp, tp) and over the pipeline's stages; DDP's gradient is whole."""
    if not spec.clip:
        return ()
    return tuple(name for name, on in (("dp", dp_kind == DataParallel.fsdp), ("tp", tp > 1), ("pp", pp > 1)) if on)


def layout_shape(
    spec: LayoutSpec,
    *,
    world_size: int,
    ranks_per_node: int,
    tp: int,
    pp: int,
    batch: BatchMath,
    bubble: float,
    nics_per_node: int = 1,
    tree: bool = False,
    contention: float = 1.0,
    nvlink_domain: int = 0,
    cp: int = 1,
    shard: int = 0,
    leaf: Leaf | None = None,
    jitter: float = 0.0,
) -> Shape:
    """The Shape of `spec` at `world_size` ranks, `ranks_per_node` to a node, split dp × cp × tp
    × pp with dp = batch.dp (hsdp: FSDP inside `shard` of the dp ranks)."""
    if batch.dp * cp * tp * pp != world_size:
        raise ValueError(
            f"shape: dp({batch.dp}) × cp({cp}) × tp({tp}) × pp({pp}) = {batch.dp * cp * tp * pp} "
            f"≠ world_size {world_size}"
        )
    return Shape(
        world_size=world_size,
        ranks_per_node=ranks_per_node,
        dp=batch.dp,
        tp=tp,
        pp=pp,
        ep=spec.ep,
        cp=cp,
        shard=shard,
        global_batch=batch.global_batch,
        accum=batch.accum,
        bubble=bubble,
        contention=contention,
        recompute=recompute_ratio(spec.model),
        nics_per_node=nics_per_node,
        tree=tree,
        nvlink_domain=nvlink_domain,
        leaf=leaf or Leaf(),
        jitter=jitter,
        traffic=traffic(spec, tp=tp, pp=pp, batch=batch, cp=cp),
    )


def planned_device(cfg: LauncherConfig) -> str:
    """The device a plan sizes: GPUs unless cluster.device says cpu."""
    return "cpu" if cfg.cluster.device == "cpu" else "cuda"


def shape_for(cfg: LauncherConfig, world_size: int, *, numel: int | None = None) -> Shape:
    """The Shape of `cfg`'s recipe at `world_size` ranks, from the config alone (nothing measured):
    what `launcher plan` predicts on presets. ConfigError (one line, the numbers) when the layout or
    the batch cannot split `world_size`. `numel`: the parameters of a model the config does not
    describe (a `_target_` model, counted on its module)."""
    degrees = trial_degrees(cfg, world_size)
    dp, tp, pp = degrees.dp, degrees.tp, degrees.pp
    cfg = pipeline_batch(cfg, dp)  # a fixed global batch's pipeline micro-batches, at this size
    par, device = cfg.parallel, planned_device(cfg)
    spec = LayoutSpec(
        layout=par.layout,
        model=cfg.model,
        precision=resolve_precision(cfg.precision, device),
        reshard_after_forward=par.reshard_after_forward,
        sync_each_microstep=par.fsdp_sync_each_microstep,
        microbatches=par.microbatches,
        virtual=virtual_stages(par),
        clip=bool(cfg.optim.clip_grad_norm),
        measured_numel=numel,
        ep=expert_degree(cfg, dp),
        reduce_bytes=2 if cfg.trainer.grad_sync_16bit else REDUCE_BYTES,
        tp_overlap=cfg.trainer.tp_comm_overlap,
        ep_copies=cfg.trainer.ep_dispatch_copies,
    )
    return layout_shape(
        spec,
        world_size=world_size,
        ranks_per_node=ranks_per_node(cfg.cluster),
        tp=tp,
        pp=pp,
        batch=batch_math(cfg.batch, dp),
        bubble=pipeline_bubble(pp, par.microbatches, virtual_stages(par)) if pp > 1 else 0.0,
        nics_per_node=cfg.cluster.nics_per_node or 1,
        tree=device == "cuda",
        nvlink_domain=nvlink_domain(cfg.cluster),
        cp=degrees.cp,
        shard=degrees.shard if traits(par.layout).replicate != Degree.none else 0,
        leaf=Leaf(nodes=cfg.cluster.nodes_per_leaf or 0, oversubscription=cfg.cluster.oversubscription),
        jitter=site_jitter(cfg.cluster.step_jitter, device),
    )
