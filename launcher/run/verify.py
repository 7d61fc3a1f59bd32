"""`launcher plan --search --verify K`: run the search's top K candidates at one size for real
(one sweep, each candidate a combination, on the recipe's executor: locally or on Slurm) and show
predicted beside measured; the recommendation is the measured best. perf/plan.py hands its search
here (this module sits above perf/, beside the sweep driver it reuses)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from launcher.perf.memory import GIB
from launcher.perf.search import Scored, Search
from launcher.run.sweep import prepare_variants, run_sweep

VERIFY_FILE = "verify.csv"
"""The side-by-side table, written into the verifying sweep's folder."""


@dataclass(kw_only=True, frozen=True)
class Verified:
    """One candidate, predicted and measured."""

    label: str
    """The sweep's combination label: `c<predicted rank>`."""
    scored: Scored
    """What the search predicted for it."""
    measured_tokens_per_s: float
    """Median tokens/s over its completed trials (nan: none completed)."""
    status: str
    """Its trial's status (completed, failed, oom, …)."""


def verify(overrides: Sequence[str], recipes: str | None, found: Search, world_size: int, k: int) -> int:
    """Measure the top `k` candidates at `world_size`, print predicted vs measured, recommend the
    measured best; 0 when one completed."""
    size = next(s for s in found.sizes if s.world_size == world_size)
    top = size.ranked[:k]
    at = [f"sweep.world_sizes=[{world_size}]", "sweep.nodes=null"]
    labelled = [(f"c{i}", [*overrides, *s.candidate.overrides(), *at]) for i, s in enumerate(top, 1)]
    result = run_sweep(prepare_variants(labelled, recipes), [*overrides, *at], progress_bars=True)
    if result is None:  # stalled in the queue: the sweep says how to follow it
        return 1
    rows = compare(top, result.table)
    table = verify_table(rows)
    table.to_csv(result.sweep_dir / VERIFY_FILE, index=False)
    show(rows, world_size, result.sweep_dir)
    return 0 if any(r.status == "completed" for r in rows) else 1


def compare(top: Sequence[Scored], measured: pd.DataFrame) -> list[Verified]:
    """Each predicted candidate (in predicted order) with its sweep rows' measurement."""
    out = []
    for i, s in enumerate(top, 1):
        label = f"c{i}"
        rows = measured[measured["variant"] == label]
        done = rows[rows["status"] == "completed"]
        thr = float(done["tokens_per_s"].median()) if len(done) else math.nan
        status = "completed" if len(done) else (str(rows["status"].iloc[0]) if len(rows) else "skipped")
        out.append(Verified(label=label, scored=s, measured_tokens_per_s=thr, status=status))
    return out


def measured_best(rows: Sequence[Verified]) -> Verified | None:
    done = [r for r in rows if r.status == "completed"]
    return max(done, key=lambda r: r.measured_tokens_per_s) if done else None


def verify_table(rows: Sequence[Verified]) -> pd.DataFrame:
    """predicted_rank, measured_rank (None where nothing completed), candidate, tokens/s both ways."""
    order = sorted((r for r in rows if r.status == "completed"), key=lambda r: -r.measured_tokens_per_s)
    rank = {r.label: i for i, r in enumerate(order, 1)}
    return pd.DataFrame(
        [
            {
                "predicted_rank": i,
                "measured_rank": rank.get(r.label),
                "variant": r.label,
                "candidate": r.scored.candidate.label,
                "predicted_tokens_per_s": r.scored.tokens_per_s,
                "measured_tokens_per_s": r.measured_tokens_per_s,
                "measured_over_predicted": r.measured_tokens_per_s / r.scored.tokens_per_s,
                "memory_gib_predicted": r.scored.memory_bytes / GIB,
                "status": r.status,
                "overrides": " ".join(r.scored.candidate.overrides()),
            }
            for i, r in enumerate(rows, 1)
        ]
    )


def show(rows: Sequence[Verified], world_size: int, sweep_dir: Path) -> None:
    df = verify_table(rows)
    t = Table(title=f"plan --verify: top {len(rows)} at {world_size} GPUs, predicted vs measured")
    for col in ("pred #", "meas #", "candidate", "predicted tok/s", "measured tok/s", "meas/pred", "status"):
        t.add_column(col, justify="left" if col in ("candidate", "status") else "right")
    for r in df.itertuples():
        meas = "" if math.isnan(r.measured_tokens_per_s) else f"{r.measured_tokens_per_s:,.0f}"
        ratio = "" if math.isnan(r.measured_over_predicted) else f"{r.measured_over_predicted:.2f}"
        rank = "" if pd.isna(r.measured_rank) else str(int(r.measured_rank))
        t.add_row(str(r.predicted_rank), rank, r.candidate, f"{r.predicted_tokens_per_s:,.0f}", meas, ratio, r.status)
    console = Console()
    console.print(t)
    best = measured_best(rows)
    if best is None:
        console.print(f"no candidate completed; see {sweep_dir}", soft_wrap=True)
        return
    c = best.scored.candidate
    console.print(
        f"Recommended (measured): {world_size} GPUs with {c.layout}: {' '.join(c.overrides())}", soft_wrap=True
    )
    console.print(f"table: {sweep_dir / VERIFY_FILE}; sweep: {sweep_dir}", soft_wrap=True)
