"""What the built-in trainer does not implement of a config: the `trainer` group's settings
(config/schema_trainer.py) and the recompute policies of other trainers. A sweep refuses them
(run/sweep.py); the search tries `op` for every recipe with attention, and for the built-in trainer's says
which best needs another trainer and verifies only what it runs (perf/candidates.py builtin_runs)."""

from __future__ import annotations

from dataclasses import fields

from launcher.config.schema import LauncherConfig
from launcher.config.schema_trainer import TrainerConfig

BUILTIN_ONLY_CHECKPOINTING = ("op",)
"""model.activation_checkpointing values the built-in models do not implement (a plan for another trainer)."""


def builtin_lacks(cfg: LauncherConfig) -> list[str]:
    """The settings of `cfg` the built-in trainer does not implement, each as `key=value`; empty
    when the built-in trainer runs the recipe as it says."""
    # Every trainer.* default is the built-in trainer's (config/schema_trainer.py): any other value describes
    # another trainer, so the list is the fields themselves, never a copy of their names to keep in step.
    lacks = [
        f"trainer.{f.name}={str(value).lower() if isinstance(value, bool) else value}"
        for f in fields(TrainerConfig)
        if (value := getattr(cfg.trainer, f.name)) != f.default
    ]
    if cfg.model.activation_checkpointing in BUILTIN_ONLY_CHECKPOINTING:
        lacks.append(f"model.activation_checkpointing={cfg.model.activation_checkpointing}")
    return lacks
