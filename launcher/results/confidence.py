"""How sure a recommendation is, in one sentence: whether the 90% bootstrap intervals of the sizes
that decide it (launcher/results/uncertainty.py) clear what the policy compares them with, or
whether the decision is within noise."""

from __future__ import annotations

import math

import pandas as pd

from launcher.results.uncertainty import LEVEL, interval_text

UNKNOWN_SWEEP = "unknown — one trial per size, so the spread is unknown; set sweep.repeats=3 (or auto) to measure it"
"""What a sweep's recommendation says when no size has repeats."""


def count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def efficiency_text(row: pd.Series) -> str:
    """`0.83 [0.76–0.90]` (the median alone where the spread is unknown)."""
    return interval_text(row["efficiency"], row.get("efficiency_lo", math.nan), row.get("efficiency_hi", math.nan))


def _known(row: pd.Series, col: str) -> bool:
    return bool(pd.notna(row.get(f"{col}_lo")) and pd.notna(row.get(f"{col}_hi")))


def _basis(rows: list[pd.Series]) -> str:
    counts = sorted({int(r["completed"]) for r in rows})
    each = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return f"({LEVEL:.0%} bootstrap intervals of the median, {each} repeats per size)"


def _unknown_at(rows: list[pd.Series], col: str, unit: str) -> str:
    return ", ".join(count(int(r["world_size"]), unit) for r in rows if not _known(r, col))


def max_efficient(done: pd.DataFrame, pick: int, threshold: float, unit: str) -> str:
    """The pick and every larger size decide it: is any of their efficiency intervals across the threshold?"""
    deciding = [r for _, r in done.iterrows() if int(r["world_size"]) >= pick]
    across = [r for r in deciding if _known(r, "efficiency") and r["efficiency_lo"] <= threshold <= r["efficiency_hi"]]
    if across:
        said = "; ".join(f"{count(int(r['world_size']), unit)}: {efficiency_text(r)} — within noise of the "
                         f"{threshold:.2f} threshold" for r in across)
        return f"low — {said} {_basis(deciding)}"
    if unknown := _unknown_at(deciding, "efficiency", unit):
        return f"unknown — the spread is unknown at {unknown} (fewer than 2 completed repeats there)"
    said = ", ".join(f"{count(int(r['world_size']), unit)} {efficiency_text(r)}" for r in deciding)
    return f"high — the {threshold:.2f} threshold lies outside every deciding size's interval: {said} {_basis(deciding)}"


def _per_device(row: pd.Series, metric: str) -> tuple[float, float, float]:
    n = float(row["world_size"])
    return row[metric] / n, row.get(f"{metric}_lo", math.nan) / n, row.get(f"{metric}_hi", math.nan) / n


def min_cost(best: pd.Series, runner: pd.Series | None, metric: str, unit: str) -> str:
    """Cheapest per token = most work per device: does the runner-up's interval overlap the pick's?"""
    rows = [best] if runner is None else [best, runner]
    if unknown := _unknown_at(rows, metric, unit):
        return f"unknown — the spread is unknown at {unknown} (fewer than 2 completed repeats there)"
    b = _per_device(best, metric)
    said = f"{count(int(best['world_size']), unit)} {interval_text(*b, fmt='{:,.4g}')} per device"
    if runner is None:
        return f"high — the only size: {said} {_basis(rows)}"
    r = _per_device(runner, metric)
    other = f"{count(int(runner['world_size']), unit)} {interval_text(*r, fmt='{:,.4g}')}"
    if r[2] >= b[1]:
        return f"low — {said} vs {other}: within noise of each other {_basis(rows)}"
    return f"high — {said} clears {other} {_basis(rows)}"


def within_budget(rows: list[pd.Series], col: str, cap: float, metric: str, unit: str) -> str:
    """The pick and the next faster size decide it: is either's cost to the budget within noise of the cap?
    Cost to a token budget ∝ 1 / throughput, so its interval follows from the throughput's."""
    if unknown := _unknown_at(rows, metric, unit):
        return f"unknown — the spread is unknown at {unknown} (fewer than 2 completed repeats there)"
    across = []
    for r in rows:
        lo, hi = r[col] * r[metric] / r[f"{metric}_hi"], r[col] * r[metric] / r[f"{metric}_lo"]
        if lo <= cap <= hi:
            across.append(f"{count(int(r['world_size']), unit)}: {interval_text(r[col], lo, hi, fmt='{:,.4g}')} "
                          f"— within noise of the budget {cap:,.4g}")
    if across:
        return f"low — {'; '.join(across)} {_basis(rows)}"
    return f"high — the budget {cap:,.4g} lies outside the deciding sizes' intervals {_basis(rows)}"
