"""The cluster's network (NVLink domain, leaf switches), stragglers and power limit: one line each, with the value
and a fix."""

from __future__ import annotations

import math

from launcher.config.cluster_schema import ClusterConfig
from launcher.config.derived import nvlink_domain
from launcher.config.errors import ConfigError


def check_network(c: ClusterConfig) -> None:
    """cluster.nvlink_domain whole nodes, cluster.nodes_per_leaf ≥ 1 (or null), cluster.oversubscription ≥ 1,
    cluster.step_jitter ≥ 0 (or null), cluster.power_limit_w > 0 (or null; the device's TDP bounds it where the plan
    knows the device: compute/power.py)."""
    nvlink_domain(c)  # whole nodes: one line naming the value and a multiple that fits
    if c.nodes_per_leaf is not None and c.nodes_per_leaf < 1:
        raise ConfigError(
            f"cluster.nodes_per_leaf={c.nodes_per_leaf} must be ≥ 1 (nodes under one leaf switch); "
            "set e.g. cluster.nodes_per_leaf=32, or null for one non-blocking fabric"
        )
    if not (math.isfinite(c.oversubscription) and c.oversubscription >= 1.0):
        raise ConfigError(
            f"cluster.oversubscription={c.oversubscription} must be ≥ 1 (a leaf's downlink ÷ uplink bandwidth); "
            "set e.g. cluster.oversubscription=2 for 2:1, or 1 for a non-blocking fat tree"
        )
    if c.step_jitter is not None and not (math.isfinite(c.step_jitter) and c.step_jitter >= 0.0):
        raise ConfigError(
            f"cluster.step_jitter={c.step_jitter} must be ≥ 0 (a rank's mean relative delay per step); "
            "set e.g. cluster.step_jitter=0.01, or null for the fitted default"
        )
    if c.power_limit_w is not None and not (math.isfinite(c.power_limit_w) and c.power_limit_w > 0):
        raise ConfigError(
            f"cluster.power_limit_w={c.power_limit_w:g} must be > 0 W (the board power limit, nvidia-smi -pl); "
            "set e.g. cluster.power_limit_w=500, or null for the device's TDP"
        )
