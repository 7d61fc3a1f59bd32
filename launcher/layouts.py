"""The parallel layouts as one table of traits: every rule about a layout (its degrees, what it
shards, what its memory holds and its traffic moves, which engine runs it, what a `_target_`
model may do under it) is read from its row here, never from its name.

Adding a layout is one row in `LAYOUTS` (plus its recipe in recipes/parallel/ and, where no
engine runs it yet, one engine module under launcher/train/engines/ defining `ENGINE`).

At the bottom of the package order: pure data, no torch, no other launcher module, so the
config schema (whose `Layout` choice is this table's names) and everything above it can read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class DataParallel(StrEnum):
    """How the ranks that hold the same part of the model share the batch."""

    ddp = "ddp"
    """Whole replicas; gradients all-reduced in buckets (torch DDP)."""
    fsdp = "fsdp"
    """Parameters, gradients and optimizer state sharded over the dp ranks (FSDP2's fully_shard)."""
    none = "none"
    """No data parallelism: dp = 1, another dimension takes the whole world."""


class Degree(StrEnum):
    """Where a dimension's degree comes from."""

    none = "none"
    """Not split: degree 1."""
    world = "world"
    """The world size ÷ the set degrees: the dimension grows with the sweep (a layout with no data
    parallelism has exactly one such dimension)."""
    set = "set"
    """The recipe's `parallel.<dim>` (e.g. parallel.tp=2), fixed across sizes."""


MODEL_DIMS = ("tp", "pp", "cp", "ep")
"""The dimensions that split the model or its sequence, beside data parallelism."""


@dataclass(kw_only=True, frozen=True)
class LayoutTraits:
    """What a parallel layout is; one row of `LAYOUTS`."""

    data_parallel: DataParallel
    """How the dp ranks share the batch: ddp, fsdp or none. With data parallelism, dp is the
    dimension that follows the world size: dp = world size ÷ (the set degrees)."""
    tp: Degree = Degree.none
    """Tensor parallel (Megatron column/row split with sequence parallelism, engines/tp.py)."""
    pp: Degree = Degree.none
    """Pipeline parallel: ranks holding consecutive stages (torch.distributed.pipelining)."""
    virtual_stages: bool = False
    """Whether parallel.schedule=interleaved_1f1b's parallel.virtual_stages apply (v stages per
    pipeline rank); False: v = 1 whatever the recipe says."""
    engine: str
    """Dotted module name of the engine that trains a built-in model under this layout; the module
    defines `ENGINE`, a launcher.train.engines.base.Engine subclass. A name, so the table imports
    no torch and train/engines imports only the engine a trial runs."""
    byo_engine: str | None = None
    """The same for a `_target_` model (the user's own nn.Module); None: this layout cannot split
    one (validation says so before anything runs)."""
    checkpoint: bool = False
    """Whether its engines save and resume a DCP checkpoint (run.checkpoint_every, --requeue)."""
    compile: bool = False
    """Whether train.compile (torch.compile of each repeated unit before wrapping) runs under it."""
    cp: Degree = Degree.none
    """Context parallel: each sequence split across ranks (torch's ring attention over SDPA,
    engines/context_parallel.py); its ranks join the dp ranks in FSDP's shard group."""
    ep: Degree = Degree.none
    """Expert parallel: a mixture-of-experts model's experts spread over ranks (borrowed from the
    dp and cp ranks, as torchtitan does): fsdp_ep and ddp_ep, `parallel.ep` dividing dp (trials/layout.py)."""
    replicate: Degree = Degree.none
    """HSDP: the fsdp ranks as a replicate × shard mesh (shard inside a node, all-reduce across
    replicas; parallel.shard, replicate = dp ÷ shard); `none`: one flat dp dimension."""

    def __post_init__(self) -> None:
        for name, kind in (("data_parallel", DataParallel), *((d, Degree) for d in (*MODEL_DIMS, "replicate"))):
            try:  # rows may be written with plain strings; a wrong one fails at import
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ValueError(
                    f"layout trait {name}={getattr(self, name)!r} must be one of {', '.join(kind)}"
                ) from None
        world = [d for d in MODEL_DIMS if getattr(self, d) == Degree.world]
        if self.data_parallel != DataParallel.none and world:
            raise ValueError(f"layout traits: dp follows the world size, so {world[0]} cannot too (set it or none)")
        if self.data_parallel == DataParallel.none and len(world) != 1:
            raise ValueError(f"layout traits without data parallelism need one dimension of degree world, got {world}")
        if self.virtual_stages and self.pp == Degree.none:
            raise ValueError("layout traits: virtual_stages apply to a pipeline only (pp none)")
        if self.replicate != Degree.none and self.data_parallel != DataParallel.fsdp:
            raise ValueError(f"layout traits: replicate × shard needs data_parallel fsdp, not {self.data_parallel}")

    @property
    def follows_world(self) -> str:
        """The dimension whose degree is the world size ÷ the set degrees: dp, or tp/pp/cp/ep."""
        if self.data_parallel != DataParallel.none:
            return "dp"
        return next(d for d in MODEL_DIMS if getattr(self, d) == Degree.world)

    @property
    def set_dims(self) -> tuple[str, ...]:
        """Dimensions whose degree the recipe sets (parallel.tp, parallel.pp), in MODEL_DIMS order."""
        return tuple(d for d in MODEL_DIMS if getattr(self, d) == Degree.set)

    @property
    def whole_model(self) -> bool:
        """Every rank runs the whole model on its own samples (only data parallelism)."""
        return all(getattr(self, d) == Degree.none for d in MODEL_DIMS)

    def splits(self, dim: str) -> bool:
        """Whether this layout splits `dim` (tp, pp, cp, ep) at all, by world size or recipe."""
        return getattr(self, dim) != Degree.none


_E = "launcher.train.engines."  # the engines' package, so each row's engine reads as its module's name
_DP, _D = DataParallel, Degree

LAYOUTS: dict[str, LayoutTraits] = {
    "ddp": LayoutTraits(data_parallel=_DP.ddp, engine=_E + "ddp", byo_engine=_E + "ddp", checkpoint=True, compile=True),
    "fsdp": LayoutTraits(
        data_parallel=_DP.fsdp, engine=_E + "fsdp", byo_engine=_E + "fsdp", checkpoint=True, compile=True
    ),
    "pipeline": LayoutTraits(
        data_parallel=_DP.none, pp=_D.world, virtual_stages=True, engine=_E + "pipeline", byo_engine=_E + "byo_pipeline"
    ),
    "tp": LayoutTraits(
        data_parallel=_DP.none, tp=_D.world, engine=_E + "tp", byo_engine=_E + "byo_tp", checkpoint=True
    ),
    "dp_pp": LayoutTraits(
        data_parallel=_DP.ddp, pp=_D.set, virtual_stages=True, engine=_E + "pipeline", byo_engine=_E + "byo_pipeline"
    ),
    "fsdp_tp": LayoutTraits(data_parallel=_DP.fsdp, tp=_D.set, engine=_E + "fsdp", checkpoint=True),
    "fsdp_pp": LayoutTraits(data_parallel=_DP.fsdp, pp=_D.set, virtual_stages=True, engine=_E + "pipeline"),
    "fsdp_tp_pp": LayoutTraits(
        data_parallel=_DP.fsdp, tp=_D.set, pp=_D.set, virtual_stages=True, engine=_E + "pipeline"
    ),
    # Experts split over ep of the dp ranks (ep divides dp), FSDP over dp for the rest (engines/ep.py).
    "fsdp_ep": LayoutTraits(data_parallel=_DP.fsdp, ep=_D.set, engine=_E + "ep"),
    "ddp_ep": LayoutTraits(data_parallel=_DP.ddp, ep=_D.set, engine=_E + "ddp_ep"),
    "hsdp": LayoutTraits(data_parallel=_DP.fsdp, replicate=_D.world, engine=_E + "fsdp"),
    "fsdp_cp": LayoutTraits(data_parallel=_DP.fsdp, cp=_D.set, engine=_E + "fsdp"),
    "fsdp_tp_cp": LayoutTraits(data_parallel=_DP.fsdp, tp=_D.set, cp=_D.set, engine=_E + "fsdp"),
    "fsdp_tp_pp_cp": LayoutTraits(
        data_parallel=_DP.fsdp, tp=_D.set, pp=_D.set, cp=_D.set, virtual_stages=True, engine=_E + "pipeline"
    ),
}
"""Every layout by its name (parallel.layout, recipes/parallel/<name>.yaml), in the order messages
list them."""


def traits(layout: str) -> LayoutTraits:
    """The row of `layout`; ValueError naming the layouts there are."""
    try:
        return LAYOUTS[layout]
    except KeyError:
        raise ValueError(f"parallel.layout={layout!r} is no layout; choose one of {', '.join(LAYOUTS)}") from None


def layout_names(where: Callable[[LayoutTraits], object] = lambda row: True) -> list[str]:
    """Names of the layouts whose row satisfies `where`, in table order (for messages)."""
    return [name for name, row in LAYOUTS.items() if where(row)]
