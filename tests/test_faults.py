"""Faults on the real dev cluster: every way a trial can end is recorded with its reason, and a
requeued run resumes from its checkpoint to the parameters of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from launcher.cli import _run_as_sweep, _run_trials
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.local import run_local
from launcher.plan import plan_trial, trial_document
from launcher.slurm import query
from launcher.submit import plan_jobs, submit_jobs, write_scripts
from launcher.sweep import collect, create_sweep_dir, execute

pytestmark = pytest.mark.slurm

DEV = ["cluster=devcluster", "optim=sgd", "optim.lr=0.05", "seed=3"]


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    t0 = time.monotonic()
    try:
        return _wait_for(predicate, timeout, what, every)
    finally:
        print(f"[{time.strftime('%H:%M:%S')}] {what}: {time.monotonic() - t0:.1f} s", flush=True)


def _wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def scontrol(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["scontrol", *args], env=env, check=True, capture_output=True, text=True).stdout


def job_field(env: dict[str, str], job: str, field: str) -> str:
    out = scontrol(env, "show", "job", job)
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{field}=")), "")


def start_now(env: dict[str, str], job: str, restarts: int) -> None:
    """A requeued job may start again once its old credential expired (the dev cluster sets
    cred_expire=20 s instead of Slurm's 120 s); past that EligibleTime, an update makes the
    scheduler look at it now rather than at its next periodic pass."""

    def running_again() -> bool:
        if int(job_field(env, job, "Restarts") or 0) < restarts:
            return False
        state = job_field(env, job, "JobState")
        eligible = job_field(env, job, "EligibleTime")
        if state == "PENDING" and eligible not in ("", "Unknown") and time.strftime("%Y-%m-%dT%H:%M:%S") > eligible:
            scontrol(env, "update", f"JobId={job}", "StartTime=now")
        return state in ("RUNNING", "COMPLETED")

    wait_for(running_again, 90, f"job {job} to run again after requeue {restarts}", every=1.0)


def checkpoint_step(tdir: Path) -> int:
    marker = tdir / "checkpoint" / "latest.json"
    return read_json(marker)["step"] if marker.exists() else 0


STEPS, EVERY = 150, 20


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The same 2-rank run, locally and never interrupted: the parameters to match."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    cfg = compose_config(DEV[1:])
    trial = plan_trial(cfg, index=0, world_size=2, steps=STEPS, warmup_steps=2)
    atomic_write_json(tmp / "trial.json", trial_document(trial, cfg))
    outcome = run_local(tmp, world_size=2, threads=1, timeout_s=300, extra_args=["--save-params", str(tmp / "p.pt")])
    assert outcome.reason() is None
    return torch.load(tmp / "p.pt")


def test_requeued_run_resumes_from_its_checkpoints_to_the_uninterrupted_parameters(devcluster, tmp_path, uninterrupted):
    """`launcher run --requeue` on 2 nodes, interrupted twice: USR1 (Slurm's warning) → the
    ranks checkpoint and exit 75 → the job script requeues itself; then `scontrol requeue` from
    outside → the job resumes from the last periodic checkpoint. Final parameters equal the
    uninterrupted run's."""
    env = devcluster.env()
    overrides = [*DEV, "cluster.nodes=2", f"run.steps={STEPS}", "run.warmup_steps=2", f"run.checkpoint_every={EVERY}",
                 "run.requeue=true", f"sweep.results_dir={tmp_path}"]  # fmt: skip
    cfg = _run_as_sweep(compose_config(overrides))
    trials = _run_trials(cfg)
    (trial,) = trials
    assert trial.checkpoint and trial.checkpoint_every == EVERY
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], overrides)
    tdir = sweep_dir / "trials" / trial.trial_id
    jobs = plan_jobs(cfg, sweep_dir, trials, payload_args=("--save-params", str(sweep_dir / "params.pt")))
    assert "#SBATCH --requeue" in jobs[0].script and 'scontrol requeue "$SLURM_JOB_ID"' in jobs[0].script
    write_scripts(sweep_dir, jobs)
    submit_jobs(sweep_dir, jobs, env)
    job = read_json(tdir / "submission.json")["key"]

    # 1. USR1 once the first periodic checkpoint exists: checkpoint at the next step, exit 75, self-requeue.
    wait_for(lambda: checkpoint_step(tdir) >= EVERY, 120, "the first periodic checkpoint")
    subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)
    wait_for(lambda: (tdir / "exit_code.attempt0").exists(), 60, "attempt 0 to end")
    on_signal = checkpoint_step(tdir)
    assert read_json(tdir / "checkpointed.attempt0")["step"] == on_signal  # saved at the signal, then requeued
    start_now(env, job, restarts=1)

    # 2. From outside: `scontrol requeue` once attempt 1 has saved a periodic checkpoint past it.
    wait_for(lambda: checkpoint_step(tdir) > on_signal, 120, "a periodic checkpoint in attempt 1")
    periodic = checkpoint_step(tdir)
    scontrol(env, "requeue", job)
    start_now(env, job, restarts=2)

    result = execute(sweep_dir, cfg, trials, progress_bars=False)  # tracks to the end and builds the table
    record = read_json(tdir / "record.json")
    assert record["status"] == "completed"
    assert record["metrics"]["resumed_from_step"] >= periodic
    # Three attempts, each with its own rank logs (the killed one never got to write its exit code).
    assert sorted(p.name for p in tdir.glob("rank0.attempt*.log")) == [f"rank0.attempt{i}.log" for i in range(3)]
    assert (tdir / "exit_code.attempt2").read_text().strip() == "0"
    row = result.table.iloc[0]
    assert row["status"] == "completed"
    assert row["reason"] == f"requeued 2×, then completed (resumed from step {record['metrics']['resumed_from_step']})"
    final = torch.load(sweep_dir / "params.pt")
    assert max((final[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) <= 1e-6
