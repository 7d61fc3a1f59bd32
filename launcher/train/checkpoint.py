"""Checkpoints of a long run with torch.distributed.checkpoint (DCP): every rank writes its own
shards, so DDP, FSDP and tensor-parallel states all save and load the same way.

Saved periodically (`run.checkpoint_every` steps) and when Slurm's warning signal (USR1, sent
`cluster.signal_warning_s` before the time limit, or on preemption) arrives: the ranks agree at
the next step boundary and save, and the job script requeues the job. A
restarted job (SLURM_RESTART_COUNT ≥ 1, or any rerun of the same trial folder) loads the latest
checkpoint and carries on from its step with the same data order.

A rank that exits non-zero makes srun kill the others (--kill-on-bad-exit), so after a
checkpoint on USR1 every rank exits 0 and rank 0 leaves a marker, `checkpointed.attempt<N>`,
which tells the job script to requeue.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from launcher.io import atomic_write_json, read_json
from launcher.train.env import attempt

KEEP = 2  # checkpoints kept: the latest, and one before it in case the latest is cut short


class Preempted(Exception):
    """Raised after a checkpoint saved on USR1; the payload leaves the requeue marker and exits 0."""

    def __init__(self, step: int) -> None:
        super().__init__(f"checkpointed at step {step} on USR1; exiting for a requeue")
        self.step = step


class StopFlag:
    """Set by USR1 (Slurm's warning before the time limit, or preemption)."""

    def __init__(self) -> None:
        self.set = False

    def install(self) -> StopFlag:
        signal.signal(signal.SIGUSR1, lambda signum, frame: setattr(self, "set", True))
        return self


def latest(directory: Path) -> tuple[int, Path] | None:
    """(step, path) of the newest complete checkpoint, or None."""
    marker = directory / "latest.json"
    if not marker.exists():
        return None
    doc = read_json(marker)
    return int(doc["step"]), directory / doc["path"]


def save(directory: Path, step: int, module, optimizer) -> Path:
    """Every rank writes its shards of model and optimizer; rank 0 then points latest.json at them."""
    path = directory / f"step-{step:07d}"
    model_sd, optim_sd = get_state_dict(module, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))
    dist.barrier()  # every shard is on disk before the marker says so
    if dist.get_rank() == 0:
        atomic_write_json(directory / "latest.json", {"step": step, "path": path.name})
        for old in sorted(directory.glob("step-*"))[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return path


def load(path: Path, module, optimizer) -> None:
    model_sd, optim_sd = get_state_dict(module, optimizer)
    state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def requeue_marker(trial_dir: Path) -> Path:
    """The file the job script looks for to requeue itself (one per attempt)."""
    return trial_dir / f"checkpointed.attempt{attempt(os.environ)}"


def save_full_params(engine: Any, path: Path) -> None:
    """Rank 0 saves every parameter, complete, to `path` (--save-params: the parity tests).
    Collective. Only on request: the gather costs what the model weighs (a pipeline gathers every
    stage to rank 0's host, tensor parallel copies the whole model to each rank's host, FSDP
    gathers fp32 to rank 0), which at 8B parameters is an `oom` after training finished."""
    full = engine.full_state_dict()
    if full is not None:
        torch.save(full, path)
