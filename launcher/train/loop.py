"""The measured training loop of one trial. Runs on every rank; returns the record's metrics.

train() = build → resume → steps → save parameters → measure (launcher/train/measure.py).
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launcher.compute.peaks import resolve_precision
from launcher.config.schema import LauncherConfig, OptimConfig
from launcher.config.validate_precision import check_fp8_capability, check_precision_device
from launcher.train import checkpoint as ckpt
from launcher.train import clipping, faults, float8, measure, nvml, trace, windows
from launcher.train.compiling import CompileClock, compile_failures, compile_metrics, compile_model
from launcher.train.data import MicroBatches, build_dataset
from launcher.train.engines import build_engine
from launcher.train.engines.base import Engine, Topology
from launcher.train.env import RankEnv
from launcher.train.models import build_model, param_counts
from launcher.trials.spec import Trial


class NonFiniteLoss(Exception):
    """The loss became NaN or inf: the trial stops at that step instead of training on garbage."""

    def __init__(self, step: int, total: int) -> None:
        super().__init__(f"loss became NaN/inf at step {step} of {total}; stopped early")
        self.step = step


@dataclass(kw_only=True, frozen=True)
class Run:
    """What one rank trains with: built the same way on every rank."""

    trial: Trial
    """The trial spec (steps, batch split, degrees)."""
    cfg: LauncherConfig
    """The resolved config the trial belongs to."""
    renv: RankEnv
    """This process's rank, local rank and world size."""
    device: torch.device
    """Where this rank computes."""
    topo: Topology
    """This rank's coordinates in the (dp, pp, tp) mesh."""
    engine: Engine
    """The layout's forward/backward over this rank's part of the model."""
    optimizer: torch.optim.Optimizer
    """Over this rank's parameters."""
    schedule: torch.optim.lr_scheduler.LambdaLR
    """Learning-rate warm-up."""
    batches: MicroBatches
    """This rank's dp coordinate's micro-batches, in the seed's order."""
    params: tuple[int, int]
    """(all, non-embedding) parameters of the full model, counted before a layout cuts it up."""
    checkpoint_dir: Path | None
    """Where checkpoints go (None: a sweep trial, never checkpointed)."""
    stop: ckpt.StopFlag | None
    """Set by USR1; None where USR1 does not stop the run (a sweep trial runs on to its end)."""
    log: Callable[..., None]
    """print, or a test's stand-in."""
    compile_clock: CompileClock | None = None
    """train.compile: times the compilations, booked to the step they ran in; None: not compiled."""
    compiled_units: int = 0
    """Modules compiled in place (compiling.compile_units)."""
    grad_norms: list[torch.Tensor] = dataclasses.field(default_factory=list)
    """Each optimizer step's global gradient norm before clipping (optim.clip_grad_norm on), on
    the device: read once, after the timed steps."""
    fp8_scales: float8.ScalePrecompute | None = None
    """precision=fp8 under FSDP: the fp8 weights' scales, precomputed after each optimizer step."""


