"""Rank discovery and process-group setup, for local processes, srun and torchrun alike."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(kw_only=True, frozen=True)
class RankInfo:
    rank: int
    """Global rank."""
    world_size: int
    """Ranks in the job."""
    local_rank: int
    """Rank on this node (selects the GPU)."""


def rank_info(env: os._Environ | dict = os.environ) -> RankInfo:
    """torchrun/local executor set RANK etc.; under plain `srun` Slurm's own variables stand in."""

    def first(*names: str, default: str) -> int:
        for name in names:
            if name in env:
                return int(env[name])
        return int(default)

    return RankInfo(
        rank=first("RANK", "SLURM_PROCID", default="0"),
        world_size=first("WORLD_SIZE", "SLURM_NTASKS", default="1"),
        local_rank=first("LOCAL_RANK", "SLURM_LOCALID", default="0"),
    )


def pick_device(requested: str, local_rank: int) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("cluster.device=cuda but torch sees no CUDA device on this host")
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def pick_backend(requested: str, device: torch.device) -> str:
    if requested != "auto":
        return requested
    return "nccl" if device.type == "cuda" else "gloo"


def init(info: RankInfo, backend: str, device: torch.device, timeout_s: float) -> None:
    """env:// rendezvous; MASTER_ADDR/MASTER_PORT come from the executor or sbatch script."""
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(
        backend=backend,
        rank=info.rank,
        world_size=info.world_size,
        timeout=timedelta(seconds=timeout_s),
        **kwargs,
    )


def sync(device: torch.device) -> None:
    """Wait for queued device work, so host timers measure it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
