"""The timed all-reduce of the layout's gradient-sized message, and smaller ones beside it, that a
trial's record carries (allreduce_*): what the performance model fits the data-parallel link on.

Collective: every rank calls these with the same sizes, in the same order (measure.summarize does).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from launcher.train import metrics
from launcher.train.dist import sync
from launcher.train.engines.base import Engine

COMM_WARMUP, COMM_ITERS = 2, 5


@dataclass(kw_only=True, frozen=True)
class Comm:
    """The timed all-reduce of the layout's gradient-sized message (DDP: the gradient)."""

    numel: int
    """Float32 elements per all-reduce (0: the layout has none to time)."""
    seconds: float
    """Median time of one all-reduce of `numel` elements (0 for a group of one)."""
    probe: list[tuple[int, float]]
    """(elements, seconds) of smaller all-reduces: latency apart from bandwidth."""
    ranks: int
    """Ranks in the timed group (1 when nothing is timed)."""


def time_comm(engine: Engine, device: torch.device) -> Comm:
    numel, group = engine.comm_numel(), engine.comm_group()
    seconds = time_allreduce(numel, group, device) if numel else 0.0
    # Smaller messages too, so each trial alone separates the link's latency from its bandwidth.
    probe = [(n, time_allreduce(n, group, device)) for n in (numel // 64, numel // 8) if n]
    return Comm(numel=numel, seconds=seconds, probe=probe, ranks=dist.get_world_size(group) if numel else 1)


def comm_metrics(comm: Comm) -> dict[str, Any]:
    points = [*comm.probe, (comm.numel, comm.seconds)]
    return {
        "allreduce_bytes": comm.numel * 4,
        "allreduce_time_s": comm.seconds,
        **metrics.allreduce_bandwidth(nbytes=comm.numel * 4, seconds=comm.seconds, n=comm.ranks),
        "allreduce_probe": [[comm.ranks, 4 * n, t] for n, t in points] if comm.ranks > 1 else [],
    }


def time_allreduce(numel: int, group, device: torch.device) -> float:
    """Median time of an all-reduce of `numel` float32 elements over `group` (what DDP moves per
    step when it is the gradient's size); 0 for a group of one. On a GPU the message goes in
    chunks that fit the memory left (as DDP's buckets do), so the probe of an FSDP model's whole
    gradient size cannot turn a finished run into an out-of-memory one."""
    if dist.get_world_size(group) < 2:
        return 0.0
    chunk = _probe_chunk(numel, group, device)
    buf = torch.ones(chunk, dtype=torch.float32, device=device)
    pieces = [buf[: min(chunk, numel - i)] for i in range(0, numel, chunk)]
    for _ in range(COMM_WARMUP):
        dist.all_reduce(pieces[0], group=group)
    times = []
    for _ in range(COMM_ITERS):
        dist.barrier(group=group)
        sync(device)
        start = time.perf_counter()
        for piece in pieces:
            dist.all_reduce(piece, group=group)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _probe_chunk(numel: int, group, device: torch.device) -> int:
    """Elements per all-reduce of the probe: all of them on CPU; on a GPU at most half the memory
    free on the emptiest rank (every rank must issue the same collectives, so they agree on it)."""
    if device.type != "cuda":
        return numel
    free, _ = torch.cuda.mem_get_info(device)
    fits = torch.tensor([max(1, min(numel, free // 2 // 4))], dtype=torch.int64, device=device)
    dist.all_reduce(fits, op=dist.ReduceOp.MIN, group=group)
    return int(fits.item())
