"""What the published replay says of a configuration's memory: whether it fits its device by the
estimate `launcher plan` uses (launcher/perf/memory_limit.py: the estimate against the device less
MEMORY_MARGIN), and, where it does not, why a run that really ran reads `oom (predicted)`.

Every row of the corpus ran, so `oom (predicted)` on one is a miss of the estimate unless the source
used something no launcher setting expresses: CPU offload (the corpus's `offload` column), or what
replay_mapping.MEMORY_NOT_EXPRESSED names for a source, is said in the verdict. A row whose source does
not state its activation checkpointing is planned with the least recompute whose estimate fits
(selective, then full): the run ran, so the source recomputed at least that much; the row's `assumed`
says which, and why.
"""

from __future__ import annotations

import dataclasses

from benchmarks.replay_mapping import Mapped
from launcher.config.compose import compose_config
from launcher.config.schema import LauncherConfig
from launcher.perf.memory import GIB
from launcher.perf.memory_limit import limit_of, planned_bytes
from launcher.trials.spec import make_trial

UNPUBLISHED = "activation checkpointing not published: "
"""How replay_mapping.py marks a row whose checkpointing it assumed."""
LESS_TO_MORE = ("selective", "full")
"""Checkpointing tried for such a row, least recompute first (`none` is never assumed: replay_mapping.py)."""


def need_and_usable(cfg: LauncherConfig, gpus: int) -> tuple[float, float] | None:
    """(estimated bytes of the neediest rank, bytes usable on the device); None where the device's memory
    is unknown."""
    limit = limit_of(cfg)
    if limit is None:
        return None
    need = planned_bytes(cfg, make_trial(cfg, index=0, world_size=gpus, steps=1, warmup_steps=0))
    return (need, limit.usable_bytes) if need is not None else None


def fitted_checkpointing(mapped: Mapped, cfg: LauncherConfig) -> tuple[Mapped, LauncherConfig]:
    """The row planned with the least recompute that fits, where its source does not state the checkpointing
    and the assumed one does not fit; unchanged otherwise (or when nothing fits: the verdict then says oom)."""
    said = next((a for a in mapped.assumed if a.startswith(UNPUBLISHED)), None)
    judged = need_and_usable(cfg, mapped.gpus)
    if said is None or judged is None or judged[0] <= judged[1]:
        return mapped, cfg
    first = cfg.model.activation_checkpointing
    tried = [f"{first}'s estimate {judged[0] / GIB:.1f} GiB > {judged[1] / GIB:.1f} GiB usable"]
    for ckpt in LESS_TO_MORE[LESS_TO_MORE.index(first) + 1 :] if first in LESS_TO_MORE else ():
        overrides = [o for o in mapped.overrides if not o.startswith("model.activation_checkpointing=")]
        overrides.append(f"model.activation_checkpointing={ckpt}")
        candidate = compose_config(overrides, None)
        need, usable = need_and_usable(candidate, mapped.gpus)
        if need <= usable:
            note = f"{UNPUBLISHED}{ckpt}, the least recompute that fits ({'; '.join(tried)}; the run ran)"
            assumed = [note if a == said else a for a in mapped.assumed]
            return dataclasses.replace(mapped, overrides=overrides, assumed=assumed), candidate
        tried.append(f"{ckpt}'s {need / GIB:.1f} GiB")
    return mapped, cfg


def memory_verdict(mapped: Mapped, cfg: LauncherConfig) -> str:
    """`fits: …`, `oom (predicted): …` with what the source did that the config cannot express where it
    offloaded to CPU, or `unknown: …` where the device's memory is not known."""
    judged = need_and_usable(cfg, mapped.gpus)
    if judged is None:
        return "unknown: no memory known for the device"
    need, usable = judged
    figures = f"estimate {need / GIB:.1f} GiB, {usable / GIB:.1f} GiB usable"
    if need <= usable:
        return f"fits: {figures}"
    if mapped.offload:
        return (
            f"oom (predicted): the source offloads {mapped.offload} to CPU, which the config cannot express "
            f"({figures} without offload)"
        )
    if mapped.memory_not_expressed:
        return (
            f"oom (predicted): the source {mapped.memory_not_expressed}, which the config cannot express "
            f"({figures} without it)"
        )
    return f"oom (predicted): {figures}"
