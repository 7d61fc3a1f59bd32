"""After the training steps: what every rank measured, gathered into rank 0's record metrics (the
timed all-reduce: allreduce_probe.py).

Every function that runs a collective is called on every rank, in the same order.
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launcher.cgroup import own_cpu_quota
from launcher.compute.flops import flops_per_token, hardware_flops_per_token
from launcher.compute.fp8 import precision_peak
from launcher.compute.peaks import PeakChoice, math_dtype
from launcher.config.schema import LauncherConfig
from launcher.train import metrics, nvml
from launcher.train.allreduce_probe import comm_metrics, time_comm
from launcher.train.dist import rank_binding
from launcher.train.engines.base import Engine
from launcher.train.models.byo import HOST_BUILT, counted_flops_per_token, is_byo, tokens_per_sample
from launcher.trials.spec import Trial


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
    timing: str = "host_clock"
    """What `step_times` were read from: `cuda_events` or `host_clock` (loop.StepClock)."""


@dataclass(kw_only=True, frozen=True)
class MemoryPeaks:
    """This rank's memory high-water marks, read as training ends: before the full state dict
    and the communication probes, which allocate for the harness, not for the layout (FSDP's
    gradient-sized all-reduce probe holds a whole unsharded model's worth)."""

    host_rss_bytes: int
    """Peak resident set of the process (getrusage ru_maxrss), start-up included."""
    cuda_allocated_bytes: int | None
    """Peak bytes held in tensors on the GPU since warm-up ended (None on CPU)."""
    cuda_reserved_bytes: int | None
    """Peak bytes the caching allocator reserved on the GPU since warm-up ended (None on CPU)."""


def memory_peaks(device: torch.device) -> MemoryPeaks:
    """This rank's peaks now (call before any post-training probe)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if device.type != "cuda":
        return MemoryPeaks(host_rss_bytes=rss, cuda_allocated_bytes=None, cuda_reserved_bytes=None)
    return MemoryPeaks(
        host_rss_bytes=rss,
        cuda_allocated_bytes=torch.cuda.max_memory_allocated(device),
        cuda_reserved_bytes=torch.cuda.max_memory_reserved(device),
    )


def reset_memory_peak(device: torch.device) -> None:
    """Start the GPU peaks afresh (after warm-up: its one-off allocations are not the steady
    state's). The host's ru_maxrss cannot be reset and keeps the whole process's peak."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory_metrics(everyone: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    """The record's memory figures: the largest rank's, and every rank's host peak."""
    peaks = [MemoryPeaks(**r["memory"]) for r in everyone]
    cuda = device.type == "cuda"

    def largest(values: list[int | None]) -> int | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    allocated = largest([p.cuda_allocated_bytes for p in peaks])
    rss = [p.host_rss_bytes for p in peaks]
    return {
        "peak_memory_bytes": allocated if cuda and allocated is not None else max(rss),
        "peak_memory_kind": "cuda_max_allocated" if cuda else "cpu_max_rss",
        "cuda_peak_allocated_bytes": allocated,
        "cuda_peak_reserved_bytes": largest([p.cuda_reserved_bytes for p in peaks]),
        "host_peak_rss_bytes": max(rss),
        "host_peak_rss_bytes_per_rank": rss,
    }


def summarize(
    trained: Trained,
    *,
    trial: Trial,
    cfg: LauncherConfig,
    engine: Engine,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    params: tuple[int, int],
    memory: MemoryPeaks | None = None,
    gpu: nvml.Summary | None = None,
    flops_dir: Path | None = None,
) -> dict[str, Any]:
    """`hosts` and `metrics` of the record, the same on every rank. `params`: (all, non-embedding).
    `flops_dir`: the trial folder, whose sweep caches a `_target_` model's counted FLOPs.
    `memory`: this rank's peaks as training ended (None: read now, probes not yet run).
    `gpu`: NVML's readings of this rank's GPU over the timed steps (None: none were taken)."""
    memory = memory or memory_peaks(device)
    gpu = gpu or nvml.unavailable("no NVML sampler ran")
    losses = mean_losses(trained, device)
    comm = time_comm(engine, device)
    compute = engine.compute_seconds(trained.last_batch)
    compute_s = compute * trial.accum if compute is not None else None
    optimizer.zero_grad(set_to_none=True)  # compute_seconds left gradients behind
    everyone = gather_ranks(trained, engine, device, warmup_steps=trial.warmup_steps, memory=memory, gpu=gpu)
    # A step ends when its slowest rank ends it.
    measured = [max(ts) for ts in zip(*(r["step_times"] for r in everyone), strict=True)]
    peak = peak_of(cfg, device)
    return {
        "hosts": [r["host"] for r in everyone],
        "rank_bindings": [r["binding"] for r in everyone],  # host, GPU and CPUs each rank was given
        "metrics": {
            "resumed_from_step": trained.start_step,
            **speed_metrics(measured, everyone, trial=trial, cfg=cfg, params=params, peak=peak, flops_dir=flops_dir),
            **precision_metrics(cfg, device, peak, timing=trained.timing),
            **comm_metrics(comm),
            **machine_metrics(everyone, device),
            "compute_time_s": compute_s,
            "ccr": metrics.ccr(comm_s=comm.seconds, compute_s=compute_s) if compute_s is not None else None,
            **memory_metrics(everyone, device),
            "host_init_elements_per_rank": [r["host_init"] for r in everyone],
            "nvml": nvml.merge([r["nvml"] for r in everyone]),
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


def gather_ranks(
    trained: Trained, engine: Engine, device: torch.device, *, warmup_steps: int, memory: MemoryPeaks, gpu: nvml.Summary
) -> list[dict[str, Any]]:
    """Every rank's own figures, on every rank."""
    # Warm-up is excluded from each attempt (a resumed run warms up again), keeping ≥ 1 step.
    measured_from = min(warmup_steps, len(trained.step_times) - 1)
    quota = own_cpu_quota()
    mine = {
        "host": socket.gethostname(),
        "step_times": trained.step_times[measured_from:],
        "memory": asdict(memory),
        "layout": layout_metrics(engine),
        "machine": machine_id(),
        "cpus": len(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
        "cpu_quota": quota.cpus,
        "cpu_group": quota.group,
        "binding": rank_binding(device),
        "nvml": asdict(gpu),
        "host_init": sum(HOST_BUILT),  # byo.ReferenceValues: a `_target_` model's tensors without a rule
    }
    everyone: list[dict[str, Any]] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    return everyone


def layout_metrics(engine: Engine) -> dict[str, Any]:
    """The engine's layout figures, plus the bytes its tensor-parallel collectives moved per step
    where it timed them (engines/tp.py sets `tp_collective_bytes` while measuring): with their
    time and count, what the performance model fits the tp link on."""
    out = engine.metrics()
    nbytes = getattr(engine, "tp_collective_bytes", None)
    if nbytes is not None:
        out["tp_collective_bytes_per_step"] = int(nbytes)
    return out


def speed_metrics(
    measured: list[float],
    everyone: list[dict[str, Any]],
    *,
    trial: Trial,
    cfg: LauncherConfig,
    params: tuple[int, int],
    peak: PeakChoice,
    flops_dir: Path | None = None,
) -> dict[str, Any]:
    """Step times, throughput, FLOPs, MFU (model FLOPs) and HFU (hardware FLOPs: activation
    checkpointing's recompute too), and how far the ranks' own medians spread."""
    stats = metrics.step_stats(measured)
    thr = metrics.throughput(
        global_batch=trial.global_batch,
        seq_len=tokens_per_sample(cfg.model),
        step_time_s=stats["step_time_median_s"],
        devices=trial.world_size,
    )
    if is_byo(cfg.model):  # no formula for your own model: torch's FLOP counter (model/flop_count.py)
        fpt = hw = counted_flops_per_token(cfg.model, trial.micro, flops_dir)
    else:
        fpt, hw = flops_per_token(cfg.model, params[1]), hardware_flops_per_token(cfg.model, params[1])
    mfu, hfu = (
        metrics.mfu(
            tokens_per_s=thr["tokens_per_s"],
            flops_per_token=f,
            peak_flops_per_device=peak.flops,
            devices=trial.world_size,
        )
        for f in (fpt, hw)
    )
    rank_medians = [statistics.median(r["step_times"]) for r in everyone]
    return {
        **stats,
        **thr,
        "tokens_per_sample": tokens_per_sample(cfg.model),
        "steps_measured": len(measured),
        "params": params[0],
        "params_non_embedding": params[1],
        "flops_per_token": fpt,
        "hardware_flops_per_token": hw,
        "mfu": mfu,
        "hfu": hfu,
        "rank_step_time_median_s": rank_medians,
        "rank_spread": metrics.spread(rank_medians),
    }


def peak_of(cfg: LauncherConfig, device: torch.device) -> PeakChoice:
    """The peak MFU divides by: the peak table's for the GPU torch detects at the precision its
    matmuls ran in, unless cluster.device_name (same peaks) or cluster.peak_flops_per_device says
    otherwise (compute/peaks.py: choose_peak); on CPU no table row applies (MFU null unless set)."""
    cuda = device.type == "cuda"
    return precision_peak(  # fp8: the blend of its fp8 and bf16 peaks (compute/fp8.py)
        device_name=cfg.cluster.device_name if cuda else None,
        dtype=matmul_dtype(cfg, device),
        explicit=cfg.cluster.peak_flops_per_device,
        model=cfg.model,
        detected=torch.cuda.get_device_name(device) if cuda else None,
    )


def recorded_device_name(cfg: LauncherConfig, device: torch.device) -> str:
    """The record's `device_name`: the GPU torch detects on CUDA, as peak_of's peak follows it
    (cluster.device_name may name another; the peak's mismatch line says so), else cluster.device_name."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cfg.cluster.device_name


def matmul_dtype(cfg: LauncherConfig, device: torch.device) -> str:
    """bf16/fp16, or for fp32: tf32 where the payload enabled it on an NVIDIA GPU (loop.with_precision).
    ROCm runs fp32 matmuls in fp32 unless told otherwise by its own switches, so it counts as fp32."""
    tf32 = device.type == "cuda" and torch.version.hip is None and torch.backends.cuda.matmul.allow_tf32
    return math_dtype(str(cfg.precision), tf32=tf32)


def precision_metrics(cfg: LauncherConfig, device: torch.device, peak: PeakChoice, *, timing: str) -> dict[str, Any]:
    """What precision ran and which peak MFU used, so a record says what its MFU means."""
    return {
        "precision": str(cfg.precision),
        "matmul_dtype": matmul_dtype(cfg, device),
        "cuda_device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "peak_flops_per_device": peak.flops,
        "peak_source": peak.source,
        "peak_device": peak.device,
        "peak_mismatch": peak.mismatch,
        "step_timing": timing,
    }


def machine_metrics(everyone: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    return {
        "cpu_contention": cpu_contention(everyone) if device.type == "cpu" else 1.0,
        "machines": len({r["machine"] for r in everyone}),
        "cpus_per_machine": min(r["cpus"] for r in everyone),
        "threads_per_rank": max(r["threads"] for r in everyone),
        # CPUs' worth of time each rank's cgroup allowed (shared by the ranks in one cgroup); None: no quota.
        "cpu_quota_per_rank": [r["cpu_quota"] for r in everyone],
    }


def merge_layout_metrics(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-rank layout figures → the record: lists per rank, plus the max of measured bubbles
    (the pipeline is as idle as its idlest rank) and the theory value."""
    out: dict[str, Any] = {}
    for key in sorted({k for r in per_rank for k in r}):
        values = [r.get(key) for r in per_rank]
        present = [v for v in values if v is not None]
        if key == "bubble_theory" or (
            present and not isinstance(present[0], float) and len(set(map(str, present))) == 1
        ):
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
    """How oversubscribed the busiest machine's cores are (≥ 1): the CPU its ranks can demand ÷ its
    cores. A rank demands its threads, but the ranks in one cgroup with a CPU quota together no more
    than the quota (`cpu_group`, `cpu_quota`: cgroup.py), so Σ over the machine's groups of
    min(threads in group, quota) ÷ cores. CPU ranks that share cores slow each other as the number
    grows, the performance model needs to know; a node held to a fixed share does not."""
    per_machine: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        per_machine.setdefault(r["machine"], []).append(r)
    worst = 1.0
    for rs in per_machine.values():
        groups: dict[str, list[float]] = {}  # cgroup → [quota, threads]
        demand = 0.0
        for r in rs:
            if r.get("cpu_quota") is None:
                demand += r["threads"]
            else:
                groups.setdefault(r["cpu_group"], [r["cpu_quota"], 0])[1] += r["threads"]
        demand += sum(min(threads, quota) for quota, threads in groups.values())
        worst = max(worst, demand / max(r["cpus"] for r in rs))
    return round(worst, 6)
