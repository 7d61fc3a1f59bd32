"""`launcher run`: one run of the recipe (run.world_size locally, cluster.nodes on Slurm).

A run is a one-trial sweep (same folder layout, record and table) that checkpoints when asked
to; `--dry-run` prints the sbatch script (Slurm) or each rank's command line (local).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

from launcher.config.compose import compose_config
from launcher.config.schema import LauncherConfig
from launcher.run import sweep as sw
from launcher.run.local import payload_argv, rank_env
from launcher.slurm.submit import job_requests, write_scripts
from launcher.trials.spec import Trial, sweep_trials


def as_sweep(cfg: LauncherConfig) -> LauncherConfig:
    """A single run is a one-trial sweep: same folder layout, record and table."""
    r = cfg.run
    sizes = {"nodes": [cfg.cluster.nodes]} if cfg.cluster.kind == "slurm" else {"world_sizes": [r.world_size]}
    sweep = dataclasses.replace(cfg.sweep, **sizes, steps=r.steps, warmup_steps=r.warmup_steps, repeats=1, pack=False,
                                search="grid")  # fmt: skip
    return dataclasses.replace(cfg, sweep=sweep)


def run_trials(cfg: LauncherConfig) -> list[Trial]:
    """The one trial of `launcher run`, checkpointing when asked to."""
    r = cfg.run
    checkpoint = bool(r.checkpoint_every or r.requeue)
    return [dataclasses.replace(t, checkpoint=checkpoint, checkpoint_every=r.checkpoint_every) for t in sweep_trials(cfg)]


def dry_run(cfg: LauncherConfig, overrides: list[str]) -> int:
    (trial,) = run_trials(cfg)
    if cfg.cluster.kind == "slurm":
        sweep_dir = sw.create_sweep_dir(cfg, [(trial, cfg)], overrides)
        (job,) = job_requests(cfg, sweep_dir, [trial])
        write_scripts(sweep_dir, [job])
        script = sweep_dir / "jobs" / f"{job.name}.sbatch"
        print(job.script, end="")
        print(f"# written to {script}; submit with: sbatch {shlex.quote(str(script))}", file=sys.stderr)
        return 0
    print(f"# trial {trial.trial_id}: {trial.world_size} ranks, global batch {trial.global_batch}, lr {trial.lr:g}")
    for rank in range(trial.world_size):
        env = rank_env(rank, trial.world_size, 0, cfg.cluster.threads_per_rank)
        keys = ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")
        argv = payload_argv(Path("<trial-dir>/trial.json"), Path("<trial-dir>/record.json"), [])
        print(" ".join([*(f"{k}={shlex.quote(env[k])}" for k in keys), "MASTER_PORT=<free port>", *map(shlex.quote, argv)]))
    return 0


def main(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *(["run.requeue=true"] if args.requeue else [])]
    cfg = as_sweep(compose_config(overrides, args.recipes))
    if args.dry_run:
        return dry_run(cfg, overrides)
    prepared = sw.PreparedSweep(cfg=cfg, items=[(t, cfg) for t in run_trials(cfg)], skipped=[])
    result = sw.run_sweep(prepared, args.overrides, progress_bars=not args.quiet)
    return sw.show_and_exit_code(result)
