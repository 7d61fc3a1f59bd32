"""`launcher cancel <sweep>`: from any shell, scancel a Slurm sweep's jobs that have not ended
and record their trials as `cancelled` (a sweep started with --detach, or whose launcher is gone
or runs elsewhere); then rebuild its table."""

from __future__ import annotations

import argparse

from launcher.run.executor import executor_for
from launcher.run.executor.base import NothingToCancel
from launcher.run.sweep import finish, load_sweep

REASON = "cancelled by the user (launcher cancel)"


def main(args: argparse.Namespace) -> int:
    path, cfg, _ = load_sweep(args.sweep_dir)
    try:
        ids = executor_for(cfg).cancel(path, REASON)
    except NothingToCancel as why:
        print(why)
        return 0
    if not ids:
        print(f"nothing to cancel: no submitted trial of sweep {path.name} is still queued or running")
        return 0
    finish(path, cfg)  # results.csv and the report show the cancelled rows now
    print(f"cancelled Slurm job(s) {', '.join(ids)} of sweep {path.name}; table: launcher collect {path}")
    return 0
