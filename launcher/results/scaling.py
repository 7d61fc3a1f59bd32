"""Scaling efficiency of a results table: each completed row against its combination's smallest
size, each size's 90% bootstrap intervals of median throughput and efficiency over its repeats
(launcher/results/uncertainty.py), and one row per (combination, size) for judging. Any table
with `world_size`, `status` and a throughput column works, so `launcher analyze` judges tables
measured elsewhere the same way."""

from __future__ import annotations

import math

import pandas as pd

from launcher.results.uncertainty import Interval, efficiency_interval, median_interval


def variant_key(df: pd.DataFrame) -> pd.Series:
    """Each row's combination label, '' where nothing was swept (null, or no `variant` column)."""
    if "variant" not in df:
        return pd.Series("", index=df.index, dtype=object)
    return df["variant"].astype(object).where(df["variant"].notna(), "")


def _done(df: pd.DataFrame, metric: str) -> pd.Series:
    return (df["status"] == "completed") & df[metric].notna()


_MEDIANS = ("usd_per_1m_tokens", "device_hours_per_1m_tokens", "hours_to_budget", "usd_to_budget",
            "device_hours_to_budget")
EXACT = Interval(median=1.0, lo=1.0, hi=1.0)
"""The base size's efficiency: 1 by definition, whatever its repeats spread."""


def interval_columns(metric: str = "tokens_per_s") -> list[str]:
    """The columns add_scaling adds beside `metric` and `efficiency`."""
    return [f"{metric}_lo", f"{metric}_hi", "efficiency_lo", "efficiency_hi"]


def size_intervals(done: pd.DataFrame, metric: str) -> dict[tuple[str, int], tuple[Interval, Interval]]:
    """(variant, size) → intervals of its median `metric` and of its efficiency, over the completed
    rows `done`; efficiency against the variant's smallest size, whose own noise widens the rest."""
    out: dict[tuple[str, int], tuple[Interval, Interval]] = {}
    for variant, group in done.groupby(variant_key(done)):
        n0 = group["world_size"].min()
        base = group.loc[group["world_size"] == n0, metric]
        for n, rows in group.groupby("world_size"):
            thr = median_interval(rows[metric])
            eff = EXACT if n == n0 else efficiency_interval(rows[metric], base, size=float(n), base_size=float(n0))
            out[(str(variant), int(n))] = (thr, eff)
    return out


def by_size(df: pd.DataFrame, metric: str = "tokens_per_s") -> pd.DataFrame:
    """One row per (variant, world size) over its completed trials (repeats → medians), with the
    intervals of interval_columns and the worst cpu_contention of its trials, where the table has one."""
    done = df[_done(df, metric) & df["efficiency"].notna()].assign(variant=variant_key(df))
    cols = {metric: "median", "efficiency": "median", "speedup": "median", "status": "count"}
    cols.update({c: "median" for c in _MEDIANS if c in done})
    if "cpu_contention" in done:
        cols["cpu_contention"] = "max"
    out = done.groupby(["variant", "world_size"], as_index=False).agg(cols).rename(columns={"status": "completed"})
    out["scaling"] = done["scaling"].iloc[0] if "scaling" in done and len(done) else "weak"
    intervals = size_intervals(done, metric)
    for i, col in enumerate(interval_columns(metric)):
        interval = [intervals[(v, int(n))][i // 2] for v, n in zip(out["variant"], out["world_size"], strict=True)]
        out[col] = [iv.lo if i % 2 == 0 else iv.hi for iv in interval]
    return out.sort_values(["variant", "world_size"]).reset_index(drop=True)


def add_scaling(df: pd.DataFrame, metric: str = "tokens_per_s") -> pd.DataFrame:
    """speedup and efficiency of each completed row against the smallest completed size N₀:
    efficiency = thr(N)·N₀ / (thr(N₀)·N) (per-rank batch fixed: weak scaling; global batch
    fixed: strong scaling — the `scaling` column says which); and on every completed row its
    size's intervals (interval_columns: the same on each repeat of a size)."""
    df = df.copy()
    for col in ["speedup", "efficiency", *interval_columns(metric)]:
        df[col] = math.nan
    done = df[_done(df, metric)]
    for _, group in done.groupby(variant_key(done)):
        # Each combination (layout, accumulation, …) is judged against its own smallest size.
        n0 = group["world_size"].min()
        thr0 = group.loc[group["world_size"] == n0, metric].median()  # repeats: their median
        df.loc[group.index, "speedup"] = group[metric] / thr0
        df.loc[group.index, "efficiency"] = group[metric] * n0 / (thr0 * group["world_size"])
    intervals = size_intervals(done, metric)
    keys = list(zip(variant_key(done), done["world_size"].astype(int), strict=True))
    for i, col in enumerate(interval_columns(metric)):
        ivs = [intervals[(str(v), n)][i // 2] for v, n in keys]
        df.loc[done.index, col] = [iv.lo if i % 2 == 0 else iv.hi for iv in ivs]
    return df
