"""Data parallel with DDP: gradients all-reduced on the last micro-step of each optimizer step."""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from launcher.config.schema import LauncherConfig
from launcher.train.dist import sync
from launcher.train.models import TokenModel, materialise
from launcher.train.engines.base import Engine, Topology, autocast

COMPUTE_ITERS = 3


class DDPEngine(Engine):
    def __init__(self, model: TokenModel, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        self.model, self.cfg, self.device = materialise(model, device, seed=cfg.seed), cfg, device
        self.group = topo.mesh["dp"].get_group()
        self.ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, process_group=self.group)

    def parameters(self):
        return self.ddp.parameters()

    def _micro_step(self, batch: torch.Tensor, accum: int) -> torch.Tensor:
        x, y = batch[:, :-1], batch[:, 1:]
        with autocast(self.cfg, self.device):
            logits = self.ddp(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1)) / accum
        loss.backward()
        return loss.detach()

    def forward_backward(self, micro_batches):
        accum = len(micro_batches)
        loss = torch.zeros((), device=self.device)
        for k, batch in enumerate(micro_batches):
            # Gradients are all-reduced only on the last micro-step of the optimizer step.
            with self.ddp.no_sync() if k < accum - 1 else nullcontext():
                loss += self._micro_step(batch.to(self.device, non_blocking=True), accum)
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
                self._micro_step(batch.to(self.device), 1)
                sync(self.device)
                times.append(time.perf_counter() - start)
        for p in self.model.parameters():
            p.grad = None
        return statistics.median(times)

    def comm_group(self):
        return self.group

    def comm_numel(self):
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)
