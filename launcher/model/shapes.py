"""One way to turn a layout's numbers into the model's Shape, whether they come from a measured
trial (`calibrate.shape_at`) or from a config nothing ran yet (`plan`)."""

from __future__ import annotations

from launcher.config.derived import BatchMath
from launcher.model.step import Shape
from launcher.trials.layout import comm_factor


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
    )
