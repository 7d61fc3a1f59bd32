"""Device, backend and process-group setup for the rank that launcher/train/env.py identified."""

from __future__ import annotations

import copy
import os
import socket
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from launcher.train.env import RankEnv, bound_gpu, device_slot, process_env


def pick_device(requested: str, local_rank: int) -> torch.device:
    """This rank's device: on CUDA one of its own (env.device_slot), refused rather than shared."""
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("cluster.device=cuda but torch sees no CUDA device on this host")
        index = device_slot(os.environ, local_rank, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def rank_binding(device: torch.device) -> dict[str, Any]:
    """What this rank was given to run on (one entry of the record's `rank_bindings`): its host,
    the GPUs it sees and the one it is bound to, its CUDA device, and the CPUs it may run on.
    On a CPU trial device_index and device_name are null; CUDA_VISIBLE_DEVICES is still kept."""
    renv = process_env(os.environ)
    cuda = device.type == "cuda"
    return {
        "rank": renv.rank,
        "host": socket.gethostname(),
        "local_rank": renv.local_rank,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpu": bound_gpu(os.environ, renv.local_rank),
        "device_index": device.index if cuda else None,
        "device_name": torch.cuda.get_device_name(device) if cuda else None,
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
    }


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


def mesh_group_options(shape: tuple[int, ...], names: tuple[str, ...], timeout_s: float) -> dict[str, Any]:
    """init_device_mesh's `backend_override` that gives each sub-group of a mesh of `shape` over
    the initialised world the collective timeout `timeout_s`. Without it torch creates a mesh
    dim's groups with its own default (10 min on NCCL, 30 on gloo), whatever the world group was
    given. A dim spanning the whole world is left out: torch then reuses the world group (which
    has the timeout already) instead of opening a second communicator over every rank."""
    world, timeout = dist.get_world_size(), timedelta(seconds=timeout_s)
    return {name: _group_options(timeout) for name, size in zip(names, shape, strict=True) if size != world}


def _group_options(timeout: timedelta) -> Any:
    """Options for one new group: NCCL's, copied from the world group's own (what torch uses when
    given none; one copy per group, as torch's split modifies them), else gloo's, which only the
    timeout is read from; with `timeout`."""
    backend = dist.get_backend()
    if backend == "nccl":
        options = copy.deepcopy(dist.group.WORLD._get_backend(torch.device("cuda")).options)
    else:
        options = torch._C._distributed_c10d.Backend.Options(backend, timeout)
    options._timeout = timeout
    return options


def leave(code: int) -> None:
    """Exit with `code` once this rank's output is flushed, skipping the interpreter's teardown: how
    the trainer and the link probe end, once they have finished with the process group (a completed
    trial after its closing barrier). Tearing it down anyway (destroy_process_group, then the
    destructors at exit) is where a rank rarely aborted with SIGABRT or hung once its peer had gone,
    turning a completed record into a failed exit (pytorch/pytorch#75097). We register no atexit
    work, so nothing of ours is skipped."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
