"""Tensor parallel for a `_target_` model by the recipe's own plan (layout tp, parallel.tp_plan):
module name (fnmatch patterns: `blocks.*.fc1`) → `colwise` or `rowwise`, torch's ColwiseParallel
and RowwiseParallel (parallelize_module) with their default layouts: a colwise Linear's output
stays sharded on its last dim, a rowwise one takes that shard and all-reduces its output — the
Megatron pair (fc1 colwise, fc2 rowwise); an unpaired colwise Linear hands its shard on as it is.
Every tp rank runs the same batch (dp = 1); what the plan leaves out is replicated and computed
alike on every rank. No sequence parallelism, no loss_parallel: the output reaches the loss whole.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from launcher.config.schema import LauncherConfig
from launcher.train.engines.base import Engine, Topology, autocast
from launcher.train.engines.tp import mixed_params
from launcher.train.models import materialise, reference_values
from launcher.train.models.byo import checkpoint_modules, loss_fn, step_loss, to_device, unit_modules

STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


class ByoTPEngine(Engine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        self.model, self.cfg, self.device, self.topo = model, cfg, device, topo
        plan = {name: STYLES[str(style)]() for name, style in cfg.parallel.tp_plan.items()}
        parallelize_module(model, topo.mesh["tp"], plan)  # on meta: only this rank's pieces get allocated
        if cfg.model.activation_checkpointing == "full":
            checkpoint_modules(unit_modules(model, cfg.parallel))
        materialise(model, device, seed=cfg.seed, fallback=reference_values(cfg.model, cfg.seed))
        self.foreach_optimizer = not mixed_params(model.parameters())
        self.loss = loss_fn(cfg.model)

    def parameters(self):
        return self.model.parameters()

    def checkpoint_module(self):
        return self.model

    def forward_backward(self, micro_batches):
        accum = len(micro_batches)
        total = torch.zeros((), device=self.device)
        for batch in micro_batches:
            loss = step_loss(self.model, to_device(batch, self.device), self.loss, autocast(self.cfg, self.device))
            (loss / accum).backward()
            total += loss.detach() / accum
        return total

    def full_state_dict(self):
        full = {
            k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()  # collective, same order
            for k, v in self.model.state_dict().items()
        }
        return full if dist.get_rank() == 0 else None

    def metrics(self) -> dict[str, Any]:
        return {"tp": self.topo.tp, "tp_plan": dict(self.cfg.parallel.tp_plan)}


ENGINE = ByoTPEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
