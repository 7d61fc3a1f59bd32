"""One way to turn a layout's numbers into the model's Shape, whether they come from a measured
trial (`calibrate.shape_at`) or from a config nothing ran yet (`plan`)."""

from __future__ import annotations

import math

from launcher.config.derived import BatchMath
from launcher.model.step import Shape
from launcher.trials.layout import comm_factor

DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""torch DDP's first gradient bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES): small, so
the first all-reduce starts early in backward."""
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""torch DDP's other buckets (bucket_cap_mb=25, the engines' default)."""
DDP_LAYOUTS = ("ddp", "dp_pp")
"""Layouts whose gradients go through torch DDP (launcher/train/engines)."""


def ddp_buckets(grad_bytes: int) -> int:
    """All-reduces DDP issues per step for `grad_bytes` of gradients: the 1 MiB first bucket, then
    25 MiB ones (a bucket closes once it reaches its cap, so this is the count to within one)."""
    return 1 + math.ceil(max(0, grad_bytes - DDP_FIRST_BUCKET_BYTES) / DDP_BUCKET_BYTES)


def build_shape(
    *,
    world_size: int,
    ranks_per_node: int,
    tp: int,
    pp: int,
    batch: BatchMath,
    grad_bytes: int,
    bubble: float,
    layout: str,
    reshard_after_forward: bool,
    contention: float = 1.0,
) -> Shape:
    """The Shape of `layout` at `world_size` ranks, `ranks_per_node` to a node, split dp × tp × pp
    with dp = batch.dp; `grad_bytes` is one rank's data-parallel all-reduce per step."""
    if batch.dp * tp * pp != world_size:
        raise ValueError(
            f"shape: dp({batch.dp}) × tp({tp}) × pp({pp}) = {batch.dp * tp * pp} ≠ world_size {world_size}"
        )
    return Shape(
        world_size=world_size,
        ranks_per_node=ranks_per_node,
        dp=batch.dp,
        global_batch=batch.global_batch,
        accum=batch.accum,
        grad_bytes=grad_bytes,
        bubble=bubble,
        contention=contention,
        comm_factor=comm_factor(layout, reshard_after_forward),
        messages=ddp_buckets(grad_bytes) if layout in DDP_LAYOUTS and grad_bytes else 1,
    )
