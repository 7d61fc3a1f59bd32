"""After the training steps: what every rank measured, gathered into rank 0's record metrics.

Every function that runs a collective is called on every rank, in the same order.
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launcher.config.schema import LauncherConfig
from launcher.model.flops import flops_per_token
from launcher.train import metrics
from launcher.train.dist import sync
from launcher.train.engines.base import Engine
from launcher.trials.spec import Trial

COMM_WARMUP, COMM_ITERS = 2, 5


@dataclass(kw_only=True, frozen=True)
class Trained:
    """What the training steps hand to measurement: this rank's view."""

    start_step: int
    """Step this attempt resumed from (0 for a fresh run)."""
    step_times: list[float]
    """Seconds of each step this attempt ran, warm-up included."""
    step_losses: list[torch.Tensor]
    """Each step's mean loss on this rank; 0 on ranks that compute none."""
    has_loss: bool
    """Whether this rank computes a loss (a pipeline: only its last stage)."""
    last_batch: torch.Tensor | None
    """A micro-batch of the last step, to time compute alone; None when no step ran."""


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


def summarize(
    trained: Trained,
    *,
    trial: Trial,
    cfg: LauncherConfig,
    engine: Engine,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    params: tuple[int, int],
) -> dict[str, Any]:
    """`hosts` and `metrics` of the record, the same on every rank. `params`: (all, non-embedding)."""
    losses = mean_losses(trained, device)
    comm = time_comm(engine, device)
    compute = engine.compute_seconds(trained.last_batch)
    compute_s = compute * trial.accum if compute is not None else None
    optimizer.zero_grad(set_to_none=True)  # compute_seconds left gradients behind
    everyone = gather_ranks(trained, engine, device, warmup_steps=trial.warmup_steps)
    # A step ends when its slowest rank ends it.
    measured = [max(ts) for ts in zip(*(r["step_times"] for r in everyone), strict=True)]
    return {
        "hosts": [r["host"] for r in everyone],
        "metrics": {
            "resumed_from_step": trained.start_step,
            **speed_metrics(measured, everyone, trial=trial, cfg=cfg, params=params),
            **comm_metrics(comm),
            **machine_metrics(everyone, device),
            "compute_time_s": compute_s,
            "ccr": metrics.ccr(comm_s=comm.seconds, compute_s=compute_s) if compute_s is not None else None,
            "peak_memory_bytes": max(r["peak_memory"] for r in everyone),
            "peak_memory_kind": peak_memory(device)[1],
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "losses": losses,
            "layout": merge_layout_metrics([r["layout"] for r in everyone]),
        },
    }


def mean_losses(trained: Trained, device: torch.device) -> list[float]:
    """Mean loss of the global batch per step, over the ranks that compute one (every dp
    replica's last pipeline stage; tp ranks hold the same value, so they are counted once each too)."""
    losses = torch.stack(trained.step_losses).float()
    counted = torch.tensor([1.0 if trained.has_loss else 0.0], device=device)
    dist.all_reduce(losses)
    dist.all_reduce(counted)
    return (losses / counted).cpu().tolist()


