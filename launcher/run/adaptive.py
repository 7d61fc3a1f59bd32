"""Drive an adaptive search with real trials (sweep.search=adaptive).

Every trial of the grid was planned and validated before the sweep folder existed; this only
decides which of them run. After each size, the table is rebuilt from the trial folders and
`search.next_size` picks the next one (with the calibrated model's upper bound once it can be
fitted). Trials never needed are closed as `skipped` with the reason, and `search.json` says
what the search spent against the grid it replaced. Resuming re-derives every decision from
the trial folders, so a killed launcher loses nothing.

Nothing is dropped quietly: each step in search.json says whether the model bound was used
(`"model_bound": "on"` or `"off: <why>"`) and which trials calibration could not read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_json
from launcher.perf.calibrate import Measured, calibration, fit_layouts, predictions
from launcher.results.cost import pricing_of
from launcher.results.table import build_table
from launcher.run.next_size import Decision, next_size
from launcher.trials.folder import close_skipped, is_done, read_document
from launcher.trials.spec import Trial

SEARCH_FILE = "search.json"
# The bound needs two sizes to fit on; before that it is off by design, not for a fault worth reporting.
NOT_YET = "off: fewer than 2 completed sizes to fit on"


@dataclass(kw_only=True, frozen=True)
class Bound:
    """The calibrated model's upper bound on efficiency for one variant, or why there is none."""

    upper: Callable[[int], float | None] | None
    """Upper bound on efficiency at an unmeasured size; None: the search goes without it."""
    state: str
    """`on`, or `off: <why>`: written into search.json's step entry."""
    unreadable: tuple[str, ...] = ()
    """Trials calibration skipped because a file is damaged, each `<trial-id>: <reason>`."""


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


def _upper_bound(sweep_dir: Path, cfg: LauncherConfig, variant: str) -> Bound:
    """The model's upper bound on efficiency at unmeasured sizes, once ≥ 2 sizes completed."""
    found = calibration(sweep_dir)  # the rule plan --from and the report follow
    unreadable = found.unreadable
    if found.refused_for_good:  # not for want of trials yet: the sweep can never be fitted
        return Bound(upper=None, state=f"off: this sweep {found.refusal}", unreadable=tuple(unreadable))
    measured = [m for m in found.measured if m.variant == variant]
    if len({m.trial["world_size"] for m in measured}) < 2:
        return Bound(upper=None, state=NOT_YET, unreadable=tuple(unreadable))
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link)
    except ValueError as exc:  # the search still works without the bound; it only measures more
        return Bound(upper=None, state=f"off: the model fit failed: {exc}", unreadable=tuple(unreadable))
    return Bound(upper=lambda n: _predicted(measured, models, n), state="on", unreadable=tuple(unreadable))


def _predicted(measured: list[Measured], models: dict, n: int) -> float | None:
    pred = predictions(measured, models, [n])
    row = pred[pred["world_size"] == n]
    return None if row.empty else float(row["efficiency_high"].iloc[0])


def _history(sweep_dir: Path) -> list[dict]:
    """The steps search.json already holds; a damaged file is said in a first entry, not dropped."""
    doc = read_document(sweep_dir / SEARCH_FILE)
    if doc.corrupt:
        return [{"note": f"{doc.reason}; its earlier steps are lost (the decisions are re-derived from the trials)"}]
    steps = (doc.doc or {}).get("steps")
    return steps if isinstance(steps, list) else []


def _entry(d: Decision, bound: Bound, **fields: object) -> dict:
    """A decision as search.json keeps it: the size, why, whether the model bound helped, and
    which trials calibration could not read."""
    entry = {**fields, "reason": d.reason, "model_bound": bound.state}
    return {**entry, "unreadable_trials": list(bound.unreadable)} if bound.unreadable else entry


def run_adaptive(
    sweep_dir: Path,
    cfg: LauncherConfig,
    trials: list[Trial],
    run: Callable[[list[Trial]], None],
    log: Callable[[str], None] = print,
) -> dict:
    """Measure sizes one at a time until the search ends for every variant; returns search.json."""
    variants = sorted({t.variant for t in trials})
    decisions: dict[str, Decision] = {}
    bounds: dict[str, Bound] = {}
    history = _history(sweep_dir)
    while True:
        df = build_table(sweep_dir, pricing_of(cfg))
        batch: list[Trial] = []
        for v in variants:
            mine = [t for t in trials if t.variant == v]
            eff = _efficiencies(df, mine, lambda t: is_done(sweep_dir, t))
            bounds[v] = _upper_bound(sweep_dir, cfg, v)
            d = decisions[v] = next_size([t.world_size for t in mine], eff, cfg.sweep.threshold, bounds[v].upper)
            if d.size is not None:
                batch = [t for t in mine if t.world_size == d.size and not is_done(sweep_dir, t)]
                log(f"adaptive search: {f'{v}: ' if v else ''}{d.size} ranks next ({d.reason})")
                history.append(_entry(d, bounds[v], variant=v, size=d.size))
                break
        if not batch:
            break
        _write(sweep_dir, history, decisions, bounds, spent=None)
        run(batch)
    _close_unneeded(sweep_dir, trials, decisions, log)
    return _write(sweep_dir, history, decisions, bounds, spent=_cost(sweep_dir, cfg, trials))


