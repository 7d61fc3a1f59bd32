"""Materialising a meta-device model: every parameter's initial value drawn from (seed, its name),
so that every layout, whatever piece of the model a rank holds, starts where the 1-process
reference starts, and each rank draws only its piece: start-up follows the shard, not the model.

Values come in tiles: a parameter of at most TILE elements is drawn whole from one generator
seeded by (seed, name) (as torch would fill it); a bigger one, viewed as [dim 0, the rest], is cut
into tiles of TILE_COLS columns × TILE // TILE_COLS rows, each from its own generator seeded by
(the parameter's seed, the tile's place). A rank draws the tiles its piece overlaps and keeps its
piece, so the values of a position never depend on who draws it (parity with the reference)."""

from __future__ import annotations

import contextlib
import functools
import math
import zlib
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
from torch.distributed.tensor.placement_types import Shard, _StridedShard

from launcher.train.models.llama import RMSNorm

TILE = 1 << 16
"""Elements of one tile (256 KiB of fp32): small enough that a shard's edges overdraw little, big
enough that the per-tile generator costs little beside the draw (benchmarks/startup.py)."""
TILE_COLS = 1024
"""Columns of a tile of a parameter wider than this (its rows: TILE // TILE_COLS)."""

Fill = Callable[[torch.Tensor, torch.Generator], torch.Tensor]

RULE_TYPES: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.Embedding,
    nn.modules.conv._ConvNd,
    nn.LayerNorm,
    nn.modules.batchnorm._NormBase,
    nn.GroupNorm,
    RMSNorm,
    nn.RMSNorm,
)
"""The module types `rule` initialises on a rank's piece (and their subclasses)."""


def materialise(
    module: nn.Module, device: torch.device, *, seed: int, fallback: Callable[[str], torch.Tensor] | None = None
) -> nn.Module:
    """Allocate a meta-device module (already cut up, sharded or parallelised: only this rank's
    part is allocated) on `device` and initialise every parameter from (seed, its name).

    Names are the reference TokenModel's (stages and FSDP/TP keep them), so every layout starts
    from the reference's parameters; each rank draws only the tiles of its own piece (a DTensor's
    local shard, see the module docstring). A module with no meta parameters is returned as it is.
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
                local = p.to_local() if isinstance(p, DTensor) else p
                # Drawn straight into a CPU fp32 parameter: no second copy of the piece to allocate.
                into = local if local.device.type == "cpu" and local.dtype == torch.float32 else None
                try:
                    index = local_index(p)
                    value = initial_piece(owner, name, tuple(p.shape), param_seed(seed, full_name), index, out=into)
                except TypeError:
                    if fallback is None:
                        raise
                    value = _piece_of(p, fallback(full_name))
                if value is not local:
                    local.copy_(value.to(device=device, dtype=p.dtype))
    return module


def param_seed(seed: int, name: str) -> int:
    """The generator seed of parameter `name` (e.g. `blocks.3.attn.q.weight`) under `seed`."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63)


def initial_value(owner: nn.Module, name: str, shape: tuple[int, ...], device: torch.device, seed: int) -> torch.Tensor:
    """The full initial value of `owner.<name>` (`seed`: its param_seed), as materialise gives it."""
    return initial_piece(owner, name, shape, seed, [torch.arange(n) for n in shape]).to(device)


def rule(owner: nn.Module, name: str) -> Fill:
    """How `owner.<name>` is filled, distributed as torch's defaults: Linear U(±1/√fan_in)
    (kaiming_uniform with a=√5, and its bias), Embedding N(0, 1), LayerNorm 1 and 0, RMSNorm 1;
    Conv likewise U(±1/√fan_in); BatchNorm and GroupNorm weight 1, bias 0, running mean 0,
    running variance 1, batches tracked 0. TypeError for anything else."""
    if not isinstance(owner, RULE_TYPES):
        raise TypeError(f"materialise: no initialisation for {type(owner).__name__}.{name}")
    if isinstance(owner, nn.Linear):
        bound = 1 / math.sqrt(owner.in_features)
        return lambda t, g: t.uniform_(-bound, bound, generator=g)
    if isinstance(owner, nn.Embedding):
        return lambda t, g: t.normal_(0.0, 1.0, generator=g)
    if isinstance(owner, nn.modules.conv._ConvNd) and name in ("weight", "bias"):
        bound = 1 / math.sqrt(math.prod(owner.weight.shape[1:]))  # in_channels/groups × kernel: kaiming_uniform(√5)
        return lambda t, g: t.uniform_(-bound, bound, generator=g)
    if isinstance(owner, (nn.LayerNorm, nn.modules.batchnorm._NormBase, nn.GroupNorm, RMSNorm, nn.RMSNorm)):
        ones = name in ("weight", "running_var")  # bias, running_mean, num_batches_tracked: 0
        return lambda t, g: t.fill_(1.0 if ones else 0.0)
    raise TypeError(f"materialise: no initialisation for {type(owner).__name__}.{name}")


def has_rule(owner: nn.Module, name: str) -> bool:
    """Whether `rule` initialises `owner.<name>` (else: materialise's fallback)."""
    try:
        rule(owner, name)
    except TypeError:
        return False
    return True


