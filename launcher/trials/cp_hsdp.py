"""The per-size checks and degrees of context parallelism (parallel.cp) and HSDP's shard group
(parallel.shard), read by trials/layout.py's trial_degrees. Pure; no torch."""

from __future__ import annotations

import math

from launcher.config.cluster_traits import cluster_traits
from launcher.config.derived import ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig


def check_cp(cfg: LauncherConfig, cp: int, tp: int) -> None:
    """Context parallel splits each sequence into cp equal parts (each further into tp parts under
    sequence-parallel TP) and runs ring attention over the built-in model's SDPA."""
    model, layout = cfg.model, cfg.parallel.layout
    if model._target_ is not None:
        raise ConfigError(
            f"parallel.layout={layout} splits each sequence across cp ranks inside the built-in model's "
            f"attention; model._target_={model._target_!r} has no attention the launcher can split: use parallel=fsdp"
        )
    if model.arch == "mlp":
        raise ConfigError(
            f"parallel.layout={layout} splits attention over the sequence, and model.arch=mlp has none; "
            "use model.arch=gpt or llama, or parallel=fsdp"
        )
    # torch's causal load balancer gives each cp rank a head and a tail chunk (2·cp chunks a sequence),
    # and sequence-parallel TP splits a rank's piece into tp parts: both must come out whole.
    need = math.lcm(2 * cp, cp * tp)
    if model.seq_len % need:
        what = f"2·cp = {2 * cp} (torch's load balancer: a head and a tail chunk per cp rank)"
        if tp > 1:
            what += f" and cp({cp}) × tp({tp}) = {cp * tp}"
        raise ConfigError(
            f"model.seq_len={model.seq_len} is not divisible by {what}: each rank holds equal pieces of "
            f"every sequence; choose a seq_len that is a multiple of {need}"
        )


def hsdp_shard(cfg: LauncherConfig, dp: int) -> int:
    """HSDP's shard group size at `dp`: parallel.shard, or 0 for the ranks of one node (the whole
    world when every rank runs on this machine), at most dp; it must divide dp."""
    shard = cfg.parallel.shard
    if shard < 0:
        raise ConfigError(f"parallel.shard={shard} must be ≥ 0 (0: the ranks of one node); set e.g. parallel.shard=8")
    if shard == 0:
        shard = dp if cluster_traits(cfg.cluster).ranks_here else min(dp, ranks_per_node(cfg.cluster))
        source = f"parallel.shard=0 (the {shard} ranks of a node)"
    else:
        source = f"parallel.shard={shard}"
    if dp % shard:
        raise ConfigError(
            f"{source} does not divide dp={dp}: hsdp runs dp ÷ shard replicas of one shard group; "
            f"choose a shard that divides {dp}"
        )
    return shard
