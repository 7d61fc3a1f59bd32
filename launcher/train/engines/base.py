"""What every parallel layout provides to the training loop, and the rank topology it runs on.

The loop is layout-agnostic: it feeds each optimizer step's micro-batches to an Engine, steps
the optimizer on the Engine's parameters, and asks the Engine for full parameters (parity) and
layout metrics (bubble, collective time). Ranks are laid out dp × pp × cp × tp, tp innermost.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from launcher import torch_compat
from launcher.config.schema import LauncherConfig
from launcher.layouts import Degree, traits
from launcher.train.dist import mesh_group_options
from launcher.trials.spec import Trial


@dataclass(kw_only=True, frozen=True)
class Topology:
    dp: int
    """Data-parallel degree."""
    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline degree."""
    rank: int
    """Global rank."""
    mesh: Any
    """DeviceMesh of shape (dp, pp, tp), dims named "dp", "pp", "tp"; (dp, pp, cp, tp) with a "cp"
    dim where cp > 1."""
    cp: int = 1
    """Context-parallel degree (ranks splitting each sequence; they read the same samples)."""
    shard: int = 0
    """FSDP shard group size under hsdp (replicate = dp ÷ shard); 0: the whole dp dimension."""
    fsdp_mesh: Any = None
    """The mesh FSDP shards over: the "dp" dim; "dp" and "cp" flattened ("dp_cp") where cp > 1
    (a cp rank holds its own piece of the sequence, not of the model); (replicate, shard) under hsdp."""

    @property
    def dp_rank(self) -> int:
        return self.rank // (self.pp * self.cp * self.tp)

    @property
    def pp_rank(self) -> int:
        return (self.rank // (self.cp * self.tp)) % self.pp

    @property
    def cp_rank(self) -> int:
        return (self.rank // self.tp) % self.cp

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @classmethod
    def build(cls, trial: Trial, rank: int, device: torch.device, *, timeout_s: float) -> Topology:
        """The (dp, pp, tp) mesh over the initialised world; every group it creates waits at most
        `timeout_s` (cluster.pg_timeout_s) in a collective, as the world group does."""
        cp, shard = getattr(trial, "cp", 1), getattr(trial, "shard", 0) or trial.dp
        names = ("dp", "pp", "cp", "tp") if cp > 1 else ("dp", "pp", "tp")  # no cp groups where none split
        shape = (trial.dp, trial.pp, cp, trial.tp) if cp > 1 else (trial.dp, trial.pp, trial.tp)
        override = mesh_group_options(shape, names, timeout_s)
        mesh = init_device_mesh(device.type, shape, mesh_dim_names=names, backend_override=override)
        if cp > 1 and trial.tp > 1 and (refusal := torch_compat.tp_cp_refusal(trial.layout)):
            raise ValueError(refusal)  # config validation refused it already where the submitting torch is this one
        if cp > 1:
            flat = mesh_group_options((trial.dp * cp,), ("dp_cp",), timeout_s).get("dp_cp")
            fsdp_mesh = mesh["dp", "cp"]._flatten("dp_cp", backend_override=flat)
        elif traits(getattr(trial, "layout", "ddp")).replicate != Degree.none:
            hsdp = (trial.dp // shard, shard)
            options = mesh_group_options(hsdp, ("replicate", "shard"), timeout_s)
            if torch_compat.mesh_unflattens():
                fsdp_mesh = mesh["dp"]._unflatten(0, hsdp, ("replicate", "shard"), backend_override=options)
            else:  # torch < 2.10: the same (replicate, shard) split of dp, as a second mesh over the world
                shape4, names4 = (*hsdp, trial.pp, trial.tp), ("replicate", "shard", "pp", "tp")
                override4 = mesh_group_options(shape4, names4, timeout_s)
                whole = init_device_mesh(device.type, shape4, mesh_dim_names=names4, backend_override=override4)
                fsdp_mesh = whole["replicate", "shard"]
        else:
            fsdp_mesh = mesh["dp"]
        return cls(dp=trial.dp, tp=trial.tp, pp=trial.pp, rank=rank, mesh=mesh, cp=cp, shard=shard, fsdp_mesh=fsdp_mesh)


def autocast(cfg: LauncherConfig, device: torch.device):
    """Autocast for precision=bf16/fp16 (fp8: bf16 around its float8 linear layers); a no-op context for fp32."""
    if cfg.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.float16 if cfg.precision == "fp16" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype)


class Engine(ABC):
    """One layout's way of running an optimizer step's forward and backward passes."""

    foreach_optimizer: bool = True
    """False where parameters mix DTensor and plain tensors (a foreach optimizer rejects that)."""

    @abstractmethod
    def parameters(self) -> Iterable[nn.Parameter]:
        """This rank's parameters, for the optimizer."""

    def checkpoint_module(self) -> nn.Module:
        """The module whose state (with the optimizer's) a DCP checkpoint saves and loads."""
        raise NotImplementedError(f"{type(self).__name__} cannot be checkpointed")

    @abstractmethod
    def forward_backward(self, micro_batches: list[torch.Tensor]) -> torch.Tensor | None:
        """Forward and backward over one optimizer step's micro-batches ([micro, seq_len+1] token
        rows each, for this rank's dp coordinate), leaving gradients synchronised and ready for
        optimizer.step(). Gradients are those of the mean loss over the whole global batch.
        Returns this rank's mean loss over its micro-batches (a detached scalar), or None on
        ranks that compute no loss (pipeline stages before the last)."""

    @abstractmethod
    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Every parameter, complete, under the reference TokenModel's names, on global rank 0
        (None elsewhere). Collective: every rank must call it."""

    def grad_norm_group(self) -> Any:
        """The group over which this rank's gradients are only a part of the model's and add up
        to the global norm (a pipeline's pp group: each stage holds its own parameters); None
        where the rank holds the whole model, whole or as DTensor pieces (clipping.py)."""
        return None

    def grad_norm_experts(self) -> Any:
        """Under expert parallel, this rank's expert parameters and the ep group their squares add over
        (clipping.ExpertShare); None where every rank holds every parameter (in pieces or not)."""
        return None

    def compute_seconds(self, batch: torch.Tensor) -> float | None:
        """Median forward+backward time of one micro-batch with gradient sync off (for CCR); None
        where a layout cannot separate compute from communication."""
        return None

    def comm_group(self) -> Any:
        """Process group whose all-reduce of comm_numel() elements is timed for busbw/CCR."""
        return None

    def comm_numel(self) -> int:
        """Elements of the all-reduce timed for busbw/CCR (DDP: the gradient)."""
        return 0

    def metrics(self) -> dict[str, Any]:
        """Layout figures for the record: bubble_measured, bubble_theory, collective_time_s, …"""
        return {}
