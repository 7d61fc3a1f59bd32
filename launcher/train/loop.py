"""The measured DDP training loop of one trial. Runs on every rank; returns rank 0's record."""

from __future__ import annotations

import os
import resource
import signal
import socket
import statistics
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ..config.schema import LauncherConfig, OptimConfig
from ..plan import Trial
from . import metrics
from .data import MicroBatches, build_dataset
from .dist import RankInfo, sync
from .models import build_model, flops_per_token, param_counts

COMM_WARMUP, COMM_ITERS, COMPUTE_ITERS = 2, 5, 3


def fault_step(spec: str | None, rank: int) -> int | None:
    """`LAUNCHER_FAULT=kill:RANK:STEP` — test hook: that rank SIGKILLs itself at that step."""
    if not spec:
        return None
    kind, fault_rank, step = spec.split(":")
    if kind != "kill":
        raise ValueError(f"LAUNCHER_FAULT={spec!r}: only kill:RANK:STEP is understood")
    return int(step) if int(fault_rank) == rank else None


def build_optimizer(o: OptimConfig, params, lr: float) -> torch.optim.Optimizer:
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay)
    return torch.optim.AdamW(params, lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay)


def lr_lambda(warmup_steps: int):
    if warmup_steps <= 0:
        return lambda step: 1.0
    return lambda step: min(1.0, (step + 1) / warmup_steps)


def peak_memory(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_max_rss"


def train(
    trial: Trial,
    cfg: LauncherConfig,
    info: RankInfo,
    device: torch.device,
    *,
    save_params: Path | None = None,
    log=print,
) -> dict[str, Any]:
    """Train `trial.steps` steps and measure; returns the metrics every rank agrees on."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model).to(device)
    n_params, n_non_embedding = param_counts(model)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = build_optimizer(cfg.optim, ddp.parameters(), trial.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.optim.warmup_steps))
    dataset = build_dataset(cfg.data, cfg.model, num_samples=trial.steps * trial.global_batch, seed=cfg.seed)
    batches = MicroBatches(dataset, trial.micro, trial.dp, info.rank, cfg.seed)
    kill_at = fault_step(os.environ.get("LAUNCHER_FAULT"), info.rank)
    vocab = cfg.model.vocab_size
    log_every = max(1, trial.steps // 10)

    def micro_step(batch: torch.Tensor) -> torch.Tensor:
        x, y = batch[:, :-1], batch[:, 1:]
        loss = F.cross_entropy(ddp(x).reshape(-1, vocab), y.reshape(-1)) / trial.accum
        loss.backward()
        return loss.detach()

    step_times: list[float] = []
    step_losses: list[torch.Tensor] = []
    batch = torch.empty(0)
    for step in range(trial.steps):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.perf_counter()
        loss = torch.zeros((), device=device)
        for k in range(trial.accum):
            batch = next(batches).to(device, non_blocking=True)
            # Gradients are all-reduced only on the last micro-step of the optimizer step.
            with ddp.no_sync() if k < trial.accum - 1 else nullcontext():
                loss += micro_step(batch)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        step_times.append(time.perf_counter() - start)
        step_losses.append(loss)
        if info.rank == 0 and (step % log_every == 0 or step == trial.steps - 1):
            log(f"step {step + 1}/{trial.steps} loss {loss.item():.4f} time {step_times[-1] * 1e3:.1f} ms", flush=True)

    if save_params is not None and info.rank == 0:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, save_params)

    # Mean loss of the global batch per step: one collective at the end, not one per step.
    losses = torch.stack(step_losses)
    dist.all_reduce(losses)
    losses = (losses / info.world_size).cpu().tolist()

    grad_numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
    grad_bytes = grad_numel * 4
    comm_s = time_allreduce(grad_numel, info.world_size, device)
    compute_s = time_compute(ddp, micro_step, batch, device) * trial.accum
    optimizer.zero_grad(set_to_none=True)

    mem, mem_kind = peak_memory(device)
    mine = {"host": socket.gethostname(), "step_times": step_times[trial.warmup_steps :], "peak_memory": mem}
    everyone: list[dict[str, Any]] = [None] * info.world_size  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)

    # A step ends when its slowest rank ends it.
    measured = [max(ts) for ts in zip(*(r["step_times"] for r in everyone), strict=True)]
    stats = metrics.step_stats(measured)
    thr = metrics.throughput(
        global_batch=trial.global_batch,
        seq_len=cfg.model.seq_len,
        step_time_s=stats["step_time_median_s"],
        devices=trial.world_size,
    )
    fpt = flops_per_token(cfg.model, n_non_embedding)
    rank_medians = [statistics.median(r["step_times"]) for r in everyone]
    return {
        "hosts": [r["host"] for r in everyone],
        "metrics": {
            **stats,
            **thr,
            "steps_measured": len(measured),
            "params": n_params,
            "params_non_embedding": n_non_embedding,
            "flops_per_token": fpt,
            "mfu": metrics.mfu(
                tokens_per_s=thr["tokens_per_s"],
                flops_per_token=fpt,
                peak_flops_per_device=cfg.cluster.peak_flops_per_device,
                devices=trial.world_size,
            ),
            "rank_step_time_median_s": rank_medians,
            "rank_spread": metrics.spread(rank_medians),
            "allreduce_bytes": grad_bytes,
            "allreduce_time_s": comm_s,
            **metrics.allreduce_bandwidth(nbytes=grad_bytes, seconds=comm_s, n=info.world_size),
            "compute_time_s": compute_s,
            "ccr": metrics.ccr(comm_s=comm_s, compute_s=compute_s),
            "peak_memory_bytes": max(r["peak_memory"] for r in everyone),
            "peak_memory_kind": mem_kind,
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "losses": losses,
        },
    }


def time_allreduce(numel: int, world_size: int, device: torch.device) -> float:
    """Median time of one all-reduce of the gradient's size (what DDP moves per step)."""
    if world_size < 2:
        return 0.0
    buf = torch.ones(numel, dtype=torch.float32, device=device)
    for _ in range(COMM_WARMUP):
        dist.all_reduce(buf)
    times = []
    for _ in range(COMM_ITERS):
        dist.barrier()
        sync(device)
        start = time.perf_counter()
        dist.all_reduce(buf)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_compute(ddp: DDP, micro_step, batch: torch.Tensor, device: torch.device) -> float:
    """Median forward+backward time of one micro-batch with gradient sync off: pure compute."""
    times = []
    with ddp.no_sync():
        for _ in range(COMPUTE_ITERS):
            sync(device)
            start = time.perf_counter()
            micro_step(batch)
            sync(device)
            times.append(time.perf_counter() - start)
    return statistics.median(times)
