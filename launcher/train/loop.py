"""The measured DDP training loop of one trial. Runs on every rank; returns rank 0's record."""

from __future__ import annotations

import os
import resource
import signal
import socket
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launcher.config.schema import LauncherConfig, OptimConfig
from launcher.model.flops import flops_per_token
from launcher.trials.spec import Trial
from launcher.train import metrics
from launcher.train.data import MicroBatches, build_dataset
from launcher.train.dist import RankInfo, sync
from launcher.train.models import build_model, param_counts

COMM_WARMUP, COMM_ITERS = 2, 5


def fault_step(spec: str | None, rank: int) -> int | None:
    """`LAUNCHER_FAULT=kill:RANK:STEP` — test hook: that rank SIGKILLs itself at that step."""
    if not spec:
        return None
    kind, fault_rank, step = spec.split(":")
    if kind != "kill":
        raise ValueError(f"LAUNCHER_FAULT={spec!r}: only kill:RANK:STEP is understood")
    return int(step) if int(fault_rank) == rank else None


class NonFiniteLoss(Exception):
    """The loss became NaN or inf: the trial stops at that step instead of training on garbage."""

    def __init__(self, step: int, total: int) -> None:
        super().__init__(f"loss became NaN/inf at step {step} of {total}; stopped early")
        self.step = step