def time_comm(engine: Engine, device: torch.device) -> Comm:
    numel, group = engine.comm_numel(), engine.comm_group()
    seconds = time_allreduce(numel, group, device) if numel else 0.0
    # Smaller messages too, so each trial alone separates the link's latency from its bandwidth.
    probe = [(n, time_allreduce(n, group, device)) for n in (numel // 64, numel // 8) if n]
    return Comm(numel=numel, seconds=seconds, probe=probe, ranks=dist.get_world_size(group) if numel else 1)


def gather_ranks(trained: Trained, engine: Engine, device: torch.device, *, warmup_steps: int) -> list[dict[str, Any]]:
    """Every rank's own figures, on every rank."""
    # Warm-up is excluded from each attempt (a resumed run warms up again), keeping ≥ 1 step.
    measured_from = min(warmup_steps, len(trained.step_times) - 1)
    mine = {"host": socket.gethostname(), "step_times": trained.step_times[measured_from:],
            "peak_memory": peak_memory(device)[0], "layout": engine.metrics(), "machine": machine_id(),
            "cpus": len(os.sched_getaffinity(0)), "threads": torch.get_num_threads()}  # fmt: skip
    everyone: list[dict[str, Any]] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    return everyone


def speed_metrics(
    measured: list[float], everyone: list[dict[str, Any]], *, trial: Trial, cfg: LauncherConfig, params: tuple[int, int]
) -> dict[str, Any]:
    """Step times, throughput, FLOPs and MFU, and how far the ranks' own medians spread."""
    stats = metrics.step_stats(measured)
    thr = metrics.throughput(global_batch=trial.global_batch, seq_len=cfg.model.seq_len,
                             step_time_s=stats["step_time_median_s"], devices=trial.world_size)  # fmt: skip
    fpt = flops_per_token(cfg.model, params[1])
    mfu = metrics.mfu(tokens_per_s=thr["tokens_per_s"], flops_per_token=fpt,
                      peak_flops_per_device=cfg.cluster.peak_flops_per_device, devices=trial.world_size)  # fmt: skip
    rank_medians = [statistics.median(r["step_times"]) for r in everyone]
    return {**stats, **thr, "steps_measured": len(measured), "params": params[0], "params_non_embedding": params[1],
            "flops_per_token": fpt, "mfu": mfu, "rank_step_time_median_s": rank_medians,
            "rank_spread": metrics.spread(rank_medians)}  # fmt: skip


def comm_metrics(comm: Comm) -> dict[str, Any]:
    points = [*comm.probe, (comm.numel, comm.seconds)]
    return {
        "allreduce_bytes": comm.numel * 4,
        "allreduce_time_s": comm.seconds,
        **metrics.allreduce_bandwidth(nbytes=comm.numel * 4, seconds=comm.seconds, n=comm.ranks),
        "allreduce_probe": [[comm.ranks, 4 * n, t] for n, t in points] if comm.ranks > 1 else [],
    }


def machine_metrics(everyone: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    return {
        "cpu_contention": cpu_contention(everyone) if device.type == "cpu" else 1.0,
        "machines": len({r["machine"] for r in everyone}),
        "cpus_per_machine": min(r["cpus"] for r in everyone),
        "threads_per_rank": max(r["threads"] for r in everyone),
    }


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, what they count) of this rank's peak memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_max_rss"


def merge_layout_metrics(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-rank layout figures → the record: lists per rank, plus the max of measured bubbles
    (the pipeline is as idle as its idlest rank) and the theory value."""
    out: dict[str, Any] = {}
    for key in sorted({k for r in per_rank for k in r}):
        values = [r.get(key) for r in per_rank]
        present = [v for v in values if v is not None]
        if key == "bubble_theory" or (present and not isinstance(present[0], float) and len(set(map(str, present))) == 1):
            out[key] = present[0] if present else None  # the same on every rank (schedule, stages, …)
        else:
            out[f"{key}_per_rank"] = values
            numeric = [v for v in values if isinstance(v, (int, float))]
            if numeric:
                out[key] = max(numeric)
    return out


def machine_id() -> str:
    """Which physical machine this rank runs on (Slurm "nodes" of a dev cluster may share one)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def cpu_contention(ranks: list[dict[str, Any]]) -> float:
    """How oversubscribed the busiest machine's cores are: Σ threads of its ranks ÷ its cores
    (≥ 1). CPU ranks that share cores slow each other; the performance model needs to know."""
    per_machine: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        per_machine.setdefault(r["machine"], []).append(r)
    return max(1.0, *(sum(r["threads"] for r in rs) / max(r["cpus"] for r in rs) for rs in per_machine.values()))


def time_allreduce(numel: int, group, device: torch.device) -> float:
    """Median time of one all-reduce of `numel` float32 elements over `group` (what DDP moves
    per step when it is the gradient's size); 0 for a group of one."""
    if dist.get_world_size(group) < 2:
        return 0.0
    buf = torch.ones(numel, dtype=torch.float32, device=device)
    for _ in range(COMM_WARMUP):
        dist.all_reduce(buf, group=group)
    times = []
    for _ in range(COMM_ITERS):
        dist.barrier(group=group)
        sync(device)
        start = time.perf_counter()
        dist.all_reduce(buf, group=group)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
