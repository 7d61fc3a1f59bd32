"""Data parallel with DDP: gradients all-reduced on the last micro-step of each optimizer step."""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from launcher.config.schema import LauncherConfig
from launcher.train.dist import sync
from launcher.train.engines.base import Engine, Topology, autocast
from launcher.train.models import is_byo, materialise, reference_values
from launcher.train.models.byo import checkpoint_modules, loss_fn, step_loss, to_device, unit_modules
from launcher.train.models.moe import aux_loss

COMPUTE_ITERS = 3


class DDPEngine(Engine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        if is_byo(cfg.model) and cfg.model.activation_checkpointing == "full":
            checkpoint_modules(unit_modules(model, cfg.parallel))  # the modules fsdp would shard
        self.loss = loss_fn(cfg.model) if is_byo(cfg.model) else None
        fallback = reference_values(cfg.model, cfg.seed)
        self.model, self.cfg, self.device = materialise(model, device, seed=cfg.seed, fallback=fallback), cfg, device
        self.group = topo.mesh["dp"].get_group()
        self.ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, process_group=self.group)

    def parameters(self):
        return self.ddp.parameters()

    def _micro_step(self, batch: torch.Tensor | dict[str, torch.Tensor], accum: int) -> torch.Tensor:
        if isinstance(batch, dict):  # a `_target_` model's batch: its inputs by name
            loss = step_loss(self.ddp, batch, self.loss, autocast(self.cfg, self.device)) / accum
            loss.backward()
            return loss.detach()
        x, y = batch[:, :-1], batch[:, 1:]
        with autocast(self.cfg, self.device):
            logits = self.ddp(x)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss = (ce + aux_loss(self.model)) / accum  # aux: a MoE model's load-balancing loss, else 0
        loss.backward()
        return loss.detach()

    def forward_backward(self, micro_batches):
        accum = len(micro_batches)
        loss = torch.zeros((), device=self.device)
        for k, batch in enumerate(micro_batches):
            # Gradients are all-reduced only on the last micro-step of the optimizer step.
            with self.ddp.no_sync() if k < accum - 1 else nullcontext():
                loss += self._micro_step(to_device(batch, self.device), accum)
        return loss

    def checkpoint_module(self):
        return self.ddp

    def full_state_dict(self):
        if torch.distributed.get_rank() != 0:
            return None
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}

    def compute_seconds(self, batch):
        times = []
        with self.ddp.no_sync():
            for _ in range(COMPUTE_ITERS):
                sync(self.device)
                start = time.perf_counter()
                self._micro_step(to_device(batch, self.device), 1)
                sync(self.device)
                times.append(time.perf_counter() - start)
        for p in self.model.parameters():
            p.grad = None
        return statistics.median(times)

    def comm_group(self):
        return self.group

    def comm_numel(self):
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


ENGINE = DDPEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
