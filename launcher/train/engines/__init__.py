"""Parallel layouts: each builds an Engine for the training loop (see base.py)."""

from __future__ import annotations

import torch
from torch import nn

from launcher.config.schema import LauncherConfig
from launcher.train.engines.base import Engine, Topology
from launcher.train.engines.byo_tp import ByoTPEngine
from launcher.train.engines.ddp import DDPEngine
from launcher.train.engines.fsdp import FSDPEngine
from launcher.train.engines.tp import TPEngine
from launcher.train.models import is_byo
from launcher.trials.layout import FSDP_LAYOUTS, PIPELINE_LAYOUTS


def build_engine(model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> Engine:
    layout = cfg.parallel.layout
    if layout == "ddp":
        return DDPEngine(model, topo, cfg, device)
    if layout == "tp":
        return ByoTPEngine(model, topo, cfg, device) if is_byo(cfg.model) else TPEngine(model, topo, cfg, device)
    if layout in PIPELINE_LAYOUTS and is_byo(cfg.model):  # pipeline and dp_pp: the recipe's parallel.pp_split
        from launcher.train.engines.byo_pipeline import ByoPipelineEngine  # lazy: as PipelineEngine's below

        return ByoPipelineEngine(model, topo, cfg, device)
    if layout in PIPELINE_LAYOUTS:  # fsdp_pp and fsdp_tp_pp among them: FSDP inside each stage
        # Lazy: importing torch.distributed.pipelining costs every rank ~0.5 s more (2 cores),
        # which only the pipeline layouts should pay.
        from launcher.train.engines.pipeline import PipelineEngine

        return PipelineEngine(model, topo, cfg, device)
    if layout in FSDP_LAYOUTS:
        return FSDPEngine(model, topo, cfg, device)
    raise ValueError(f"parallel.layout={layout} has no engine")
