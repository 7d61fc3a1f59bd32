"""What the built-in trainer does not implement of a config: the `trainer` group's settings
(config/schema_trainer.py) and the recompute policies of other trainers. A sweep refuses them
(run/sweep.py); the search tries `op` only for a recipe that already describes another trainer."""

from __future__ import annotations

from launcher.config.schema import LauncherConfig

BUILTIN_ONLY_CHECKPOINTING = ("op",)
"""model.activation_checkpointing values the built-in models do not implement (a plan for another trainer)."""


def builtin_lacks(cfg: LauncherConfig) -> list[str]:
    """The settings of `cfg` the built-in trainer does not implement, each as `key=value`; empty
    when the built-in trainer runs the recipe as it says."""
    t = cfg.trainer
    flags = (
        "fused_loss",
        "norm_16bit",
        "distributed_optimizer",
        "vocab_parallel_loss",
        "master_weight_remainders",
        "fused_swiglu",
        "pipeline_fsdp_16bit",
        "grad_sync_16bit",
        "weights_16bit",
        "experts_outside_fsdp",
    )
    lacks = [f"trainer.{k}=true" for k in flags if getattr(t, k)]
    if t.checkpoint_every_nth_block:
        lacks.append(f"trainer.checkpoint_every_nth_block={t.checkpoint_every_nth_block}")
    if cfg.model.activation_checkpointing in BUILTIN_ONLY_CHECKPOINTING:
        lacks.append(f"model.activation_checkpointing={cfg.model.activation_checkpointing}")
    return lacks
