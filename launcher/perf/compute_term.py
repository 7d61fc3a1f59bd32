"""The presets' compute term from the recipe's operations (compute/shape_rate.py), as the MFU it
comes to: executed FLOPs per token ÷ (peak × the ops' seconds per token). The step model (step.py)
keeps its one compute parameter c; only where c comes from changes. Pure: no torch."""

from __future__ import annotations

from launcher.compute.loss_bytes import loss_kind
from launcher.compute.shape_rate import Curve, mem_bw_gbs, step_time
from launcher.config.schema import LauncherConfig
from launcher.layouts import DataParallel, traits
from launcher.perf.preset_fit import FP8_STACK, PresetFit


def tokens_per_optimizer_step(cfg: LauncherConfig) -> float | None:
    """Tokens one copy of the optimizer state steps for: a replica's (micro × accum × sequence ÷ cp)
    where every dp rank holds the whole state; under FSDP the state is sharded as the batch is, so the
    job's global batch (None when the recipe leaves it to the size: then dp shards it away)."""
    b, seq = cfg.batch, cfg.model.seq_len
    if traits(cfg.parallel.layout).data_parallel == DataParallel.fsdp:
        return b.global_batch * seq if b.global_batch else None
    return b.micro * b.accum * seq / (cfg.parallel.cp or 1)


def expert_degree(cfg: LauncherConfig) -> int:
    """The expert-parallel degree a step's routed experts run at: parallel.ep where the layout splits experts,
    else 1 (every rank holds every expert: its own tokens only reach them). The compute term is the recipe's,
    at no size: trials.layout.expert_degree checks the same ep against each size's dp."""
    return (cfg.parallel.ep or 1) if traits(cfg.parallel.layout).splits("ep") else 1


def shaped_mfu(
    cfg: LauncherConfig,
    *,
    executed_flops: float,
    peak_flops: float,
    dtype: str,
    fit: PresetFit,
    compiled: bool | None = None,
    fused_optimizer: bool = False,
):
    """(MFU the recipe's ops come to, where from), or None where no curve applies: a device without a
    bandwidth in the peak table, a precision the fits have no curve for, a `_target_` model (no op list).
    The step is priced compiled or eager as train.compile says (`compiled` overrides it: a published run's
    trainer fused its ops where the launcher's layout cannot compile), fp8 as the launcher's own stack
    (preset_fit.FP8_STACK) casts, the optimizer step as the launcher's trainer runs it (torch's default kernels)
    unless `fused_optimizer` (a published trainer's, compute/optimizer.py), the loss as cfg.trainer's kind
    (compute/loss_bytes.py)."""
    c = cfg.cluster
    found = fit.curve_for(c.device_name, "bf16" if dtype == "fp8" else dtype)
    if cfg.model._target_ is not None or mem_bw_gbs(c.device_name) is None or found is None:
        return None
    (e_max, s_half), said = found
    fp8 = fit.curve_for(c.device_name, "fp8") if dtype == "fp8" else None
    if dtype == "fp8" and fp8 is None:
        return None
    t = step_time(
        cfg.model,
        micro_batch=cfg.batch.micro,
        device=c.device_name,
        dtype=dtype,
        curve=Curve(e_max, s_half),
        fp8_curve=Curve(*fp8[0]) if fp8 else None,
        tp=cfg.parallel.tp or 1,
        cp=cfg.parallel.cp or 1,
        ep=expert_degree(cfg),
        optimizer=str(cfg.optim.name),
        tokens_per_step=tokens_per_optimizer_step(cfg),
        compiled=cfg.train.compile if compiled is None else compiled,
        fp8_stack=FP8_STACK,
        fused_optimizer=fused_optimizer,
        weight_decay=cfg.optim.weight_decay > 0,
        loss=loss_kind(cfg.trainer),
    )
    mfu = executed_flops / (peak_flops * t.total_s)
    # e_max per key; bf16's shape is XLA's measured table's, fp8's s_half fitted over every device's fp8 rows
    why = f"from the recipe's operations, matmuls at e_max {e_max:.2f} fitted on {said}, each at its shape's share"
    why += " (compute/gemm_shape: a measured H100 GEMM table)"
    if fp8:
        why += f"; fp8 matmuls e_max {fp8[0][0]:.2f} fitted on {fp8[1]}, s_half {fp8[0][1]:.0f} on every device's"
    return min(1.0, mfu), why
