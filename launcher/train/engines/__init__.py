"""Parallel layouts: each builds an Engine for the training loop (see base.py)."""

from __future__ import annotations

import torch

from ...config.schema import LauncherConfig
from ..models import TokenModel
from .base import Engine, Topology


def build_engine(model: TokenModel, topo: Topology, cfg: LauncherConfig, device: torch.device) -> Engine:
    layout = cfg.parallel.layout
    if layout == "ddp":
        from .ddp import DDPEngine

        return DDPEngine(model, topo, cfg, device)
    if layout in ("fsdp", "fsdp_tp"):
        from .fsdp import FSDPEngine

        return FSDPEngine(model, topo, cfg, device)
    if layout == "tp":
        from .tp import TPEngine

        return TPEngine(model, topo, cfg, device)
    if layout in ("pipeline", "dp_pp", "fsdp_pp"):
        from .pipeline import PipelineEngine

        return PipelineEngine(model, topo, cfg, device)
    raise ValueError(f"parallel.layout={layout} has no engine")
