"""`launcher cancel <sweep>`: from any shell, scancel a Slurm sweep's jobs that have not ended
and record their trials as `cancelled` (a sweep started with --detach, or whose launcher is gone
or runs elsewhere); then rebuild its table."""

from __future__ import annotations

import argparse

from launcher.run.sweep import finish, load_sweep
from launcher.slurm.submit import cancel_trials

REASON = "cancelled by the user (launcher cancel)"


def main(args: argparse.Namespace) -> int:
    path, cfg, _ = load_sweep(args.sweep_dir)
    if cfg.cluster.kind != "slurm":
        print(
            f"nothing to cancel: sweep {path.name} runs locally (cluster={cfg.cluster.name}), inside the launcher "
            "that started it; Ctrl-C there stops it"
        )
        return 0
    ids = cancel_trials(path, cfg, REASON)
    if not ids:
        print(f"nothing to cancel: no submitted trial of sweep {path.name} is still queued or running")
        return 0
    finish(path, cfg)  # results.csv and the report show the cancelled rows now
    print(f"cancelled Slurm job(s) {', '.join(ids)} of sweep {path.name}; table: launcher collect {path}")
    return 0
