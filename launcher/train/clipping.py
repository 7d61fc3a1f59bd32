"""Gradient clipping by the global L2 norm, whatever the layout cuts the model into.

The norm is the whole model's, the 1-process reference's: each rank's gradients are plain
tensors (whole, or a pipeline stage's) or DTensors (FSDP shards, tensor-parallel pieces). A
DTensor group's norm is completed over its mesh (`full_tensor`: an all-reduce of one scalar per
mesh dim that splits it), a replicated piece counted once; then the stages of a pipeline add their
squares over the pp group (one more scalar all-reduce); under expert parallel each rank's own experts
add theirs over the ep group (one more). Every rank ends with the same norm and
scales its own gradients by the same factor, as torch.nn.utils.clip_grad_norm_ does in one process.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

EPS = 1e-6
"""torch.nn.utils.clip_grad_norm_'s: the factor is max_norm / (norm + EPS), at most 1."""


def enabled(max_norm: float | None) -> bool:
    """optim.clip_grad_norm: 0 or null turn clipping off."""
    return bool(max_norm)


@dataclass(frozen=True)
class ExpertShare:
    """Under expert parallel a rank holds its own experts only: their squares add over `group`."""

    params: frozenset[int]
    """id() of this rank's expert parameters."""
    group: Any
    """The ep group: ranks holding the other experts of every MoE block."""


@torch.no_grad()
def global_grad_norm(
    params: Iterable[torch.Tensor], *, pp_group: Any = None, experts: ExpertShare | None = None
) -> torch.Tensor:
    """The L2 norm of every gradient of the model (a plain fp32 scalar on the gradients' device,
    the same on every rank). Collective over the DTensors' meshes, `pp_group` (a pipeline's
    stages; None: this rank holds the whole model, in pieces or not) and the experts' ep group
    (torchtitan's way: the expert part summed over ep, then added to the rest)."""
    params = list(params)
    if experts is not None:
        mine = [p for p in params if id(p) in experts.params]
        rest = [p for p in params if id(p) not in experts.params]
        expert_sq = _squares(mine)
        if dist.get_world_size(experts.group) > 1:
            dist.all_reduce(expert_sq, group=experts.group)  # each ep rank's experts are its own: squares add
        total = _squares(rest) + expert_sq.to(_squares(rest).device)
    else:
        total = _squares(params)
    if pp_group is not None and dist.get_world_size(pp_group) > 1:
        dist.all_reduce(total, group=pp_group)  # each stage's parameters are its own: squares add
    return total.sqrt()


def _squares(params: list[torch.Tensor]) -> torch.Tensor:
    """The sum of squares of these parameters' gradients, DTensor pieces completed over their meshes."""
    grads = [p.grad for p in params if p.grad is not None]
    by_mesh: dict[Any, list[torch.Tensor]] = defaultdict(list)
    plain: list[torch.Tensor] = []
    for g in grads:
        (by_mesh[g.device_mesh] if isinstance(g, DTensor) else plain).append(g)
    # A foreach norm takes no mix of DTensors and tensors, nor of meshes: one norm per kind.
    squares = []
    if plain:
        squares.append(torch.nn.utils.get_total_norm(plain).float().square())
    for group in by_mesh.values():
        squares.append(torch.nn.utils.get_total_norm(group).full_tensor().float().square())
    device = grads[0].device if grads else torch.device("cpu")
    return torch.stack(squares).sum() if squares else torch.zeros((), device=device)


@torch.no_grad()
def clip_grad_norm(
    params: Iterable[torch.Tensor], max_norm: float, *, pp_group: Any = None, experts: ExpertShare | None = None
) -> torch.Tensor:
    """Scale every gradient by min(1, max_norm / (norm + EPS)), norm the global one
    (global_grad_norm); returns that norm, before clipping. No wait for the device: the factor is
    applied as a tensor."""
    params = list(params)
    norm = global_grad_norm(params, pp_group=pp_group, experts=experts)
    factor = torch.clamp(max_norm / (norm + EPS), max=1.0)
    locals_: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
    for p in params:
        if p.grad is not None:
            g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad  # this rank's piece, in place
            locals_[(g.device, g.dtype)].append(g)
    for (device, dtype), group in locals_.items():
        torch._foreach_mul_(group, factor.to(device=device, dtype=dtype))
    return norm


def metrics(norms: list[torch.Tensor], max_norm: float | None) -> dict[str, Any]:
    """The record's clipping figures: each step's global gradient norm before clipping (the same
    on every rank) and how many steps it exceeded optim.clip_grad_norm; {} without clipping."""
    if not norms:
        return {}
    values = torch.stack(norms).cpu().tolist()
    return {"grad_norms": values, "clipped_steps": sum(v > max_norm for v in values)}
