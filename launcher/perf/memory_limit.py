"""Whether a planned configuration fits its device: the memory estimate (memory.py) against the
device's memory less a margin measured on real trials. One rule for `launcher plan` (a size
reads `oom (predicted)`) and `launcher plan --search` (a candidate is dropped). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.schema import LauncherConfig
from launcher.perf.memory import GIB, estimate, gpu_room
from launcher.perf.shapes import planned_device
from launcher.trials.spec import Trial

MEMORY_MARGIN = 0.05
"""Share of a device's memory a plan keeps free of the estimate: a configuration fits when its
estimate ≤ (1 − MEMORY_MARGIN) × the device's memory. Derived in
benchmarks/results/memory_accuracy.json (`python -m benchmarks.memory_accuracy`): CPU trials of
every layout (and fsdp accumulating, with and without fsdp_sync_each_microstep) measured the peak
resident memory against the estimate, estimate ÷ measured 1.11–1.21
(never under: worst under-estimate 0%), plus its stated 5% cushion for what a CPU trial does not
see (the CUDA caching allocator's fragmentation, NCCL buffers). On an H100 (gpu_smoke.md) the
estimate was 1.15× (ddp, bf16) and 1.25× (fsdp, bf16) the peak CUDA allocation; since FSDP is
counted with 16-bit parameters and the loss at 14 bytes per logit under mixed precision, the
same measured peaks give 1.07× (ddp, bf16), 1.04× (ddp, fp32) and 1.06× (fsdp, bf16): still over."""


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
            f"{MEMORY_MARGIN:.0%} kept free: benchmarks/results/memory_accuracy.md)"
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
