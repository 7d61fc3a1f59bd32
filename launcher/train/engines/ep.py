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
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from launcher import torch_compat
from launcher.config.schema import LauncherConfig
from launcher.train.clipping import ExpertShare
from launcher.train.dist import mesh_group_options
from launcher.train.engines.base import Topology
from launcher.train.engines.fsdp import FSDPEngine
from launcher.train.models.moe import Experts


class ExpertParallelEngine(FSDPEngine):
    def __init__(self, model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device) -> None:
        self.ep_mesh, self.experts = split_experts(model, topo, cfg, device)
        self.ep, self.ep_group = self.ep_mesh["ep"].size(), self.ep_mesh["ep"].get_group()
        super().__init__(model, topo, cfg, device)

    def shard_inner(self, mp: MixedPrecisionPolicy) -> None:
        for experts in self.experts:
            unit = experts if torch_compat.fsdp_takes_module_dict() else list(experts.values())  # one unit either way
            fully_shard(unit, mesh=self.ep_mesh["edp"], reshard_after_forward=self.reshard, mp_policy=mp)
            # FSDP averages over the dp ÷ ep holders; the mean over dp needs 1/ep more. Not
            # set_gradient_divide_factor: it reduces with PREMUL_SUM, which gloo lacks.
            experts.weight_grad_scale = 1.0 / self.ep

    def full_state_dict(self):
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
        return with_group_experts(full, self.ep_group)

    def grad_norm_experts(self):
        return ExpertShare(frozenset(id(p) for e in self.experts for p in e.parameters()), self.ep_group)

    def metrics(self):
        return super().metrics() | {"ep": self.ep}


def split_experts(
    model: nn.Module, topo: Topology, cfg: LauncherConfig, device: torch.device
) -> tuple[DeviceMesh, list[Experts]]:
    """The (edp, ep) mesh over the dp ranks, and the meta model's Experts cut to this rank's
    n_experts ÷ ep, each told its ep group (none where ep = 1: no all-to-all)."""
    ep = cfg.parallel.ep or 1
    if topo.tp * topo.pp != 1 or topo.dp % ep:  # the trial spec refuses these first (trials/layout.py)
        raise ValueError(f"expert parallel needs tp = pp = 1 and ep dividing dp, got dp={topo.dp} tp={topo.tp} ep={ep}")
    shape = (topo.dp // ep, ep)
    override = mesh_group_options(shape, ("edp", "ep"), cfg.cluster.pg_timeout_s)
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=("edp", "ep"), backend_override=override)
    experts = [m for m in model.modules() if isinstance(m, Experts)]
    me = mesh["ep"].get_local_rank()
    for e in experts:
        local = e.n_experts // ep
        for key in [k for k in e if not me * local <= int(k) < (me + 1) * local]:
            del e[key]
        e.group = mesh["ep"].get_group() if ep > 1 else None
    return mesh, experts


def with_group_experts(full: dict[str, torch.Tensor], ep_group) -> dict[str, torch.Tensor] | None:
    """`full` (every parameter this rank holds, complete) with the experts the other ranks of its
    ep group hold, on global rank 0 (None elsewhere). Collective over each ep group."""
    mine = {k: v.detach().cpu() for k, v in full.items() if ".experts." in k}
    gathered: list[dict[str, torch.Tensor] | None] = [None] * dist.get_world_size(ep_group)
    dist.all_gather_object(gathered, mine, group=ep_group)
    if dist.get_rank() != 0:
        return None
    out = {k: v.detach().cpu() for k, v in full.items()}
    for part in gathered:
        out |= part or {}
    return out


ENGINE = ExpertParallelEngine
"""The engine the layouts whose row names this module run (launcher/layouts.py)."""
