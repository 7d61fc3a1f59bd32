"""Timing like production: steps run in windows with nothing waiting for the device inside one;
the loss check and the stop vote (one all-reduce) run once per window, and still stop a trial at
the step where a loss went bad, or checkpoint at a step boundary on USR1. The pipeline's bubble
is measured in an instrumented pass after the timed steps, which run uninstrumented.

The loop tests drive loop.run_steps in this process on a 1-rank gloo group with a stand-in engine
(a real optimizer and a real DCP checkpoint); one real trial checks the `nan` record end to end
(tests/multiprocess/test_timing_nan.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.train import checkpoint as ckpt
from launcher.train import loop, windows
from launcher.train.engines.pipeline import _RunState
from launcher.train.env import RankEnv
from launcher.trials.spec import make_trial


@pytest.mark.parametrize(
    "step, steps, every, end",
    [
        (0, 30, 0, 10),
        (10, 30, 0, 20),
        (25, 30, 0, 30),
        (0, 3, 0, 3),  # 10 steps, cut at the trial's end
        (0, 30, 5, 5),
        (5, 30, 5, 10),
        (7, 30, 5, 10),
        (10, 30, 25, 20),
        (20, 30, 25, 25),  # periodic checkpoints
    ],
)
def test_a_window_ends_after_ten_steps_at_the_end_or_at_the_next_checkpoint(step, steps, every, end):
    assert windows.window_end(step, steps, every) == end


def test_the_cpu_step_clock_times_each_step_from_host_clocks():
    clock = loop.StepClock(torch.device("cpu"))
    clock.mark()
    for pause in (0.01, 0.02):
        time.sleep(pause)
        clock.mark()
    first, second = clock.seconds()
    assert first >= 0.01 and second >= 0.02  # at least each pause (a loaded host may stretch either)
    assert (
        loop.timing_kind(torch.device("cpu")) == "host_clock"
        and loop.timing_kind(torch.device("cuda")) == "cuda_events"
    )


def test_first_nonfinite_finds_the_first_bad_loss_and_skips_ranks_without_one():
    t = torch.tensor
    assert loop.first_nonfinite([t(1.0), t(2.0)]) is None
    assert loop.first_nonfinite([t(1.0), None, t(float("inf")), t(float("nan"))]) == 2
    assert loop.first_nonfinite([None, None]) is None


def test_the_pipeline_busy_clock_runs_only_in_the_instrumented_pass():
    state = _RunState(torch.device("cpu"))
    with state.busy():
        time.sleep(0.01)
    assert state.busy_s == 0.0
    state.instrumented = True
    with state.busy():
        time.sleep(0.01)
    assert state.busy_s >= 0.01


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class StandIn:
    """An engine whose loss goes NaN, or whose USR1 arrives, during a chosen step (0-based)."""

    def __init__(self, *, nan_at: int | None = None, usr1_at: int | None = None, stop: ckpt.StopFlag | None = None):
        self.model = nn.Linear(4, 1)
        self.nan_at, self.usr1_at, self.stop, self.calls = nan_at, usr1_at, stop, 0

    def forward_backward(self, micro_batches):
        step, self.calls = self.calls, self.calls + 1
        if step == self.usr1_at:
            self.stop.set = True  # what the USR1 handler does, mid-window
        loss = self.model(micro_batches[0].float()).pow(2).mean()
        loss.backward()
        return torch.tensor(float("nan")) if step == self.nan_at else loss.detach()

    def checkpoint_module(self):
        return self.model


def stand_in_run(engine: StandIn, *, steps: int, checkpoint_dir=None, stop=None, every: int = 0) -> loop.Run:
    cfg = compose_config(["optim=sgd", "optim.lr=0.01", "optim.clip_grad_norm=0"])  # the stand-in has no grads to clip
    trial = dataclasses.replace(
        make_trial(cfg, index=0, world_size=1, steps=steps, warmup_steps=1),
        checkpoint=checkpoint_dir is not None,
        checkpoint_every=every,
    )
    optimizer = torch.optim.SGD(engine.model.parameters(), lr=0.01)
    batches = iter(lambda: torch.ones(2, 4), None)  # an endless stream of micro-batches
    topo = dataclasses.make_dataclass("Topo", ["dp_rank", "tp_rank"])(0, 0)
    renv = RankEnv(rank=0, local_rank=0, world_size=1, master_addr="127.0.0.1", master_port=0, sources={})
    return loop.Run(
        trial=trial,
        cfg=cfg,
        renv=renv,
        device=torch.device("cpu"),
        topo=topo,
        engine=engine,
        optimizer=optimizer,
        schedule=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
        batches=batches,
        params=(0, 0),
        checkpoint_dir=checkpoint_dir,
        stop=stop,
        log=lambda *a, **k: None,
    )


def test_the_stop_vote_runs_once_per_window_not_per_step(group, monkeypatch):
    calls = {"all_reduce": 0, "barrier": 0}
    real = dist.all_reduce

    def counting(*args, **kwargs):
        calls["all_reduce"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", counting)
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.__setitem__("barrier", calls["barrier"] + 1))
    trained = loop.run_steps(stand_in_run(StandIn(), steps=25), start_step=0)
    assert calls == {"all_reduce": 3, "barrier": 0}  # windows 0–9, 10–19, 20–24
    assert len(trained.step_times) == len(trained.step_losses) == 25 and trained.timing == "host_clock"
    assert all(t > 0 for t in trained.step_times) and trained.has_loss


def test_a_nan_stops_the_trial_at_its_step_when_the_window_ends(group):
    engine = StandIn(nan_at=13)  # the 14th step
    with pytest.raises(loop.NonFiniteLoss) as raised:
        loop.run_steps(stand_in_run(engine, steps=30), start_step=0)
    assert raised.value.step == 14 and str(raised.value) == "loss became NaN/inf at step 14 of 30; stopped early"
    assert engine.calls == 20  # the rest of its window ran; nothing after it


def test_usr1_checkpoints_at_the_window_boundary_and_stops(group, tmp_path):
    stop = ckpt.StopFlag()
    engine = StandIn(usr1_at=12, stop=stop)
    with pytest.raises(ckpt.Preempted) as raised:
        loop.run_steps(stand_in_run(engine, steps=30, checkpoint_dir=tmp_path, stop=stop), start_step=0)
    assert raised.value.step == 20 and engine.calls == 20
    assert read_json(tmp_path / "latest.json") == {"step": 20, "path": "step-0000020"}


def test_periodic_checkpoints_land_on_their_steps(group, tmp_path):
    loop.run_steps(
        stand_in_run(StandIn(), steps=16, checkpoint_dir=tmp_path, stop=ckpt.StopFlag(), every=7), start_step=0
    )
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-0000007", "step-0000014"]


@pytest.mark.parametrize(
    "slowest, vote_every, steps",
    [
        (None, None, 10),  # a sweep trial: USR1 does not stop it, windows of 10
        (None, 30.0, 1),  # a checkpointing run's first window: one step, to learn the step time
        (0.01, 30.0, 10),
        (12.0, 30.0, 2),  # 10 steps of 12 s would outlast Slurm's 120 s warning before the vote
        (45.0, 30.0, 1),  # a step longer than the bound: vote every step
    ],
)
def test_a_checkpointing_run_votes_within_a_quarter_of_the_warning(slowest, vote_every, steps):
    assert windows.window_steps(slowest, vote_every) == steps
    assert windows.vote_every_s(120) == 30.0 and windows.vote_every_s(None) is None


class SlowStandIn(StandIn):
    def forward_backward(self, micro_batches):
        time.sleep(0.1)
        return super().forward_backward(micro_batches)


def test_usr1_during_slow_steps_checkpoints_within_the_warnings_quarter(group, tmp_path):
    """Steps of 0.1 s and a 1 s warning: the vote comes every ≤ 0.25 s (1–2 steps), so USR1 during
    step 4 checkpoints at step 4, not at the end of a 10-step window (step 10: 0.6 s later)."""
    stop = ckpt.StopFlag()
    engine = SlowStandIn(usr1_at=3, stop=stop)
    run = stand_in_run(engine, steps=30, checkpoint_dir=tmp_path, stop=stop)
    run = dataclasses.replace(
        run, cfg=dataclasses.replace(run.cfg, cluster=dataclasses.replace(run.cfg.cluster, signal_warning_s=1))
    )
    with pytest.raises(ckpt.Preempted) as raised:
        loop.run_steps(run, start_step=0)
    assert raised.value.step == 4 and engine.calls == 4
