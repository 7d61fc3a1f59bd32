"""Expert parallel under FSDP2 (layout fsdp_ep): a mixture-of-experts model's routed experts
split over groups of parallel.ep dp ranks, everything else fully sharded over dp (torchtitan's
pattern, ep borrowed from dp).

The dp ranks form an (edp, ep) mesh, ep innermost, so an expert-parallel group is ep consecutive
ranks (one node where ep fits in one). Rank i of a group holds experts i·E/ep … (i+1)·E/ep − 1 of
every MoE block (the others are deleted from the meta model before it is materialised, so a rank
allocates and draws only its own), and its MoE layers exchange tokens with the group by
all-to-all (models/moe.py `Experts.forward`: dispatch before the experts, combine after).

Gradients: the experts are one FSDP unit per block on the edp dim (the dp ÷ ep ranks holding the
same experts), reduce-scattered there; every other parameter over all dp ranks. An expert's
gradient on a rank sums what the tokens of its whole ep group contributed (the combine's
backward brings them), so summed over the edp ranks it covers all dp ranks' losses: divided by
dp (FSDP's average over the edp ranks, then 1/ep by `Experts.weight_grad_scale`) it is the mean
over the global batch, as the reference's.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from launcher.config.schema import LauncherConfig
from launcher.train.dist import mesh_group_options
from launcher.train.engines.base import Topology
from launcher.train.engines.fsdp import FSDPEngine
from launcher.train.models.moe import Experts


class ExpertParallelEngine(FSDPEngine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        ep = cfg.parallel.ep or 1
        if topo.tp * topo.pp != 1 or topo.dp % ep:  # the trial spec refuses these first (trials/layout.py)
            raise ValueError(f"fsdp_ep needs tp = pp = 1 and ep dividing dp, got dp={topo.dp} tp={topo.tp} ep={ep}")
        shape = (topo.dp // ep, ep)
        override = mesh_group_options(shape, ("edp", "ep"), cfg.cluster.pg_timeout_s)
        self.ep_mesh = init_device_mesh(device.type, shape, mesh_dim_names=("edp", "ep"), backend_override=override)
        self.ep, self.ep_group = ep, self.ep_mesh["ep"].get_group()
        self.experts = [m for m in model.modules() if isinstance(m, Experts)]
        me = self.ep_mesh["ep"].get_local_rank()
        for experts in self.experts:
            local = experts.n_experts // ep
            for key in [k for k in experts if not me * local <= int(k) < (me + 1) * local]:
                del experts[key]
            experts.group = self.ep_group if ep > 1 else None
        super().__init__(model, topo, cfg, device)

    def shard_inner(self, mp: MixedPrecisionPolicy) -> None:
        for experts in self.experts:
            fully_shard(experts, mesh=self.ep_mesh["edp"], reshard_after_forward=self.reshard, mp_policy=mp)
            # FSDP averages over the dp ÷ ep holders; the mean over dp needs 1/ep more. Not
            # set_gradient_divide_factor: it reduces with PREMUL_SUM, which gloo lacks.
            experts.weight_grad_scale = 1.0 / self.ep

    def full_state_dict(self):
        """Every parameter on global rank 0: FSDP gathers each over its own mesh; the experts of
        the other ranks of rank 0's ep group come from them (each group exchanges its own)."""
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
        mine = {k: v.detach().cpu() for k, v in full.items() if ".experts." in k}
        gathered: list[dict[str, torch.Tensor] | None] = [None] * self.ep
        dist.all_gather_object(gathered, mine, group=self.ep_group)
        if dist.get_rank() != 0:
            return None
        out = {k: v.detach().cpu() for k, v in full.items()}
        for part in gathered:
            out |= part or {}
        return out

    def metrics(self):
        return super().metrics() | {"ep": self.ep}


ENGINE = ExpertParallelEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
