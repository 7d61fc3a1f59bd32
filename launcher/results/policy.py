"""The recommended size of a results table under a policy, with a one-sentence reason:
`max_efficient`, `min_cost` or `fastest_within_budget`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from launcher.config.choices import POLICIES
from launcher.config.schema import LauncherConfig
from launcher.results import confidence as conf
from launcher.results import flags
from launcher.results.scaling import by_size, variant_key
from launcher.results.uncertainty import interval_text
from launcher.trials.ends import UNFINISHED

@dataclass(kw_only=True, frozen=True)
class Policy:
    name: str = "max_efficient"
    """One of POLICIES."""
    threshold: float = 0.8
    """max_efficient: the efficiency a size must keep."""
    budget_device_hours: float | None = None
    """fastest_within_budget: device-hours allowed for the token budget."""
    budget_usd: float | None = None
    """fastest_within_budget: dollars allowed for the token budget."""

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ValueError(f"policy {self.name!r} is not one of {', '.join(POLICIES)}")


@dataclass(kw_only=True, frozen=True)
class Recommendation:
    world_size: int | None
    """The recommended size; None when nothing completed (or nothing fits the budget)."""
    reason: str
    """One sentence saying why."""
    variant: str = ""
    """The combination recommended, when a sweep held several."""
    confidence: str = ""
    """How sure the pick is (`high — …`, `low — … within noise of …`, `unknown — …`), from the
    bootstrap intervals of the sizes that decide it; '' where nothing is said (no repeats and no
    `unknown_spread` sentence, e.g. a predicted table)."""


_count = conf.count
ONLY = "the only size that completed"
ONLY_FREE = "the only size measured without core contention"


def recommend(df: pd.DataFrame, policy: Policy | float, *, metric: str = "tokens_per_s", unit: str = "rank",
              unknown_spread: str | None = None) -> Recommendation:
    """The size to use under `policy` (a bare float is max_efficient at that threshold), with
    the evidence and its confidence. Several combinations: the best pick over all of them. A size
    whose trials oversubscribed the cores (cpu_contention > 1) is left out, with the reason.
    `unknown_spread`: the confidence when no size has repeats (None: say nothing)."""
    if not isinstance(policy, Policy):
        policy = Policy(threshold=float(policy))
    sizes = by_size(df, metric)
    unfinished = [n] if (n := incomplete_note(df, unit)) else []
    if sizes.empty:
        nothing = "no trial completed, so there is nothing to recommend"
        return Recommendation(world_size=None, reason="; ".join([nothing, *unfinished]))
    sizes, excluded = _without_contention(sizes, df, unit)
    if sizes.empty:
        return Recommendation(world_size=None, reason=f"no size measured scaling: {excluded}")
    groups = [(v, g.reset_index(drop=True)) for v, g in sizes.groupby("variant")]
    pick = {"max_efficient": _max_efficient, "min_cost": _min_cost, "fastest_within_budget": _within_budget}
    rec = pick[policy.name](groups, policy, metric, unit)
    notes = [excluded] if excluded else []
    oom = sorted({int(n) for n in df.loc[df["status"] == "oom", "world_size"]}) if "status" in df else []
    if oom:  # infeasible, not slow: say so beside the pick
        notes.append(f"out of memory (infeasible) at {', '.join(map(str, oom))} {unit}s")
    reason = "; ".join([rec.reason.replace(ONLY, ONLY_FREE) if excluded else rec.reason, *notes, *unfinished])
    if len(groups) > 1 and rec.variant:
        reason = f"{rec.variant}, {reason}"
    sure = rec.confidence if len(sizes) > 1 and (sizes["completed"] > 1).any() else ""
    if not sure and len(sizes) > 1 and rec.world_size is not None:
        sure = unknown_spread or ""
    return Recommendation(world_size=rec.world_size, reason=reason, variant=rec.variant, confidence=sure)


def incomplete_note(df: pd.DataFrame, unit: str = "rank") -> str:
    """`incomplete sweep: 2 of 3 trials did not finish (2 ranks cancelled, 4 ranks not started); …`, or ""
    when every trial ran to an end of its own: a pick among the sizes measured so far must not read as final."""
    if "status" not in df or "world_size" not in df:
        return ""
    left = df[df["status"].isin(UNFINISHED)]
    if left.empty:
        return ""
    what = ", ".join(f"{_count(int(n), unit)} {s}" for n, s in zip(left["world_size"], left["status"], strict=True))
    return (
        f"incomplete sweep: {len(left)} of {len(df)} trials did not finish ({what}); "
        "only the sizes that completed were compared"
    )


def _without_contention(sizes: pd.DataFrame, df: pd.DataFrame, unit: str) -> tuple[pd.DataFrame, str]:
    """The sizes whose trials had their cores to themselves, and a clause naming each other one:
    ranks that wait for a core measure contention, not scaling."""
    if "cpu_contention" not in sizes:
        return sizes, ""
    crowded = sizes["cpu_contention"] > 1.0 + 1e-9
    clauses = []
    for _, row in sizes[crowded].iterrows():
        n, variant = int(row["world_size"]), row["variant"]
        who = f"{variant} at " if variant else ""
        said = _contention_words(df, variant, n, row["cpu_contention"])
        clauses.append(f"{who}{_count(n, unit)} excluded: {said} measure contention, not scaling")
    return sizes[~crowded], "; ".join(clauses)


def _contention_words(df: pd.DataFrame, variant: str, n: int, contention: float) -> str:
    """`4 ranks on 2 cores (cpu_contention 2.0)`: the size's own flag where the table has one."""
    if "flags" in df:
        for cell in df.loc[(df["world_size"] == n) & (variant_key(df) == variant), "flags"]:
            if said := flags.detail(cell, flags.OVERSUBSCRIBED):
                return said
    return f"more threads than cores (cpu_contention {contention:.1f})"


