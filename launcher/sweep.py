"""A sweep: plan every trial (all validated first), run them one by one, build the table.

Folder layout, written as the sweep goes so nothing is lost if the launcher dies:
    results/<sweep-id>/sweep.json               spec: overrides, resolved config, trial list
    results/<sweep-id>/trials/<trial-id>/       trial.json, rank<r>.log, record.json, outcome.json
    results/<sweep-id>/results.{csv,parquet}    the table, rebuilt from trials/
    results/<sweep-id>/report.md, scaling.png   what people read
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from . import __version__
from .analysis import Recommendation, recommend
from .config.errors import ConfigError
from .config.load import to_dict
from .config.schema import LauncherConfig
from .io import atomic_write_json
from .local import last_lines, run_local
from .plan import Trial, plan_sweep, trial_document
from .report import print_table, write_report
from .results import TABLE_SCHEMA_VERSION, build_table, write_table

_STEP = re.compile(rb"step (\d+)/(\d+)")


@dataclass(kw_only=True, frozen=True)
class SweepResult:
    sweep_dir: Path
    """Folder holding everything the sweep wrote."""
    table: pd.DataFrame
    """The results table."""
    recommendation: Recommendation
    """Recommended size and why."""


def sweep_id(cfg: LauncherConfig, now: float) -> str:
    if cfg.sweep.name:
        return cfg.sweep.name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{cfg.model.name}-{cfg.parallel.layout}"


def create_sweep_dir(cfg: LauncherConfig, trials: Sequence[Trial], overrides: Sequence[str]) -> Path:
    """Make the sweep folder and write its spec and every trial.json. Never reuses a folder."""
    now = time.time()
    root = Path(cfg.sweep.results_dir)
    base = sweep_id(cfg, now)
    sweep_dir = root / base
    if cfg.sweep.name and sweep_dir.exists():
        raise ConfigError(
            f"sweep.name={cfg.sweep.name!r}: {sweep_dir} already exists; choose another sweep.name "
            "(existing results are never overwritten)"
        )
    n = 2
    while sweep_dir.exists():
        sweep_dir, n = root / f"{base}-{n}", n + 1
    (sweep_dir / "trials").mkdir(parents=True)
    atomic_write_json(
        sweep_dir / "sweep.json",
        {
            "sweep_id": sweep_dir.name,
            "created_at": now,
            "launcher_version": __version__,
            "table_schema_version": TABLE_SCHEMA_VERSION,
            "overrides": list(overrides),
            "config": to_dict(cfg),
            "trials": [t.to_dict() for t in trials],
        },
    )
    for t in trials:
        atomic_write_json(sweep_dir / "trials" / t.trial_id / "trial.json", trial_document(t, cfg))
    return sweep_dir


def run_trial(sweep_dir: Path, trial: Trial, cfg: LauncherConfig, on_step=None, extra_args=None) -> dict:
    """Run one trial with the configured executor; write and return its outcome.json."""
    tdir = sweep_dir / "trials" / trial.trial_id
    log0 = tdir / "rank0.log"

    def poll() -> None:
        if on_step and log0.exists():
            hits = _STEP.findall(log0.read_bytes()[-4096:])
            if hits:
                on_step(int(hits[-1][0]))

    try:
        outcome = run_local(
            tdir,
            world_size=trial.world_size,
            threads=cfg.cluster.threads_per_rank,
            timeout_s=cfg.cluster.trial_timeout_s,
            extra_args=extra_args,
            on_poll=poll,
        )
    except KeyboardInterrupt:
        atomic_write_json(tdir / "outcome.json", {"executor": "local", "reason": "interrupted (Ctrl-C); ranks stopped"})
        raise
    reason = outcome.reason()
    culprit = outcome.culprit()
    if culprit is not None:
        tail = last_lines(tdir / f"rank{culprit}.log")
        reason = f"{reason}; rank {culprit} log ends: {tail}" if tail else reason
    doc = {
        "executor": "local",
        "reason": reason,
        "timed_out": outcome.timed_out,
        "wall_s": outcome.wall_s,
        "ranks": [{"rank": r.rank, "returncode": r.returncode, "stopped_by_launcher": r.stopped_by_launcher}
                  for r in outcome.ranks],  # fmt: skip
    }
    atomic_write_json(tdir / "outcome.json", doc)
    return doc


def finish(sweep_dir: Path, cfg: LauncherConfig) -> SweepResult:
    """Rebuild table and report from the trial folders."""
    df = build_table(sweep_dir, cfg.cluster.usd_per_device_hour)
    write_table(df, sweep_dir)
    rec = recommend(df, cfg.sweep.threshold)
    summary = (
        f"Model `{cfg.model.name}`, layout `{cfg.parallel.layout}`, cluster `{cfg.cluster.name}`; "
        f"micro-batch {cfg.batch.micro}, accumulation {cfg.batch.accum}; {cfg.sweep.steps} steps per trial, "
        f"first {cfg.sweep.warmup_steps} excluded; scaling: {df['scaling'].iloc[0] if len(df) else 'n/a'}, "
        f"efficiency against the smallest completed size."
    )
    write_report(df, rec, sweep_id=sweep_dir.name, summary=summary, threshold=cfg.sweep.threshold, sweep_dir=sweep_dir)
    return SweepResult(sweep_dir=sweep_dir, table=df, recommendation=rec)


def run_sweep(cfg: LauncherConfig, overrides: Sequence[str], *, progress_bars: bool = True) -> SweepResult:
    """Plan and check every trial, then run them in order with progress shown."""
    trials = plan_sweep(cfg)  # raises ConfigError before anything exists on disk
    sweep_dir = create_sweep_dir(cfg, trials, overrides)

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    console.print(f"sweep [bold]{sweep_dir.name}[/bold]: {len(trials)} trials → {escape(str(sweep_dir))}")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, disable=not progress_bars, refresh_per_second=2) as progress:
            overall = progress.add_task("sweep", total=len(trials))
            for t in trials:
                task = progress.add_task(f"{t.trial_id} ({t.world_size} ranks) steps", total=t.steps)
                outcome = run_trial(sweep_dir, t, cfg, on_step=lambda k, task=task: progress.update(task, completed=k))
                status = "done" if outcome["reason"] is None else "[red]failed[/red]"
                progress.update(task, description=f"{t.trial_id} ({t.world_size} ranks) {status}")
                progress.advance(overall)
    except KeyboardInterrupt:
        finish(sweep_dir, cfg)  # the table of what finished; unrun trials show as pending
        raise
    result = finish(sweep_dir, cfg)
    print_table(result.table, result.recommendation, title=f"sweep {sweep_dir.name}",
                footer=f"results: {sweep_dir}/results.csv, results.parquet, report.md")  # fmt: skip
    return result