def train(
    trial: Trial,
    cfg: LauncherConfig,
    renv: RankEnv,
    device: torch.device,
    *,
    save_params: Path | None = None,
    checkpoint_dir: Path | None = None,
    stop: ckpt.StopFlag | None = None,
    log: Callable[..., None] = print,
    trace_dir: Path | None = None,
) -> dict[str, Any]:
    """Train `trial.steps` steps and measure; returns the metrics every rank agrees on.
    `trace_dir`: the trial folder: sweep.profile=true's trace goes there, and a `_target_` model's
    counted FLOPs are cached in its sweep's folder.
    With `checkpoint_dir`: resume from its latest checkpoint, save every
    `trial.checkpoint_every` steps, and on `stop.set` (USR1) save and raise Preempted."""
    cfg = with_precision(cfg, device)
    run = build(trial, cfg, renv, device, checkpoint_dir=checkpoint_dir, stop=stop, log=log)
    with nvml.sampling(device) as gpu:  # this rank's GPU as NVML sees it, read on a background thread
        trained = run_steps(run, start_step=resume(run))
    memory = measure.memory_peaks(device)  # before the full state and the probes allocate for the harness
    clipped = clipping.metrics(run.grad_norms, cfg.optim.clip_grad_norm)  # the timed steps' (profile's come after)
    fp8 = float8.metrics(run.fp8_scales)
    compiled = compile_metrics(
        run.compile_clock,
        units=run.compiled_units,
        device=device,
        first_timed_step=trained.start_step + trial.warmup_steps,
    )
    traced = {}
    if cfg.sweep.profile:  # extra steps after the timed ones, traced (trace.py): no timed figure includes them
        traced["profile"] = trace.trace_steps(
            lambda: optimizer_step(run, [next(run.batches) for _ in range(trial.accum)]),
            device=device,
            rank=renv.rank,
            folder=trace_dir,
            first_step=trial.steps,
        )
    if save_params is not None:  # every rank has the same argv: all of them take part, or none
        ckpt.save_full_params(run.engine, save_params)
    out = {
        **measure.summarize(
            trained,
            trial=trial,
            cfg=cfg,
            engine=run.engine,
            optimizer=run.optimizer,
            device=device,
            params=run.params,
            memory=memory,
            gpu=gpu[0],
            flops_dir=trace_dir,
        ),
        **traced,
    }
    out["metrics"].update(compiled | clipped | fp8)
    return out


def with_precision(cfg: LauncherConfig, device: torch.device) -> LauncherConfig:
    """`cfg` with `precision: auto` resolved for this device (bf16 on CUDA, fp32 on CPU). An fp32
    run on CUDA computes matmuls and convolutions in TF32, as production fp32 training does:
    strict fp32 would leave the tensor cores idle and measure a slower machine than anyone runs."""
    precision = resolve_precision(cfg.precision, device.type)
    check_precision_device(precision, device.type)  # cluster.device=auto that found a GPU
    if device.type == "cuda" and precision == "fp8":  # fp8 tensor cores: compute capability ≥ 8.9
        check_fp8_capability(precision, torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
    if device.type == "cuda" and precision == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return dataclasses.replace(cfg, precision=precision)


def build(
    trial: Trial,
    cfg: LauncherConfig,
    renv: RankEnv,
    device: torch.device,
    *,
    checkpoint_dir: Path | None,
    stop: ckpt.StopFlag | None,
    log: Callable[..., None],
) -> Run:
    topo = Topology.build(trial, renv.rank, device, timeout_s=cfg.cluster.pg_timeout_s)
    torch.manual_seed(cfg.seed)
    with torch.device("meta"):  # nothing allocated: the engine materialises only this rank's part
        model = build_model(cfg.model)
    params = param_counts(model)
    if cfg.precision == "fp8":  # before compile and the layout wrap it, as torchtitan converts
        float8.convert(model, cfg)
    units = compile_model(model, cfg) if cfg.train.compile else 0  # in place, before the layout wraps it
    engine = build_engine(model, topo, cfg, device)
    optimizer = build_optimizer(cfg.optim, engine.parameters(), trial.lr, foreach=engine.foreach_optimizer)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.optim.warmup_steps))
    dataset = build_dataset(cfg.data, cfg.model, num_samples=trial.steps * trial.global_batch, seed=cfg.seed)
    batches = MicroBatches(dataset, trial.micro, trial.dp, topo.dp_rank, cfg.seed)
    return Run(
        trial=trial,
        cfg=cfg,
        renv=renv,
        device=device,
        topo=topo,
        engine=engine,
        optimizer=optimizer,
        schedule=schedule,
        batches=batches,
        params=params,
        checkpoint_dir=checkpoint_dir,
        stop=stop,
        log=log,
        compile_clock=CompileClock() if units else None,
        compiled_units=units,
        fp8_scales=float8.precompute_after_steps(model, optimizer, cfg),
    )


