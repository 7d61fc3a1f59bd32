"""Expert parallel under DDP (layout ddp_ep): a mixture-of-experts model's routed experts split
over groups of parallel.ep dp ranks as under fsdp_ep (engines/ep.py: the same mesh, the same
all-to-all dispatch and combine), every other parameter a whole replica all-reduced by DDP over dp.

DDP ignores the experts (each rank holds other ones); their gradients are all-reduced by hand,
after the step's last backward, over the dp ÷ ep ranks holding the same experts, averaged there,
with the 1/ep more that makes them the global batch's mean (`Experts.weight_grad_scale`, as
under fsdp_ep)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from launcher.config.schema import LauncherConfig
from launcher.train.clipping import ExpertShare
from launcher.train.engines.base import Topology
from launcher.train.engines.ddp import DDPEngine
from launcher.train.engines.ep import split_experts, with_group_experts


class DDPExpertParallelEngine(DDPEngine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        self.ep_mesh, experts = split_experts(model, topo, cfg, device)
        self.ep, self.ep_group = self.ep_mesh["ep"].size(), self.ep_mesh["ep"].get_group()
        self.edp_group, self.edp = self.ep_mesh["edp"].get_group(), self.ep_mesh["edp"].size()
        for e in experts:
            e.weight_grad_scale = 1.0 / self.ep
        ignored = {id(p) for e in experts for p in e.parameters()}
        names = [n for n, p in model.named_parameters() if id(p) in ignored]
        # Before DDP wraps the model (in DDPEngine.__init__): it then neither broadcasts nor reduces them.
        DDP._set_params_and_buffers_to_ignore_for_model(model, names)
        super().__init__(model, topo, cfg, device)
        # Looked up after materialising: to_empty replaced the meta parameters.
        self.expert_params = [self.model.get_parameter(n) for n in names]

    def grad_norm_experts(self):
        return ExpertShare(frozenset(map(id, self.expert_params)), self.ep_group)

    def forward_backward(self, micro_batches):
        loss = super().forward_backward(micro_batches)
        if self.edp > 1:
            for p in self.expert_params:
                dist.all_reduce(p.grad, group=self.edp_group)  # a sum: gloo has no AVG
                p.grad.div_(self.edp)
        return loss

    def compute_seconds(self, batch):
        return None  # its all-to-alls are communication inside the compute: no sync-free pass to time

    def full_state_dict(self):
        full = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        return with_group_experts(full, self.ep_group)

    def metrics(self):
        return super().metrics() | {"ep": self.ep}


ENGINE = DDPExpertParallelEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