def _close_unneeded(
    sweep_dir: Path, trials: list[Trial], decisions: dict[str, Decision], log: Callable[[str], None]
) -> None:
    """Close every trial the search did not need as `skipped`, with the decision's reason."""
    for t in trials:
        left = close_skipped(sweep_dir, t, f"adaptive search did not need it: {decisions[t.variant].reason}")
        if left:
            log(f"adaptive search: {left}")


def _cost(sweep_dir: Path, cfg: LauncherConfig, trials: list[Trial]) -> dict:
    """Device-hours the search spent, and what the whole grid would have cost: measured trials
    at their cost, the rest at the calibrated model's predicted trial time."""
    df = build_table(sweep_dir, pricing_of(cfg)).set_index("trial_id")
    spent = float(df["device_hours"].fillna(0).sum())
    estimate, note = spent, None
    skipped = [t for t in trials if df.loc[t.trial_id, "status"] == "skipped"]
    found = calibration(sweep_dir)
    measured = found.measured
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link) if measured else {}
        pred = predictions(measured, models, sorted({t.world_size for t in skipped}))
        for t in skipped:
            row = pred[(pred["variant"] == t.variant) & (pred["world_size"] == t.world_size)] if len(pred) else pred
            estimate += float(row["trial_device_hours"].iloc[0]) if len(row) else math.nan
    except ValueError as exc:
        estimate, note = math.nan, f"the model fit failed: {exc}"
    if note is None and math.isnan(estimate):
        note = f"this sweep {found.refusal}" if found.refused_for_good else "the model cannot predict some skipped size"
    cost = {
        "trials_run": len(trials) - len(skipped),
        "trials_in_grid": len(trials),
        "device_hours_spent": spent,
        "device_hours_grid_estimate": estimate,
        "ratio": spent / estimate if estimate and math.isfinite(estimate) else None,
    }
    return {**cost, "estimate_note": note} if note else cost


def _write(
    sweep_dir: Path, history: list[dict], decisions: dict[str, Decision], bounds: dict[str, Bound], spent: dict | None
) -> dict:
    final = {v: _entry(d, bounds[v], predicted_bad=list(d.predicted_bad)) for v, d in decisions.items()}
    doc = {"steps": history, "final": final if spent is not None else None, "cost": spent}
    atomic_write_json(sweep_dir / SEARCH_FILE, doc)
    return doc


def _bound_note(doc: dict) -> str:
    """A sentence on decisions taken without the model bound for a fault (not the expected
    start-up), and one on trials calibration could not read."""
    steps = [s for s in doc.get("steps") or [] if isinstance(s, dict) and "model_bound" in s]
    steps += [s for s in (doc.get("final") or {}).values() if isinstance(s, dict) and "model_bound" in s]
    off = [str(s["model_bound"]) for s in steps if s["model_bound"] not in ("on", NOT_YET)]
    unreadable = sorted({u for s in steps for u in s.get("unreadable_trials") or []})
    parts = (
        [f" The model's upper bound was off at {len(off)} decision(s): {off[-1].removeprefix('off: ')}."] if off else []
    )
    if unreadable:
        parts.append(f" Calibration skipped {len(unreadable)} unreadable trial(s): {'; '.join(unreadable)}.")
    return "".join(parts)


def summary(sweep_dir: Path) -> str | None:
    """One line for the report: what the search spent against the grid, and what it went without."""
    doc = read_document(sweep_dir / SEARCH_FILE)
    if doc.corrupt:
        return f"Adaptive search: {doc.reason}, so what it spent is not known."
    cost = (doc.doc or {}).get("cost")
    if not cost:
        return None
    ratio = cost.get("ratio")
    share = f" ({ratio:.0%} of it)" if ratio is not None else ""
    estimate = cost["device_hours_grid_estimate"]
    if estimate is not None and math.isfinite(estimate):
        grid = f"≈{estimate:.4g} for the whole grid{share}"
    else:
        grid = f"an unknown amount for the whole grid ({cost.get('estimate_note') or 'no estimate'})"
    return (
        f"Adaptive search ran {cost['trials_run']} of {cost['trials_in_grid']} trials: "
        f"{cost['device_hours_spent']:.4g} device-hours spent vs {grid}." + _bound_note(doc.doc or {})
    )
