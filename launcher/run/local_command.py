"""A `job=command` trial on this machine: the link probe on the trial's ranks, then the user's
command started as job.launch says, then its record (launcher/train/command_record.py).

- torchrun: one `<python> -m torch.distributed.run --standalone --nproc-per-node=W` agent, each
  rank through `-m launcher.trials.rank_exec`, which writes its output to `rank<r>.log`;
  the agent's own output goes to `agent.log`;
- srun: one process per rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set,
  rank r's output in `rank<r>.log` (as the built-in trainer's ranks);
- none: argv once, as it is (it starts its own ranks), its output in `rank0.log`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from launcher.config.schema import LauncherConfig
from launcher.harvest.progress import steps_so_far
from launcher.run.local import (
    LocalOutcome,
    Process,
    free_port,
    rank_env,
    run_local,
    run_processes,
    run_trial_dir,
    trial_env,
)
from launcher.train.command_record import finish, printing_rank, rank_logs
from launcher.trials.folder import write_outcome
from launcher.trials.payload import Payload, payload_for, probe_payload
from launcher.trials.spec import Trial


def command_processes(payload: Payload, tdir: Path, *, world_size: int, threads: int, user_env: dict[str, str]):
    """The processes that start `payload` (a command) for the trial in `tdir`."""
    py = sys.executable
    argv = payload.here(tdir, py)
    env = dict(os.environ) | user_env | dict(payload.env)
    env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    if payload.launch == "srun":
        port = free_port()
        extra = user_env | dict(payload.env)
        return [
            Process(argv=argv, env=rank_env(r, world_size, port, threads, extra), log=tdir / f"rank{r}.log")
            for r in range(world_size)
        ]
    if payload.launch == "none":
        return [Process(argv=argv, env=env, log=tdir / "rank0.log")]
    agent = [py, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", f"--nproc-per-node={world_size}"]
    wrap = ["-m", "launcher.trials.rank_exec", str(tdir / "rank{rank}.log")]  # the agent's python runs it
    return [Process(argv=[*agent, *wrap, *argv], env=env, log=tdir / "agent.log")]


def _look(tdir: Path, cfg: LauncherConfig, on_step: Callable[[int], None]) -> None:
    """Show the step the program has reported so far (its own count: sweep.steps need not be its), where its
    output numbers its steps (launcher.harvest.progress); nothing where it does not, and the row says running."""
    metrics = str(cfg.job.metrics)
    logs = rank_logs(tdir)
    step = steps_so_far(metrics, trial_dir=tdir, log=logs.get(printing_rank(metrics, logs)), pattern=cfg.job.pattern)
    if step is not None:
        on_step(step)


def run_command_trial(tdir: Path, cfg: LauncherConfig, trial: Trial, *, on_step: Callable[[int], None]) -> dict:
    """Probe, command, record; returns the outcome.json written (run_trial_dir's)."""
    c = cfg.cluster
    payload = payload_for(cfg, trial=trial, trial_dir=tdir)
    started = time.time()

    def run(_poll: Callable[[], None]) -> LocalOutcome:
        if cfg.job.probe:  # at one rank it times nothing, and records the device and host
            probe = probe_payload(launch=payload.launch)
            run_local(
                tdir,
                world_size=trial.world_size,
                threads=c.threads_per_rank,
                timeout_s=c.trial_timeout_s,
                payload=probe,
                log_prefix="probe-rank",
            )
        user_env = trial_env(tdir, trial.world_size)
        plan = command_processes(
            payload, tdir, world_size=trial.world_size, threads=c.threads_per_rank, user_env=user_env
        )
        outcome = run_processes(plan, timeout_s=c.trial_timeout_s, on_poll=lambda: _look(tdir, cfg, on_step))
        _look(tdir, cfg, on_step)  # the steps after the last look: a short program may end between two
        return outcome

    # on_step=None: the built-in trainer's `step k/N` lines are not the user's program's to print
    doc = run_trial_dir(
        tdir, world_size=trial.world_size, threads=c.threads_per_rank, timeout_s=c.trial_timeout_s, run=run
    )
    if doc["timed_out"]:  # a trial the launcher stopped has its reason in the outcome, not a record
        return doc
    codes = [r["returncode"] for r in doc["ranks"] if r["returncode"] not in (0, None)]
    record = finish(tdir, exit_code=codes[0] if codes else 0, started=started)
    # The record names the rank that told why (the executor saw only the agent, under torchrun).
    doc = {**doc, "reason": record["reason"], "oom": record["status"] == "oom"}
    write_outcome(tdir, doc)
    return doc
