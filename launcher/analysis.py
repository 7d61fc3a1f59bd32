"""Pure analysis of a results table: scaling efficiency, cost, and the recommended size."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


def _variant(df: pd.DataFrame) -> pd.Series:
    return df["variant"].fillna("") if "variant" in df else pd.Series("", index=df.index)


def by_size(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, world size) over its completed trials (repeats → medians)."""
    done = df[(df["status"] == "completed") & df["efficiency"].notna()].assign(variant=_variant(df))
    cols = {"tokens_per_s": "median", "efficiency": "median", "speedup": "median", "trial_id": "count"}
    out = done.groupby(["variant", "world_size"], as_index=False).agg(cols).rename(columns={"trial_id": "completed"})
    if "scaling" in done:
        out["scaling"] = done["scaling"].iloc[0] if len(done) else "weak"
    return out.sort_values(["variant", "world_size"]).reset_index(drop=True)


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """speedup and efficiency of each completed row against the smallest completed size N₀:
    efficiency = thr(N)·N₀ / (thr(N₀)·N) on tokens/s (per-rank batch fixed: weak scaling;
    global batch fixed: strong scaling — the `scaling` column says which)."""
    df = df.copy()
    df["speedup"] = float("nan")
    df["efficiency"] = float("nan")
    variant = _variant(df)
    for _, group in df[(df["status"] == "completed") & df["tokens_per_s"].notna()].groupby(variant):
        # Each combination (layout, accumulation, …) is judged against its own smallest size.
        n0 = group["world_size"].min()
        thr0 = group.loc[group["world_size"] == n0, "tokens_per_s"].median()  # repeats: their median
        df.loc[group.index, "speedup"] = group["tokens_per_s"] / thr0
        df.loc[group.index, "efficiency"] = group["tokens_per_s"] * n0 / (thr0 * group["world_size"])
    return df


def add_cost(df: pd.DataFrame, usd_per_device_hour: float | None) -> pd.DataFrame:
    """$ per 1M tokens = price × devices ÷ (tokens/s × 3600) × 1e6; null without a price."""
    df = df.copy()
    if usd_per_device_hour is None:
        df["usd_per_1m_tokens"] = float("nan")
    else:
        df["usd_per_1m_tokens"] = usd_per_device_hour * df["world_size"] / (df["tokens_per_s"] * 3600) * 1e6
    return df


@dataclass(kw_only=True, frozen=True)
class Recommendation:
    world_size: int | None
    """The recommended size; None when nothing completed."""
    reason: str
    """One sentence saying why."""


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def recommend(df: pd.DataFrame, threshold: float) -> Recommendation:
    """The largest size whose (median) efficiency is ≥ threshold, with the evidence for and
    against. With several combinations: the largest such size over all of them, the fastest
    combination at that size."""
    if "trial_id" not in df:
        df = df.assign(trial_id=range(len(df)))
    sizes = by_size(df)
    if sizes.empty:
        return Recommendation(world_size=None, reason="no trial completed, so there is nothing to recommend")
    several = sizes["variant"].nunique() > 1
    picks = []
    for variant, done in sizes.groupby("variant"):
        picks.append((variant, done.reset_index(drop=True)))
    good = [(v, d, d[d["efficiency"] >= threshold].iloc[-1]) for v, d in picks if (d["efficiency"] >= threshold).any()]
    variant, done, pick = max(good, key=lambda g: (g[2]["world_size"], g[2]["tokens_per_s"]))
    rec = _recommend_one(done, pick, threshold)
    if several:
        return Recommendation(world_size=rec.world_size, reason=f"{variant}, {rec.reason}")
    return rec


def _recommend_one(done: pd.DataFrame, pick: pd.Series, threshold: float) -> Recommendation:
    scaling = done["scaling"].iloc[0] if "scaling" in done else "weak"
    n0 = int(done["world_size"].iloc[0])
    n = int(pick["world_size"])
    if len(done) == 1:
        return Recommendation(world_size=n0, reason=f"{_ranks(n0)}: the only size that completed")
    if n == n0:
        reason = f"{_ranks(n)}: every larger size fell below {scaling}-scaling efficiency {threshold:.2f}"
    else:
        reason = (
            f"{_ranks(n)}: largest size with {scaling}-scaling efficiency ≥ {threshold:.2f} "
            f"({pick['efficiency']:.2f}, {pick['speedup']:.2f}× the throughput of {_ranks(n0)})"
        )
    bigger = done[done["world_size"] > n]
    if not bigger.empty:
        nxt = bigger.iloc[0]
        m = int(nxt["world_size"])
        reason += (
            f"; {_ranks(m)} reach only {nxt['efficiency']:.2f} "
            f"({nxt['tokens_per_s'] / pick['tokens_per_s']:.2f}× the speed for {m / n:.2f}× the devices)"
        )
    return Recommendation(world_size=n, reason=reason)
