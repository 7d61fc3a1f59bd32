"""Parallel layouts: each builds an Engine for the training loop (see base.py)."""

from __future__ import annotations

import torch

from launcher.config.schema import LauncherConfig
from launcher.train.models import TokenModel
from launcher.train.engines.base import Engine, Topology


def build_engine(model: TokenModel, topo: Topology, cfg: LauncherConfig, device: torch.device) -> Engine:
    layout = cfg.parallel.layout
    if layout == "ddp":
        from launcher.train.engines.ddp import DDPEngine

        return DDPEngine(model, topo, cfg, device)
    if layout in ("fsdp", "fsdp_tp"):
        from launcher.train.engines.fsdp import FSDPEngine

        return FSDPEngine(model, topo, cfg, device)
    if layout == "tp":
        from launcher.train.engines.tp import TPEngine

        return TPEngine(model, topo, cfg, device)
    if layout in ("pipeline", "dp_pp", "fsdp_pp"):
        from launcher.train.engines.pipeline import PipelineEngine

        return PipelineEngine(model, topo, cfg, device)
    raise ValueError(f"parallel.layout={layout} has no engine")
