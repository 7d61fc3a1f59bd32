"""The measured training loop of one trial. Runs on every rank; returns the record's metrics.

train() = build → resume → steps → save parameters → measure (launcher/train/measure.py).
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from launcher.config.schema import LauncherConfig, OptimConfig
from launcher.trials.spec import Trial
from launcher.train import checkpoint as ckpt
from launcher.train import measure
from launcher.train.data import MicroBatches, build_dataset
from launcher.train.dist import sync
from launcher.train.engines import build_engine
from launcher.train.engines.base import Engine, Topology
from launcher.train.env import RankEnv
from launcher.train.models import build_model, param_counts


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
) -> dict[str, Any]:
    """Train `trial.steps` steps and measure; returns the metrics every rank agrees on.
    With `checkpoint_dir`: resume from its latest checkpoint, save every
    `trial.checkpoint_every` steps, and on `stop.set` (USR1) save and raise Preempted."""
    run = build(trial, cfg, renv, device, checkpoint_dir=checkpoint_dir, stop=stop, log=log)
    trained = run_steps(run, start_step=resume(run))
    full = run.engine.full_state_dict()  # collective: every rank takes part, rank 0 gets it
    if save_params is not None and full is not None:
        torch.save(full, save_params)
    return measure.summarize(trained, trial=trial, cfg=cfg, engine=run.engine, optimizer=run.optimizer,
                             device=device, params=run.params)  # fmt: skip


def build(
    trial: Trial, cfg: LauncherConfig, renv: RankEnv, device: torch.device, *, checkpoint_dir: Path | None,
    stop: ckpt.StopFlag | None, log: Callable[..., None],
) -> Run:  # fmt: skip
    topo = Topology.build(trial, renv.rank, device)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model).to(device)  # the same full model on every rank; layouts cut it up
    params = param_counts(model)
    engine = build_engine(model, topo, cfg, device)
    optimizer = build_optimizer(cfg.optim, engine.parameters(), trial.lr, foreach=engine.foreach_optimizer)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.optim.warmup_steps))
    dataset = build_dataset(cfg.data, cfg.model, num_samples=trial.steps * trial.global_batch, seed=cfg.seed)
    batches = MicroBatches(dataset, trial.micro, trial.dp, topo.dp_rank, cfg.seed)
    return Run(trial=trial, cfg=cfg, renv=renv, device=device, topo=topo, engine=engine, optimizer=optimizer,
               schedule=schedule, batches=batches, params=params, checkpoint_dir=checkpoint_dir, stop=stop, log=log)


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
    for _ in range(start_step * run.trial.accum):  # the same data order as an uninterrupted run
        next(run.batches)
    if run.renv.rank == 0:
        run.log(f"resumed from {path.name}: step {start_step} of {run.trial.steps}", flush=True)
    return start_step


def run_steps(run: Run, *, start_step: int) -> measure.Trained:
    """The timed optimizer steps, from `start_step` to the trial's end."""
    kill_at = fault_step(os.environ.get("LAUNCHER_FAULT"), run.renv.rank)
    step_times: list[float] = []
    step_losses: list[torch.Tensor] = []
    loss: torch.Tensor | None = None
    micro_batches: list[torch.Tensor] = []
    for step in range(start_step, run.trial.steps):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.perf_counter()
        micro_batches = [next(run.batches) for _ in range(run.trial.accum)]
        loss = optimizer_step(run, micro_batches)
        step_times.append(time.perf_counter() - start)
        step_losses.append(loss if loss is not None else torch.zeros((), device=run.device))
        log_step(run, step, loss, step_times[-1])
        after_step(run, step + 1, loss)
    last_batch = micro_batches[-1] if micro_batches else None
    return measure.Trained(start_step=start_step, step_times=step_times, step_losses=step_losses,
                           has_loss=loss is not None, last_batch=last_batch)  # fmt: skip


def optimizer_step(run: Run, micro_batches: list[torch.Tensor]) -> torch.Tensor | None:
    """One timed step; returns this rank's loss (None on ranks that compute none)."""
    loss = run.engine.forward_backward(micro_batches)
    run.optimizer.step()
    run.schedule.step()
    run.optimizer.zero_grad(set_to_none=True)
    sync(run.device)
    return loss


def log_step(run: Run, step: int, loss: torch.Tensor | None, seconds: float) -> None:
    """About 10 lines a trial; the launcher reads its progress from `step N/M`."""
    steps = run.trial.steps
    if step % max(1, steps // 10) != 0 and step != steps - 1:
        return
    if loss is not None and run.topo.dp_rank == 0 and run.topo.tp_rank == 0:
        run.log(f"step {step + 1}/{steps} loss {loss.item():.4f} time {seconds * 1e3:.1f} ms", flush=True)
    elif loss is None and run.renv.rank == 0:  # rank 0 holds an early pipeline stage: no loss to show
        run.log(f"step {step + 1}/{steps} time {seconds * 1e3:.1f} ms", flush=True)


def after_step(run: Run, done: int, loss: torch.Tensor | None) -> None:
    """Outside the timed step: every rank learns whether any loss went bad or USR1 arrived,
    so all of them stop, or checkpoint, at the same step."""
    control = torch.tensor([0.0 if loss is None or bool(torch.isfinite(loss)) else 1.0,
                            1.0 if run.stop is not None and run.stop.set else 0.0], device=run.device)  # fmt: skip
    dist.all_reduce(control, op=dist.ReduceOp.MAX)
    nonfinite, stopping = bool(control[0] > 0), bool(control[1] > 0)
    if nonfinite:
        raise NonFiniteLoss(done, run.trial.steps)
    every = run.trial.checkpoint_every
    if run.checkpoint_dir is None or not (stopping or (every and done % every == 0 and done < run.trial.steps)):
        return
    path = ckpt.save(run.checkpoint_dir, done, run.engine.checkpoint_module(), run.optimizer)
    if run.renv.rank == 0:
        run.log(f"checkpoint {path.name} saved", flush=True)
    if stopping:
        raise ckpt.Preempted(done)


def fault_step(spec: str | None, rank: int) -> int | None:
    """`LAUNCHER_FAULT=kill:RANK:STEP` — test hook: that rank SIGKILLs itself at that step."""
    if not spec:
        return None
    kind, fault_rank, step = spec.split(":")
    if kind != "kill":
        raise ValueError(f"LAUNCHER_FAULT={spec!r}: only kill:RANK:STEP is understood")
    return int(step) if int(fault_rank) == rank else None
