"""Scaling efficiency of a results table: each completed row against its combination's smallest
size, and one row per (combination, size) for judging. Any table with `world_size`, `status` and
a throughput column works, so `launcher analyze` judges tables measured elsewhere the same way."""

from __future__ import annotations

import pandas as pd


def _variant(df: pd.DataFrame) -> pd.Series:
    return df["variant"].fillna("") if "variant" in df else pd.Series("", index=df.index)


def _done(df: pd.DataFrame, metric: str) -> pd.Series:
    return (df["status"] == "completed") & df[metric].notna()


_MEDIANS = ("usd_per_1m_tokens", "device_hours_per_1m_tokens", "hours_to_budget", "usd_to_budget",
            "device_hours_to_budget")  # fmt: skip


def by_size(df: pd.DataFrame, metric: str = "tokens_per_s") -> pd.DataFrame:
    """One row per (variant, world size) over its completed trials (repeats → medians)."""
    done = df[_done(df, metric) & df["efficiency"].notna()].assign(variant=_variant(df))
    cols = {metric: "median", "efficiency": "median", "speedup": "median", "status": "count"}
    cols.update({c: "median" for c in _MEDIANS if c in done})
    out = done.groupby(["variant", "world_size"], as_index=False).agg(cols).rename(columns={"status": "completed"})
    out["scaling"] = done["scaling"].iloc[0] if "scaling" in done and len(done) else "weak"
    return out.sort_values(["variant", "world_size"]).reset_index(drop=True)


def add_scaling(df: pd.DataFrame, metric: str = "tokens_per_s") -> pd.DataFrame:
    """speedup and efficiency of each completed row against the smallest completed size N₀:
    efficiency = thr(N)·N₀ / (thr(N₀)·N) (per-rank batch fixed: weak scaling; global batch
    fixed: strong scaling — the `scaling` column says which)."""
    df = df.copy()
    df["speedup"] = float("nan")
    df["efficiency"] = float("nan")
    variant = _variant(df)
    for _, group in df[_done(df, metric)].groupby(variant):
        # Each combination (layout, accumulation, …) is judged against its own smallest size.
        n0 = group["world_size"].min()
        thr0 = group.loc[group["world_size"] == n0, metric].median()  # repeats: their median
        df.loc[group.index, "speedup"] = group[metric] / thr0
        df.loc[group.index, "efficiency"] = group[metric] * n0 / (thr0 * group["world_size"])
    return df