def build_optimizer(o: OptimConfig, params, lr: float, foreach: bool = True) -> torch.optim.Optimizer:
    foreach = None if foreach else False  # None: torch's own choice where foreach is allowed
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay, foreach=foreach)
    return torch.optim.AdamW(params, lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, foreach=foreach)


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
    checkpoint_dir: Path | None = None,
    stop: Any = None,
    log=print,
) -> dict[str, Any]:
    """Train `trial.steps` steps and measure; returns the metrics every rank agrees on.
    With `checkpoint_dir`: resume from its latest checkpoint, save every
    `trial.checkpoint_every` steps, and on `stop.set` (USR1) save and raise Preempted."""
    from launcher.train import checkpoint as ckpt
    from launcher.train.engines import build_engine
    from launcher.train.engines.base import Topology

    topo = Topology.build(trial, info.rank, device)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model).to(device)  # the same full model on every rank; layouts cut it up
    n_params, n_non_embedding = param_counts(model)
    engine = build_engine(model, topo, cfg, device)
    optimizer = build_optimizer(cfg.optim, engine.parameters(), trial.lr, foreach=engine.foreach_optimizer)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.optim.warmup_steps))
    dataset = build_dataset(cfg.data, cfg.model, num_samples=trial.steps * trial.global_batch, seed=cfg.seed)
    batches = MicroBatches(dataset, trial.micro, trial.dp, topo.dp_rank, cfg.seed)
    kill_at = fault_step(os.environ.get("LAUNCHER_FAULT"), info.rank)
    log_every = max(1, trial.steps // 10)
    start_step = 0
    found = ckpt.latest(checkpoint_dir) if checkpoint_dir is not None else None
    if found is not None:
        start_step, path = found
        ckpt.load(path, engine.checkpoint_module(), optimizer)
        with warnings.catch_warnings():  # stepping the schedule to where it was, without optimizer steps
            warnings.simplefilter("ignore")
            for _ in range(start_step):
                schedule.step()
        for _ in range(start_step * trial.accum):  # the same data order as an uninterrupted run
            next(batches)
        if info.rank == 0:
            log(f"resumed from {path.name}: step {start_step} of {trial.steps}", flush=True)

    step_times: list[float] = []
    step_losses: list[torch.Tensor] = []
    has_loss = False
    micro_batches: list[torch.Tensor] = []
    for step in range(start_step, trial.steps):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.perf_counter()
        micro_batches = [next(batches) for _ in range(trial.accum)]
        loss = engine.forward_backward(micro_batches)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        step_times.append(time.perf_counter() - start)
        has_loss = loss is not None
        step_losses.append(loss if has_loss else torch.zeros((), device=device))
        if has_loss and topo.dp_rank == 0 and topo.tp_rank == 0 and (step % log_every == 0 or step == trial.steps - 1):
            log(f"step {step + 1}/{trial.steps} loss {loss.item():.4f} time {step_times[-1] * 1e3:.1f} ms", flush=True)
        elif info.rank == 0 and not has_loss and (step % log_every == 0 or step == trial.steps - 1):
            log(f"step {step + 1}/{trial.steps} time {step_times[-1] * 1e3:.1f} ms", flush=True)
        # Outside the timed step: every rank learns whether any loss went bad or USR1 arrived.
        control = torch.tensor([0.0 if not has_loss or bool(torch.isfinite(loss)) else 1.0,
                                1.0 if stop is not None and stop.set else 0.0], device=device)  # fmt: skip
        dist.all_reduce(control, op=dist.ReduceOp.MAX)
        if control[0] > 0:
            raise NonFiniteLoss(step + 1, trial.steps)
        done = step + 1
        every = trial.checkpoint_every
        if checkpoint_dir is not None and (control[1] > 0 or (every and done % every == 0 and done < trial.steps)):
            path = ckpt.save(checkpoint_dir, done, engine.checkpoint_module(), optimizer)
            if info.rank == 0:
                log(f"checkpoint {path.name} saved", flush=True)
            if control[1] > 0:
                raise ckpt.Preempted(done)

    full = engine.full_state_dict()
    if save_params is not None and full is not None:
        torch.save(full, save_params)

    # Mean loss of the global batch per step, over the ranks that compute one (every dp replica's
    # last pipeline stage; tp ranks hold the same value, so they are counted once each too).
    losses = torch.stack(step_losses).float()
    counted = torch.tensor([1.0 if has_loss else 0.0], device=device)
    dist.all_reduce(losses)
    dist.all_reduce(counted)
    losses = (losses / counted).cpu().tolist()

    comm_numel = engine.comm_numel()
    comm_s = time_allreduce(comm_numel, engine.comm_group(), device) if comm_numel else 0.0
    # Smaller messages too, so each trial alone separates the link's latency from its bandwidth.
    probe = [(n, time_allreduce(n, engine.comm_group(), device)) for n in (comm_numel // 64, comm_numel // 8) if n]
    compute = engine.compute_seconds(micro_batches[-1])
    compute_s = compute * trial.accum if compute is not None else None
    optimizer.zero_grad(set_to_none=True)
    comm_n = dist.get_world_size(engine.comm_group()) if comm_numel else 1

    mem, mem_kind = peak_memory(device)
    # Warm-up is excluded from each attempt (a resumed run warms up again), keeping ≥ 1 step.
    measured_from = min(trial.warmup_steps, len(step_times) - 1)
    mine = {"host": socket.gethostname(), "step_times": step_times[measured_from:], "peak_memory": mem,
            "layout": engine.metrics(), "machine": machine_id(), "cpus": len(os.sched_getaffinity(0)),
            "threads": torch.get_num_threads()}  # fmt: skip
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
            "resumed_from_step": start_step,
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
            "allreduce_bytes": comm_numel * 4,
            "allreduce_time_s": comm_s,
            **metrics.allreduce_bandwidth(nbytes=comm_numel * 4, seconds=comm_s, n=comm_n),
            "allreduce_probe": [[comm_n, 4 * n, t] for n, t in [*probe, (comm_numel, comm_s)]] if comm_n > 1 else [],
            "cpu_contention": cpu_contention(everyone) if device.type == "cpu" else 1.0,
            "machines": len({r["machine"] for r in everyone}),
            "cpus_per_machine": min(r["cpus"] for r in everyone),
            "threads_per_rank": max(r["threads"] for r in everyone),
            "compute_time_s": compute_s,
            "ccr": metrics.ccr(comm_s=comm_s, compute_s=compute_s) if compute_s is not None else None,
            "peak_memory_bytes": max(r["peak_memory"] for r in everyone),
            "peak_memory_kind": mem_kind,
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "losses": losses,
            "layout": merge_layout_metrics([r["layout"] for r in everyone]),
        },
    }


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