def _max_efficient(groups, policy: Policy, metric: str, unit: str) -> Recommendation:
    threshold = policy.threshold
    good = [(v, d, d[d["efficiency"] >= threshold].iloc[-1]) for v, d in groups if (d["efficiency"] >= threshold).any()]
    if not good:  # only where the smallest size itself was left out (excluded for contention)
        return Recommendation(world_size=None, reason=f"no size left holds efficiency ≥ {threshold:.2f}")
    variant, done, pick = max(good, key=lambda g: (g[2]["world_size"], g[2][metric]))
    scaling = done["scaling"].iloc[0]
    n0 = int(done["world_size"].iloc[0])
    n = int(pick["world_size"])
    if len(done) == 1:
        return Recommendation(world_size=n0, reason=f"{_count(n0, unit)}: {ONLY}", variant=variant)
    bigger = done[done["world_size"] > n]
    if n == n0:
        reason = f"{_count(n, unit)}: every larger size fell below {scaling}-scaling efficiency {threshold:.2f}"
    else:
        reason = (
            f"{_count(n, unit)}: largest size with {scaling}-scaling efficiency ≥ {threshold:.2f} "
            f"({_efficiency_text(pick, threshold)}, {pick['speedup']:.2f}× the throughput of {_count(n0, unit)})"
        )
    if not bigger.empty:
        nxt = bigger.iloc[0]
        m = int(nxt["world_size"])
        reason += (
            f"; {_count(m, unit)} reach only {_efficiency_text(nxt, threshold)} "
            f"({nxt[metric] / pick[metric]:.2f}× the speed for {m / n:.2f}× the devices"
            + (f", {nxt['usd_per_1m_tokens'] / pick['usd_per_1m_tokens']:.2f}× the $ per token)"
               if pd.notna(pick.get("usd_per_1m_tokens")) else ")")
        )
    sure = conf.max_efficient(done, n, threshold, unit)
    return Recommendation(world_size=n, reason=reason, variant=variant, confidence=sure)


MAX_DECIMALS = 12
"""Beyond this an efficiency is the threshold itself, to float rounding."""


def _efficiency_text(row: pd.Series, threshold: float) -> str:
    """`0.83 [0.76–0.90]` (conf.efficiency_text) with the fewest decimals, at least 2, at which the
    efficiency reads on its own side of the threshold: 0.7996 under 0.80 is printed 0.7996, never
    "reach only 0.80"."""
    e = row["efficiency"]
    d = next((d for d in range(2, MAX_DECIMALS) if (round(e, d) >= round(threshold, d)) == (e >= threshold)),
             MAX_DECIMALS)
    return interval_text(e, row.get("efficiency_lo", math.nan), row.get("efficiency_hi", math.nan), f"{{:.{d}f}}")