@contextlib.contextmanager
def rule_types_on_meta() -> Iterator[None]:
    """While a model is built on the host for the tensors no rule initialises (byo.ReferenceValues),
    the module types of RULE_TYPES construct theirs on the meta device: the build allocates only
    what the fallback is asked for (a Hugging Face RMSNorm's weight, a rotary table), not the
    Linear and Embedding weights that are most of a model and that each rank draws for its own
    piece. Their constructors are swapped for the build alone (the payload builds in one thread)."""
    saved = {cls: vars(cls).get("__init__") for cls in RULE_TYPES}

    def on_meta(init):
        @functools.wraps(init)
        def build(self, *args, **kwargs):
            if "device" in kwargs:  # an explicit device= would allocate after all
                kwargs["device"] = "meta"
            with torch.device("meta"):
                init(self, *args, **kwargs)

        return build

    try:
        for cls in RULE_TYPES:
            cls.__init__ = on_meta(cls.__init__)
        yield
    finally:
        for cls, init in saved.items():
            if init is None:  # it was inherited: remove the stand-in
                del cls.__init__
            else:
                cls.__init__ = init


def initial_piece(
    owner: nn.Module,
    name: str,
    shape: tuple[int, ...],
    seed: int,
    index: list[torch.Tensor],
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The initial values of `owner.<name>` (full `shape`, `seed` its param_seed) at the positions
    `index[d]` of each dim d, drawn from the tiles they overlap only (the module docstring). On the
    CPU whatever the device: a CUDA generator gives other numbers for the same seed, and a GPU run
    must start where the CPU reference (and every parity test) starts. `out`: a contiguous CPU
    fp32 tensor of the piece's shape, written in place and returned where the piece is one block of
    the 2-D view (FSDP's and TP's pieces are); otherwise a new tensor is returned."""
    fill = rule(owner, name)
    rows_all, rest = (shape[0] if shape else 1), math.prod(shape[1:])
    rows = _span(index[0]) if shape else range(1)
    cols = _span(index[1]) if len(shape) == 2 else range(rest)  # a wider rank: whole rows, sliced below
    whole_span = all(len(ix) == 0 or len(ix) == int(ix[-1]) - int(ix[0]) + 1 for ix in index[:2])
    wide_whole = all(len(ix) == n for ix, n in zip(index[1:], shape[1:], strict=True)) if len(shape) > 2 else True
    direct = out is not None and out.is_contiguous() and whole_span and wide_whole
    block = _draw(fill, seed, (rows_all, rest), rows, cols, out=out.view(len(rows), len(cols)) if direct else None)
    if direct:
        return out
    if not shape:
        return block.reshape(())
    block = block.reshape(len(rows), *(shape[1:] if len(shape) != 2 else (len(cols),)))
    starts = [rows.start, *([cols.start] if len(shape) == 2 else [0] * (len(shape) - 1))]
    for d, (ix, start) in enumerate(zip(index, starts, strict=True)):
        if len(ix) != block.shape[d] or (len(ix) and int(ix[0]) != start):  # not the whole span: select
            block = block.index_select(d, ix - start)
    return block


def _span(ix: torch.Tensor) -> range:
    return range(int(ix.min()), int(ix.max()) + 1) if len(ix) else range(0)


def _draw(
    fill: Fill, seed: int, shape2d: tuple[int, int], rows: range, cols: range, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """[rows, cols] of the tensor's 2-D view `shape2d`, from the tiles they overlap (into `out`)."""
    n_rows, n_cols = shape2d
    out = torch.empty(len(rows), len(cols)) if out is None else out
    if n_rows * n_cols <= TILE:  # one tile: the whole tensor from the parameter's own seed
        whole = fill(torch.empty(shape2d), torch.Generator().manual_seed(seed))
        return out.copy_(whole[rows.start : rows.stop, cols.start : cols.stop])
    tile_cols = min(n_cols, TILE_COLS)
    tile_rows = max(1, TILE // tile_cols)
    for i in range(rows.start // tile_rows, -(-rows.stop // tile_rows)):
        r0, r1 = i * tile_rows, min((i + 1) * tile_rows, n_rows)
        for j in range(cols.start // tile_cols, -(-cols.stop // tile_cols)):
            c0, c1 = j * tile_cols, min((j + 1) * tile_cols, n_cols)
            tile = fill(torch.empty(r1 - r0, c1 - c0), torch.Generator().manual_seed(param_seed(seed, f"#{i},{j}")))
            a0, a1, b0, b1 = max(r0, rows.start), min(r1, rows.stop), max(c0, cols.start), min(c1, cols.stop)
            mine = tile[a0 - r0 : a1 - r0, b0 - c0 : b1 - c0]
            out[a0 - rows.start : a1 - rows.start, b0 - cols.start : b1 - cols.start] = mine
    return out


def local_index(p: torch.Tensor) -> list[torch.Tensor]:
    """Per dim, the global positions of this rank's piece of `p` (all of them for a plain tensor):
    DTensor's own split applied to each dim's positions, so pieces match what distribute_tensor
    would cut from the full value (FSDP's uneven dim-0 chunks, strided FSDP-over-TP shards)."""
    if not isinstance(p, DTensor):
        return [torch.arange(n) for n in p.shape]
    ndim, out = p.dim(), []
    for d, n in enumerate(p.shape):
        placements = [_on_dim(pl, d, ndim) for pl in p.placements]
        positions = torch.arange(n, device=p.device_mesh.device_type)
        out.append(distribute_tensor(positions, p.device_mesh, placements, src_data_rank=None).to_local().cpu())
    return out


def _on_dim(placement, d: int, ndim: int):
    """`placement` as it acts on dim d's positions alone (a 1-D tensor): a split of dim d, or none."""
    if not isinstance(placement, (Shard, _StridedShard)) or placement.dim % ndim != d:  # (not a Shard subclass)
        return Replicate()
    if isinstance(placement, _StridedShard):
        return _StridedShard(0, split_factor=placement.split_factor)
    return Shard(0)


def _piece_of(p: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a full value drawn elsewhere (a fallback's): no communication."""
    if isinstance(p, DTensor):
        return distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local()
    return full
