"""A sweep's table, report and recommendation, rebuilt from its trial folders (finish), and
the table on the terminal (show). Apart from run/sweep.py because it loads pandas and the report
stack: a `--detach` submission, which builds no table, should not pay their second of start-up."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from launcher.config.job import job_label
from launcher.config.schema import LauncherConfig
from launcher.perf.summary import model_summary
from launcher.report.markdown import write_report
from launcher.report.terminal import print_table
from launcher.results.confidence import UNKNOWN_SWEEP
from launcher.results.cost import pricing_of
from launcher.results.policy import Recommendation, policy_of, recommend
from launcher.results.table import build_table, write_table
from launcher.run.adaptive import summary as search_summary
from launcher.run.repeats import summary as repeats_summary


@dataclass(kw_only=True, frozen=True)
class SweepResult:
    sweep_dir: Path
    """Folder holding everything the sweep wrote."""
    table: pd.DataFrame
    """The results table."""
    recommendation: Recommendation
    """Recommended size and why."""


def finish(sweep_dir: Path, cfg: LauncherConfig) -> SweepResult:
    """Rebuild table and report from the trial folders."""
    df = build_table(sweep_dir, pricing_of(cfg))
    write_table(df, sweep_dir)
    rec = recommend(df, policy_of(cfg), unknown_spread=UNKNOWN_SWEEP)
    scaling = df["scaling"].iloc[0] if len(df) else "n/a"
    what = f"Model `{cfg.model.name}`, layout `{cfg.parallel.layout}`"
    if cfg.job.kind == "command":
        described = f", its model `{cfg.model.name}`" if cfg.job.model_describes_program else ""
        what = f"Job `{job_label(cfg.job)}` (`{shlex.join(cfg.job.argv)}`, launch {cfg.job.launch}{described})"
    summary = (
        f"{what}, cluster `{cfg.cluster.name}`; "
        f"micro-batch {cfg.batch.micro}, accumulation {cfg.batch.accum}; {cfg.sweep.steps} steps per trial, "
        f"first {cfg.sweep.warmup_steps} excluded; scaling: {scaling}, efficiency against the smallest completed size."
    )
    notes = [n for n in [search_summary(sweep_dir), repeats_summary(df, cfg)] if n]
    write_report(
        df,
        rec,
        sweep_id=sweep_dir.name,
        summary=summary,
        threshold=cfg.sweep.threshold,
        sweep_dir=sweep_dir,
        model=model_summary(sweep_dir, cfg),
        notes=notes,
    )
    return SweepResult(sweep_dir=sweep_dir, table=df, recommendation=rec)


def show(result: SweepResult) -> None:
    d = result.sweep_dir
    print_table(
        result.table,
        result.recommendation,
        title=f"sweep {d.name}",
        footer=f"results: {d}/results.csv, results.parquet, report.md, report.html",
    )