def build_optimizer(o: OptimConfig, params, lr: float, foreach: bool = True) -> torch.optim.Optimizer:
    foreach = None if foreach else False  # None: torch's own choice where foreach is allowed
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.momentum, weight_decay=o.weight_decay, foreach=foreach)
    return torch.optim.AdamW(params, lr=lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, foreach=foreach)


def lr_lambda(warmup_steps: int):
    if warmup_steps <= 0:
        return lambda step: 1.0
    return lambda step: min(1.0, (step + 1) / warmup_steps)


def resume(run: Run) -> int:
    """Load the latest checkpoint, if any, and return the step it was saved at (0: none)."""
    found = ckpt.latest(run.checkpoint_dir) if run.checkpoint_dir is not None else None
    if found is None:
        return 0
    start_step, path = found
    ckpt.load(path, run.engine.checkpoint_module(), run.optimizer)
    with warnings.catch_warnings():  # stepping the schedule to where it was, without optimizer steps
        warnings.simplefilter("ignore")
        for _ in range(start_step):
            run.schedule.step()
    run.batches.skip(start_step * run.trial.accum)  # the same data order as an uninterrupted run
    if run.renv.rank == 0:
        run.log(f"resumed from {path.name}: step {start_step} of {run.trial.steps}", flush=True)
    return start_step


class StepClock:
    """Marks step boundaries without waiting for the device. CUDA: an event on the current
    stream (where the step's kernels queue), read once the window's last one has completed.
    CPU: perf_counter, since CPU ops (gloo collectives included) are done when they return."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Each step's seconds, between consecutive marks (on CUDA this waits for the last mark)."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def timing_kind(device: torch.device) -> str:
    """What the recorded step times were read from."""
    return "cuda_events" if device.type == "cuda" else "host_clock"


def run_steps(run: Run, *, start_step: int) -> measure.Trained:
    """The timed optimizer steps, from `start_step` to the trial's end, window by window."""
    fault = faults.fault_step(os.environ.get("LAUNCHER_FAULT"), run.renv.rank)
    every = run.trial.checkpoint_every if run.checkpoint_dir is not None else 0
    vote_every = windows.vote_every_s(run.cfg.cluster.signal_warning_s if run.stop is not None else None)
    slowest: float | None = None  # the last window's slowest step, every rank's
    step_times: list[float] = []
    step_losses: list[torch.Tensor] = []
    has_loss = False
    last: list[torch.Tensor] = []
    step = start_step
    while step < run.trial.steps:
        end = windows.window_end(step, run.trial.steps, every, windows.window_steps(slowest, vote_every))
        with compile_failures(enabled=run.compile_clock is not None):
            times, losses, last = run_window(run, step, end, fault)
        has_loss = any(loss is not None for loss in losses)
        step_times += times
        step_losses += [loss if loss is not None else torch.zeros((), device=run.device) for loss in losses]
        log_window(run, step, losses, times)
        slowest = after_window(run, step, losses, times)
        step = end
    return measure.Trained(
        start_step=start_step,
        step_times=step_times,
        step_losses=step_losses,
        has_loss=has_loss,
        last_batch=last[-1] if last else None,
        timing=timing_kind(run.device),
    )


def run_window(
    run: Run, start: int, end: int, fault: tuple[str, int] | None
) -> tuple[list[float], list[torch.Tensor | None], list[torch.Tensor]]:
    """Steps start..end−1, none waiting for the device; (each step's seconds, each step's loss,
    the last step's micro-batches). A step's time includes fetching its batches."""
    clock = StepClock(run.device)
    losses: list[torch.Tensor | None] = []
    micro_batches: list[torch.Tensor] = []
    clock.mark()
    for step in range(start, end):
        if fault is not None and step == fault[1]:
            faults.inject_fault(fault[0])
        if step == run.trial.warmup_steps:
            measure.reset_memory_peak(run.device)  # GPU peaks of the steady state, not warm-up's one-offs
            nvml.timed_window_starts()
        if run.compile_clock is not None:
            run.compile_clock.step = step
        micro_batches = [next(run.batches) for _ in range(run.trial.accum)]
        losses.append(optimizer_step(run, micro_batches))
        clock.mark()
    return clock.seconds(), losses, micro_batches


