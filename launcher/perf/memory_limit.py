"""Whether a planned configuration fits its device: the memory estimate (memory.py) against the
device's memory less MEMORY_MARGIN (the memory the fullest published run left free; memory.py). One
rule for `launcher plan` (a size reads `oom (predicted)`) and `launcher plan --search` (a candidate is
dropped). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.schema import LauncherConfig
from launcher.perf.memory import GIB, MEMORY_MARGIN, estimate, gpu_room
from launcher.perf.shapes import planned_device
from launcher.trials.spec import Trial


@dataclass(kw_only=True, frozen=True)
class Limit:
    """The memory a planned rank may use, and where the figure comes from."""

    device_bytes: float
    """One device's memory (cluster.device_memory_gb, else the peak table's)."""
    usable_bytes: float
    """What an estimate may reach: device_bytes × (1 − MEMORY_MARGIN)."""
    source: str
    """In words, for messages and the plan's footer."""

    def fits(self, need_bytes: float) -> bool:
        return need_bytes <= self.usable_bytes

    def describe(self) -> str:
        return (
            f"{self.usable_bytes / GIB:.1f} GiB usable of {self.device_bytes / GIB:.0f} GiB ({self.source}, "
            f"{MEMORY_MARGIN:.0%} kept free: the fullest published run's share, benchmarks/results/memory_published.md)"
        )


def limit_of(cfg: LauncherConfig) -> Limit | None:
    """The planned device's limit; None where nothing says its memory (a CPU plan, a GPU the peak
    table does not know and no cluster.device_memory_gb)."""
    if planned_device(cfg) != "cuda":
        return None
    room = gpu_room(cfg.cluster)
    if room is None:
        return None
    return Limit(
        device_bytes=room.bytes_per_rank, usable_bytes=room.bytes_per_rank * (1 - MEMORY_MARGIN), source=room.source
    )


def planned_bytes(cfg: LauncherConfig, trial: Trial) -> float | None:
    """Estimated peak bytes of the neediest rank of `trial` on the planned device; None for a
    `_target_` model (no config field describes its activations)."""
    if cfg.model._target_ is not None:
        return None
    return estimate(cfg, trial, planned_device(cfg)).total
