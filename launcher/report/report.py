"""`launcher report <sweep>`: rebuild the table, report.md, report.html and the plots from a sweep's folder."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from launcher.results.policy import Recommendation
from launcher.io import atomic_write_text, read_json
from launcher.report.terminal import SHORT, display_rows

@dataclass(kw_only=True, frozen=True)
class ModelSummary:
    predictions: pd.DataFrame
    """calibrate.predictions(): per variant and size, predicted vs measured tokens/s."""
    lines: list[str]
    """One line per layout: the fitted parameters and where each came from."""


def model_summary(sweep_dir: Path, cfg) -> ModelSummary | None:
    """Fit the performance model on the sweep's completed trials and predict the grid's sizes
    plus 2× and 4× the largest; None when nothing completed (or the fit is impossible)."""
    from launcher.model.calibrate import fit_layouts, load_measured, mape, predictions

    measured = load_measured(sweep_dir)
    if not measured:
        return None
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link)
    except ValueError:
        return None
    largest = max(m.trial["world_size"] for m in measured)
    grid = {t["world_size"] for t in (read_json(sweep_dir / "sweep.json").get("trials") or [])}
    pred = predictions(measured, models, sorted(grid | {2 * largest, 4 * largest}))
    lines = []
    for layout, m in models.items():
        inter, intra = m.inter, m.intra
        lines.append(
            f"`{layout}`: {m.compute_s_per_sample * 1e3:.3g} ms of compute per sample, "
            f"{m.overhead_s * 1e3:.3g} ms overhead per step, {m.exposed_comm:.0%} of the all-reduce exposed; "
            f"inter-node {inter.bandwidth_gbps:.3g} GB/s, α {inter.latency_s * 1e6:.3g} µs ({m.source('inter')}); "
            f"intra-node {intra.bandwidth_gbps:.3g} GB/s ({m.source('intra')}); "
            + (f"oversubscribed CPU compute × contention^{m.contention_exponent:.2f}; " if m.contention_exponent != 1 else "")
            + f"fitted on {m.n_observations} trials, residual {m.rel_sigma:.1%}"
        )
    lines.append(f"In-sample error (MAPE) of predicted tokens/s: {mape(pred):.1f}%.")
    return ModelSummary(predictions=pred, lines=lines)


def main(args: argparse.Namespace) -> int:
    """Rebuild from the folder alone: the scheduler is not asked (that is `launcher collect`)."""
    from launcher.run.sweep import collect, show  # TEMP until model_summary leaves this module

    show(collect(args.sweep_dir, ask_scheduler=False))
    return 0
