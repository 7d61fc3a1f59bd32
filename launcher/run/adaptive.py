"""Drive an adaptive search with real trials (sweep.search=adaptive).

Every trial of the grid was planned and validated before the sweep folder existed; this only
decides which of them run. After each size, the table is rebuilt from the trial folders and
`search.next_size` picks the next one (with the calibrated model's upper bound once it can be
fitted). Trials never needed are closed as `skipped` with the reason, and `search.json` says
what the search spent against the grid it replaced. Resuming re-derives every decision from
the trial folders, so a killed launcher loses nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import pandas as pd

from launcher.config.derived import pricing_of
from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_json, read_json
from launcher.trials.spec import Trial
from launcher.results.table import build_table
from launcher.run.next_size import Decision, next_size


def _efficiencies(df: pd.DataFrame, trials: list[Trial], done: Callable[[Trial], bool]) -> dict[int, float | None]:
    """Sizes whose trials have all ended → median efficiency (None when none completed)."""
    out: dict[int, float | None] = {}
    rows = df.set_index("trial_id")
    for size in sorted({t.world_size for t in trials}):
        mine = [t for t in trials if t.world_size == size]
        if not all(done(t) for t in mine) or all(rows.loc[t.trial_id, "status"] == "skipped" for t in mine):
            continue
        eff = rows.loc[[t.trial_id for t in mine], "efficiency"].dropna()
        out[size] = float(eff.median()) if len(eff) else None
    return out


def _upper_bound(sweep_dir: Path, cfg: LauncherConfig, variant: str):
    """The model's upper bound on efficiency at unmeasured sizes, once ≥ 2 sizes completed."""
    from launcher.model.calibrate import fit_layouts, load_measured

    measured = [m for m in load_measured(sweep_dir) if m.variant == variant]
    if len({m.trial["world_size"] for m in measured}) < 2:
        return None
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link)
    except ValueError:
        return None
    return lambda n: _predicted(measured, models, n)


def _predicted(measured, models, n: int) -> float | None:
    from launcher.model.calibrate import predictions

    pred = predictions(measured, models, [n])
    row = pred[pred["world_size"] == n]
    return None if row.empty else float(row["efficiency_high"].iloc[0])


def run_adaptive(sweep_dir: Path, cfg: LauncherConfig, trials: list[Trial], run: Callable[[list[Trial]], None],
                 log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Measure sizes one at a time until the search ends for every variant; returns search.json."""
    from launcher.run.sweep import is_done

    threshold = cfg.sweep.threshold
    variants = sorted({t.variant for t in trials})
    decisions: dict[str, Decision] = {}
    history: list[dict] = read_json(sweep_dir / "search.json").get("steps", []) if (sweep_dir / "search.json").exists() else []
    while True:
        df = build_table(sweep_dir, pricing_of(cfg))
        batch: list[Trial] = []
        for v in variants:
            mine = [t for t in trials if t.variant == v]
            eff = _efficiencies(df, mine, lambda t: is_done(sweep_dir, t))
            d = next_size([t.world_size for t in mine], eff, threshold, _upper_bound(sweep_dir, cfg, v))
            decisions[v] = d
            if d.size is not None:
                batch = [t for t in mine if t.world_size == d.size and not is_done(sweep_dir, t)]
                label = f"{v}: " if v else ""
                log(f"adaptive search: {label}{d.size} ranks next ({d.reason})")
                history.append({"variant": v, "size": d.size, "reason": d.reason})
                break
        if not batch:
            break
        _write(sweep_dir, history, decisions, spent=None)
        run(batch)
    for t in trials:
        if not is_done(sweep_dir, t):
            d = decisions[t.variant]
            atomic_write_json(sweep_dir / "trials" / t.trial_id / "outcome.json", {
                "executor": "search", "status": "skipped", "final": True,
                "reason": f"adaptive search did not need it: {d.reason}",
            })  # fmt: skip
    return _write(sweep_dir, history, decisions, spent=_cost(sweep_dir, cfg, trials))


def _cost(sweep_dir: Path, cfg: LauncherConfig, trials: list[Trial]) -> dict:
    """Device-hours the search spent, and what the whole grid would have cost: measured trials
    at their cost, the rest at the calibrated model's predicted trial time."""
    from launcher.model.calibrate import fit_layouts, load_measured, predictions

    df = build_table(sweep_dir, pricing_of(cfg)).set_index("trial_id")
    spent = float(df["device_hours"].fillna(0).sum())
    estimate = spent
    skipped = [t for t in trials if df.loc[t.trial_id, "status"] == "skipped"]
    measured = load_measured(sweep_dir)
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link) if measured else {}
        pred = predictions(measured, models, sorted({t.world_size for t in skipped}))
        for t in skipped:
            row = pred[(pred["variant"] == t.variant) & (pred["world_size"] == t.world_size)]
            estimate += float(row["trial_device_hours"].iloc[0]) if len(row) else math.nan
    except ValueError:
        estimate = math.nan
    return {
        "trials_run": len(trials) - len(skipped), "trials_in_grid": len(trials), "device_hours_spent": spent,
        "device_hours_grid_estimate": estimate,
        "ratio": spent / estimate if estimate and math.isfinite(estimate) else None,
    }  # fmt: skip


def _write(sweep_dir: Path, history: list[dict], decisions: dict[str, Decision], spent: dict | None) -> dict:
    doc = {
        "steps": history,
        "final": {v: {"reason": d.reason, "predicted_bad": list(d.predicted_bad)} for v, d in decisions.items()}
        if spent is not None else None,
        "cost": spent,
    }  # fmt: skip
    atomic_write_json(sweep_dir / "search.json", doc)
    return doc


def summary(sweep_dir: Path) -> str | None:
    """One line for the report: what the search spent against the grid."""
    path = sweep_dir / "search.json"
    if not path.exists():
        return None
    cost = read_json(path).get("cost")
    if not cost:
        return None
    ratio = cost.get("ratio")
    share = f" ({ratio:.0%} of it)" if ratio is not None else ""
    return (
        f"Adaptive search ran {cost['trials_run']} of {cost['trials_in_grid']} trials: "
        f"{cost['device_hours_spent']:.4g} device-hours spent vs ≈{cost['device_hours_grid_estimate']:.4g} "
        f"for the whole grid{share}."
    )
