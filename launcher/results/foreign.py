"""A scaling table measured anywhere (`launcher analyze TABLE`), judged with the launcher's analysis.

The table needs a device count and either a throughput or a time to train:
    gpus (or world_size, devices, ranks, nodes)
    tokens_per_s | samples_per_s | throughput   — higher is better
    hours | time_h | time_s | seconds | days     — time for the same work, lower is better
Optional: status (rows other than `completed` are ignored), variant, scaling (weak|strong).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from launcher.results.cost import Pricing, add_cost
from launcher.results.policy import Policy, Recommendation, recommend
from launcher.results.scaling import add_scaling
from launcher.config.errors import ConfigError

SIZE_COLUMNS = ("gpus", "world_size", "devices", "ranks", "nodes")
RATE_COLUMNS = ("tokens_per_s", "samples_per_s", "throughput")
TIME_COLUMNS = {"hours": 1.0, "time_h": 1.0, "time_s": 1 / 3600, "seconds": 1 / 3600, "days": 24.0}  # → hours


@dataclass(kw_only=True, frozen=True)
class Analysis:
    table: pd.DataFrame
    """The input rows with world_size, status, efficiency, speedup and the cost columns."""
    recommendation: Recommendation
    """The pick under the policy, with its reason."""
    metric: str
    """The throughput column the efficiency was computed on."""
    unit: str
    """What one size unit is called (GPU, node, …)."""


def read_table(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"table {str(path)!r} is not a file; pass a .csv or .parquet results table")
    try:
        return pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except Exception as exc:  # noqa: BLE001 — any unreadable table is the user's input error
        raise ConfigError(f"table {str(path)!r} cannot be read as {'parquet' if p.suffix == '.parquet' else 'CSV'}: "
                          f"{str(exc).splitlines()[0]}") from None


def _pick(df: pd.DataFrame, names) -> str | None:
    found = [c for c in names if c in df.columns]
    return found[0] if found else None


def analyze(df: pd.DataFrame, policy: Policy, pricing: Pricing, *, scaling: str | None = None) -> Analysis:
    """Normalise a user's table and run the analysis on it (pure)."""
    cols = ", ".join(map(str, df.columns)) or "none"
    size = _pick(df, SIZE_COLUMNS)
    if size is None:
        raise ConfigError(f"the table has no device-count column (one of {', '.join(SIZE_COLUMNS)}); it has: {cols}")
    rate = _pick(df, RATE_COLUMNS)
    time_col = _pick(df, tuple(TIME_COLUMNS))
    if rate is None and time_col is None:
        raise ConfigError(
            f"the table has no throughput ({', '.join(RATE_COLUMNS)}) or time-to-train ({', '.join(TIME_COLUMNS)}) "
            f"column; it has: {cols}"
        )
    out = pd.DataFrame({"world_size": pd.to_numeric(df[size], errors="coerce")})
    bad = out["world_size"].isna() | (out["world_size"] < 1) | (out["world_size"] % 1 != 0)
    if bad.any():
        raise ConfigError(f"column {size!r} holds {df[size][bad].iloc[0]}; device counts must be positive integers")
    out["world_size"] = out["world_size"].astype(int)
    out["status"] = df["status"].astype(str) if "status" in df else "completed"
    if "variant" in df:
        out["variant"] = df["variant"]
    if rate is not None:
        metric = rate
        out[metric] = pd.to_numeric(df[rate], errors="coerce")
        default_scaling = "weak"
    else:
        # The same job in less time: throughput is jobs per hour, and the scaling is strong.
        hours = pd.to_numeric(df[time_col], errors="coerce") * TIME_COLUMNS[time_col]
        metric = "jobs_per_hour"
        out["hours"] = hours
        out[metric] = 1 / hours
        default_scaling = "strong"
    for col in (metric,):
        if (out[col].dropna() <= 0).any():
            raise ConfigError(f"column {rate or time_col!r} holds a value ≤ 0; throughputs and times must be positive")
    out["scaling"] = scaling or (df["scaling"].iloc[0] if "scaling" in df else default_scaling)
    if metric == "jobs_per_hour" and pricing.token_budget:
        # A time table's rows are the whole run: its tokens over its hours.
        out["tokens_per_s"] = pricing.token_budget / (out["hours"] * 3600)
    out = add_cost(add_scaling(out, metric), pricing)
    if metric == "jobs_per_hour":
        price = pricing.usd_per_hour
        out["hours_to_budget"] = out["hours"]
        out["device_hours_to_budget"] = out["hours"] * out["world_size"]
        out["usd_to_budget"] = out["device_hours_to_budget"] * price if price is not None else float("nan")
    unit = {"nodes": "node"}.get(size, "GPU" if size == "gpus" else "rank")
    return Analysis(table=out, recommendation=recommend(out, policy, metric=metric, unit=unit), metric=metric, unit=unit)


def check_policy(policy: Policy, pricing: Pricing) -> None:
    """The same rules as sweep.policy in a config, for flags."""
    if policy.name == "fastest_within_budget":
        if policy.budget_device_hours is None and policy.budget_usd is None:
            raise ConfigError("--policy fastest_within_budget needs --budget-gpu-hours and/or --budget-usd")
        if policy.budget_usd is not None and pricing.usd_per_device_hour is None:
            raise ConfigError(f"--budget-usd {policy.budget_usd:g} needs a price; add --usd-per-gpu-hour, e.g. 2.5")
    if not 0 < policy.threshold <= 1:
        raise ConfigError(f"--threshold {policy.threshold} must be in (0, 1]; e.g. --threshold 0.8")
    if not 0 <= pricing.spot_discount < 1:
        raise ConfigError(f"--spot-discount {pricing.spot_discount} must be in [0, 1); e.g. --spot-discount 0.6")