def optimizer_step(run: Run, micro_batches: list[torch.Tensor]) -> torch.Tensor | None:
    """One timed step; returns this rank's loss (None on ranks that compute none), still on the
    device: nothing here waits for the device to finish."""
    loss = run.engine.forward_backward(micro_batches)
    max_norm = run.cfg.optim.clip_grad_norm
    if clipping.enabled(max_norm):
        run.grad_norms.append(
            clipping.clip_grad_norm(
                run.engine.parameters(),
                max_norm,
                pp_group=run.engine.grad_norm_group(),
                experts=run.engine.grad_norm_experts(),
            )
        )
    run.optimizer.step()
    run.schedule.step()
    run.optimizer.zero_grad(set_to_none=True)
    return loss


def log_window(run: Run, start: int, losses: list[torch.Tensor | None], times: list[float]) -> None:
    """The window's log lines, written after it: printing a loss mid-window would wait for the device."""
    for i, (loss, seconds) in enumerate(zip(losses, times, strict=True)):
        log_step(run, start + i, loss, seconds)


def log_step(run: Run, step: int, loss: torch.Tensor | None, seconds: float) -> None:
    """About 10 lines a trial; the launcher reads its progress from `step N/M`."""
    steps = run.trial.steps
    if step % max(1, steps // 10) != 0 and step != steps - 1:
        return
    if loss is not None and run.topo.dp_rank == 0 and run.topo.tp_rank == 0:
        run.log(f"step {step + 1}/{steps} loss {loss.item():.4f} time {seconds * 1e3:.1f} ms", flush=True)
    elif loss is None and run.renv.rank == 0:  # rank 0 holds an early pipeline stage: no loss to show
        run.log(f"step {step + 1}/{steps} time {seconds * 1e3:.1f} ms", flush=True)


def after_window(run: Run, start: int, losses: list[torch.Tensor | None], times: list[float]) -> float:
    """Outside the timed steps: every rank learns whether a loss of the window went bad, and at
    which step, or whether USR1 arrived, so all of them stop, or checkpoint, at the same step.
    Returns the window's slowest step on any rank (the next window's length: windows.window_steps)."""
    never = run.trial.steps + 1
    seen = first_nonfinite(losses)
    bad = start + seen + 1 if seen is not None else never  # steps done when the loss went bad
    stop = run.stop is not None and run.stop.set
    # MAX over the negated step: the earliest bad step on any rank; MAX over the flags: any rank's USR1.
    slowest_us = int(max(times, default=0.0) * 1e6)
    control = torch.tensor([-bad, int(stop), slowest_us], dtype=torch.int64, device=run.device)
    dist.all_reduce(control, op=dist.ReduceOp.MAX)
    neg_bad, stopping, slowest_us = control.tolist()
    if -neg_bad != never:
        raise NonFiniteLoss(-neg_bad, run.trial.steps)
    checkpoint(run, start + len(losses), stopping=bool(stopping))
    return slowest_us / 1e6


def first_nonfinite(losses: list[torch.Tensor | None]) -> int | None:
    """Index of the window's first NaN/inf loss (one wait for the device), None when all are finite."""
    present = [(i, loss) for i, loss in enumerate(losses) if loss is not None]
    if not present:
        return None
    finite = torch.isfinite(torch.stack([loss.float() for _, loss in present])).tolist()
    return next((i for (i, _), ok in zip(present, finite, strict=True) if not ok), None)


def checkpoint(run: Run, done: int, *, stopping: bool) -> None:
    """Save at a periodic checkpoint step, or on USR1 (then raise Preempted)."""
    every = run.trial.checkpoint_every
    if run.checkpoint_dir is None or not (stopping or (every and done % every == 0 and done < run.trial.steps)):
        return
    path = ckpt.save(run.checkpoint_dir, done, run.engine.checkpoint_module(), run.optimizer)
    if run.renv.rank == 0:
        run.log(f"checkpoint {path.name} saved", flush=True)
    if stopping:
        raise ckpt.Preempted(done)
