"""Materialising a meta-device model: every parameter's initial value drawn from (seed, its name),
so that every layout, whatever piece of the model a rank holds, starts where the 1-process
reference starts."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from launcher.train.models.llama import RMSNorm


def materialise(
    module: nn.Module, device: torch.device, *, seed: int, fallback: Callable[[str], torch.Tensor] | None = None
) -> nn.Module:
    """Allocate a meta-device module (already cut up, sharded or parallelised: only this rank's
    part is allocated) on `device` and initialise every parameter from (seed, its name).

    Each parameter's full value is drawn from its own CPU generator seeded by (seed, name) and
    moved to `device`, then this rank keeps its piece (a DTensor's local shard), so every layout starts
    from the same parameters as the 1-process reference: names are the reference TokenModel's
    (stages and FSDP/TP keep them). A module with no meta parameters is returned as it is.
    Buffers (BatchNorm's running statistics) likewise. `fallback(full name)` gives the full value
    of a tensor whose module type has no rule here (a `_target_` model's: byo.ReferenceValues);
    without one such a tensor is an error."""
    params = list(module.parameters())
    on_meta = [p.is_meta for p in params]
    if not any(on_meta):
        return module
    if not all(on_meta):
        raise ValueError(
            f"materialise: {on_meta.count(False)} of {len(params)} parameters are already allocated; "
            "expected a module wholly on the meta device"
        )
    module.to_empty(device=device)
    with torch.no_grad():
        for prefix, owner in module.named_modules():
            tensors = [*owner.named_parameters(recurse=False), *owner.named_buffers(recurse=False)]
            for name, p in tensors:
                full_name = f"{prefix}.{name}" if prefix else name
                try:
                    value = initial_value(owner, name, tuple(p.shape), device, param_seed(seed, full_name))
                except TypeError:
                    if fallback is None:
                        raise
                    value = fallback(full_name).to(device=device, dtype=p.dtype)
                _assign(p, value.to(p.dtype))
    return module


def param_seed(seed: int, name: str) -> int:
    """The generator seed of parameter `name` (e.g. `blocks.3.attn.q.weight`) under `seed`."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63)


def initial_value(owner: nn.Module, name: str, shape: tuple[int, ...], device: torch.device, seed: int) -> torch.Tensor:
    """The full initial value of `owner.<name>`, distributed as torch's defaults: Linear
    U(±1/√fan_in) (kaiming_uniform with a=√5, and its bias), Embedding N(0, 1), LayerNorm 1 and 0,
    RMSNorm 1; Conv likewise U(±1/√fan_in); BatchNorm and GroupNorm weight 1, bias 0, running mean
    0, running variance 1, batches tracked 0. TypeError for anything else."""
    # Drawn on the CPU whatever the device: a CUDA generator gives other numbers for the same seed,
    # and a GPU run must start where the CPU reference (and every parity test) starts.
    value = torch.empty(shape)
    g = torch.Generator().manual_seed(seed)
    if isinstance(owner, nn.Linear):
        bound = 1 / math.sqrt(owner.in_features)
        return value.uniform_(-bound, bound, generator=g).to(device)
    if isinstance(owner, nn.Embedding):
        return value.normal_(0.0, 1.0, generator=g).to(device)
    if isinstance(owner, nn.LayerNorm):
        return value.fill_(1.0 if name == "weight" else 0.0).to(device)
    if isinstance(owner, (RMSNorm, nn.RMSNorm)):
        return value.fill_(1.0).to(device)
    if isinstance(owner, nn.modules.conv._ConvNd) and name in ("weight", "bias"):
        bound = 1 / math.sqrt(math.prod(owner.weight.shape[1:]))  # in_channels/groups × kernel: kaiming_uniform(√5)
        return value.uniform_(-bound, bound, generator=g).to(device)
    if isinstance(owner, (nn.modules.batchnorm._NormBase, nn.GroupNorm)):
        ones = name in ("weight", "running_var")  # bias, running_mean, num_batches_tracked: 0
        return value.fill_(1.0 if ones else 0.0).to(device)
    raise TypeError(f"materialise: no initialisation for {type(owner).__name__}.{name}")


def _assign(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy `full` into `param`, or this rank's piece of it into a DTensor (no communication:
    every rank drew the same full value)."""
    if isinstance(param, DTensor):
        piece = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local()
        param.to_local().copy_(piece)
    else:
        param.copy_(full)
