"""sweep.profile=true: a torch.profiler trace of a few optimizer steps of the trial, for seeing
where a step's time goes (Perfetto, chrome://tracing, TensorBoard).

The traced steps run AFTER the timed ones, as extra steps: the timed window is then the same
with or without profiling, so no figure of the record carries the profiler's overhead, and the
traced steps are warm (compiled, allocator settled) as the timed ones were. They train on, so a
profiled trial's final parameters are those steps further on; its losses are the timed steps'.

Rank 0 alone records: every rank of a layout runs the same ops, one trace per trial keeps a
large sweep's folder small, and the name carries the rank so tracing more ranks stays a change
of which ranks, not of names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

WARMUP_STEPS = 1
"""Steps the profiler runs unrecorded first: its own start-up (CUPTI, buffers) lands there."""
ACTIVE_STEPS = 2
"""Steps recorded: two, so the boundary between consecutive steps (and what overlaps it) shows."""
TRACED_RANK = 0
"""The rank that records."""


def trace_name(rank: int) -> str:
    """The trace's file name in the trial folder. The `.pt.trace.json` ending is what TensorBoard's
    profiler plugin looks for (`--logdir <sweep>/trials` shows each trial as a run); Perfetto and
    chrome://tracing open it as it is."""
    return f"trace-rank{rank}.pt.trace.json"


def activities(device: torch.device) -> list[ProfilerActivity]:
    """CPU ops always; the GPU's kernels and copies on a CUDA (or ROCm) device."""
    return [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" else [])]


def trace_steps(
    step: Callable[[], Any], *, device: torch.device, rank: int, folder: Path | None, first_step: int
) -> dict[str, Any]:
    """Run WARMUP_STEPS + ACTIVE_STEPS more optimizer steps (`step()` runs one) on every rank,
    since their collectives need every rank; rank 0 records them into `folder`. Returns the
    record's `profile` entry, the same on every rank. `first_step`: the 0-based index the first
    extra step gets (the trial's step count: the timed steps are 0 … steps−1)."""
    path = folder / trace_name(TRACED_RANK) if folder is not None else None
    if path is not None and rank == TRACED_RANK:
        record(step, path, device)
    else:
        for _ in range(WARMUP_STEPS + ACTIVE_STEPS):
            step()
    return {
        "trace": path.name if path is not None else None,  # relative to the trial folder, where the record is
        "rank": TRACED_RANK,
        "steps": [first_step + WARMUP_STEPS, first_step + WARMUP_STEPS + ACTIVE_STEPS - 1],
        "activities": [a.name.lower() for a in activities(device)],
        "after_timed_steps": True,
    }


def record(step: Callable[[], Any], path: Path, device: torch.device) -> None:
    """Profile the steps and write the Chrome trace to `path`, atomically: a trial killed while
    exporting leaves no half-written file that a viewer would reject."""

    def export(prof: profile) -> None:
        partial = path.with_name(path.name + ".partial")
        prof.export_chrome_trace(str(partial))
        os.replace(partial, path)

    plan = schedule(wait=0, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1)
    # record_shapes: a matmul's sizes are what tell a reader which layer it is.
    with profile(activities=activities(device), schedule=plan, on_trace_ready=export, record_shapes=True) as prof:
        for _ in range(WARMUP_STEPS + ACTIVE_STEPS):
            step()  # no wait for the device between steps, as in the timed loop: overlap across steps shows
            prof.step()
