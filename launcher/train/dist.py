"""Device, backend and process-group setup for the rank that launcher/train/env.py identified."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from launcher.train.env import RankEnv


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


def init(renv: RankEnv, backend: str, device: torch.device, timeout_s: float) -> None:
    """env:// rendezvous at renv's address, with renv's rank and world size."""
    # env:// reads the address from the process environment (under torchrun it joins the
    # agent's store there), so the resolved one goes there: the same values where they were set,
    # the Slurm-derived ones under a plain srun that set none.
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = renv.master_addr, str(renv.master_port)
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=renv.rank,
        world_size=renv.world_size,
        timeout=timedelta(seconds=timeout_s),
        **kwargs,
    )


def sync(device: torch.device) -> None:
    """Wait for queued device work, so host timers measure it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
