"""`launcher status <sweep>`: where each trial of a sweep stands, and where that came from
(sacct, else squeue, else the trial folder's own files)."""

from __future__ import annotations

import argparse

from rich.table import Table
from rich.text import Text

from launcher.io import read_json
from launcher.report.terminal import stdout_console
from launcher.run.sweep import load_sweep
from launcher.slurm.submit import refresh


def main(args: argparse.Namespace) -> int:
    sweep_dir = args.sweep_dir
    path, cfg, trials = load_sweep(sweep_dir)
    outcomes = {}
    if cfg.cluster.kind == "slurm":
        outcomes = refresh(path, cfg)
    table = Table(title=f"sweep {path.name} ({cfg.cluster.kind})")
    for col in ("trial", "nodes", "ranks", "job", "state", "source", "reason"):
        table.add_column(col)
    for t in trials:
        tdir = path / "trials" / t.trial_id
        doc = outcomes.get(t.trial_id)
        record = (tdir / "record.json").exists()
        if doc is None and (tdir / "outcome.json").exists():
            doc = read_json(tdir / "outcome.json")
        if doc is None:
            state, source, job, reason = ("completed" if record else "not started"), ("record" if record else "—"), "—", ""
        else:
            state = "completed" if record and doc.get("status") in (None, "completed") else doc.get("status", "failed")
            source, job, reason = doc.get("source", doc.get("executor", "")), doc.get("job", "—"), doc.get("reason") or ""
        table.add_row(*map(Text, (t.trial_id, str(t.nodes), str(t.world_size), job, state, source, reason)))
    stdout_console().print(table)
    return 0
