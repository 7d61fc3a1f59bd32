"""Parallel layouts: each builds an Engine for the training loop (see base.py). Which engine runs
a layout is its row's `engine` (`byo_engine` for a `_target_` model) in launcher/layouts.py: a
module here that names its Engine subclass `ENGINE`."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from launcher.config.schema import LauncherConfig
from launcher.layouts import traits
from launcher.train.engines.base import Engine, Topology
from launcher.train.models import is_byo


def engine_class(layout: str, byo: bool) -> type[Engine]:
    """The Engine subclass that runs `layout` (for a `_target_` model where `byo`)."""
    row = traits(layout)
    module = row.byo_engine if byo else row.engine
    if module is None:  # config validation refuses it first (config/validate_layout.py)
        raise ValueError(f"parallel.layout={layout} has no engine for a `_target_` model")
    # Lazy, by the row's module name: a rank imports only its own layout's engine (importing
    # torch.distributed.pipelining costs every rank ~0.5 s more on 2 cores, which only the
    # pipeline layouts should pay), and the table names engines without importing them.
    return importlib.import_module(module).ENGINE


def build_engine(model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> Engine:
    return engine_class(cfg.parallel.layout, is_byo(cfg.model))(model, topo, cfg, device)