def _min_cost(groups, policy: Policy, metric: str, unit: str) -> Recommendation:
    # $ = device-hours × one price, so the cheapest size per token is the one with the fewest
    # device-hours per token (per-device throughput); ties go to the faster, larger size.
    rows = [(v, r) for v, d in groups for _, r in d.iterrows()]
    per_device = {id(r): r[metric] / r["world_size"] for _, r in rows}
    variant, best = max(rows, key=lambda vr: (round(per_device[id(vr[1])], 12), vr[1]["world_size"]))
    n = int(best["world_size"])
    if "usd_per_1m_tokens" in best and pd.notna(best["usd_per_1m_tokens"]):
        cost = f"${best['usd_per_1m_tokens']:.4g} per 1M tokens"
    elif "device_hours_per_1m_tokens" in best and pd.notna(best["device_hours_per_1m_tokens"]):
        cost = f"{best['device_hours_per_1m_tokens']:.4g} device-hours per 1M tokens"
    else:
        cost = f"{per_device[id(best)]:.4g} {metric.replace('_per_', '/')} per device"
    others = [r for _, r in rows if r is not best]
    reason = f"{_count(n, unit)}: lowest cost per unit of work ({cost})"
    runner = max(others, key=lambda r: per_device[id(r)]) if others else None
    if runner is not None:
        m = int(runner["world_size"])
        reason += f"; the next cheapest, {_count(m, unit)}, costs {per_device[id(best)] / per_device[id(runner)]:.2f}× as much for the same work"
    sure = conf.min_cost(best, runner, metric, unit)
    return Recommendation(world_size=n, reason=reason, variant=variant, confidence=sure)


def _within_budget(groups, policy: Policy, metric: str, unit: str) -> Recommendation:
    limits = []
    if policy.budget_device_hours is not None:
        limits.append(("device_hours_to_budget", policy.budget_device_hours, "{:,.0f} device-hours"))
    if policy.budget_usd is not None:
        limits.append(("usd_to_budget", policy.budget_usd, "${:,.0f}"))
    if not limits:
        raise ValueError("fastest_within_budget needs budget_device_hours and/or budget_usd")
    rows = [(v, r) for v, d in groups for _, r in d.iterrows()]
    missing = [col for col, _, _ in limits if not all(col in r and pd.notna(r[col]) for _, r in rows)]
    if missing:
        return Recommendation(world_size=None, reason=f"the table has no {missing[0]} (set the token budget and price)")
    fits = [(v, r) for v, r in rows if all(r[col] <= cap for col, cap, _ in limits)]
    budget = " and ".join(fmt.format(cap) for _, cap, fmt in limits)
    if not fits:
        v, cheapest = min(rows, key=lambda vr: vr[1][limits[0][0]])
        spend = limits[0][2].format(cheapest[limits[0][0]])
        return Recommendation(world_size=None, variant=v, reason=(
            f"no size fits the budget of {budget}; the cheapest, {_count(int(cheapest['world_size']), unit)}, "
            f"needs {spend}"))
    variant, best = max(fits, key=lambda vr: (vr[1][metric], -vr[1]["world_size"]))
    n = int(best["world_size"])
    spend = " and ".join(fmt.format(best[col]) for col, _, fmt in limits)
    reason = f"{_count(n, unit)}: fastest size within {budget} ({best['hours_to_budget']:,.1f} h, {spend})"
    faster = [r for _, r in rows if r[metric] > best[metric]]
    deciding = [best]
    if faster:
        nxt = min(faster, key=lambda r: r[metric])
        col, cap, fmt = next((c, cap, f) for c, cap, f in limits if nxt[c] > cap)
        reason += f"; {_count(int(nxt['world_size']), unit)} would need {fmt.format(nxt[col])}"
        deciding.append(nxt)
    sure = conf.within_budget(deciding, limits[0][0], limits[0][1], metric, unit)
    return Recommendation(world_size=n, reason=reason, variant=variant, confidence=sure)


def policy_of(cfg: LauncherConfig) -> Policy:
    """The recommendation policy of a config."""
    s = cfg.sweep
    return Policy(name=s.policy, threshold=s.threshold, budget_device_hours=s.budget_device_hours,
                  budget_usd=s.budget_usd)
