"""Cost of a results table: device-hours and $ per 1M tokens (price × (1 − spot discount)) and,
with a token budget, hours, device-hours and $ to train on it."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from launcher.config.schema import LauncherConfig


@dataclass(kw_only=True, frozen=True)
class Pricing:
    usd_per_device_hour: float | None = None
    """List price of one device-hour; None → the $ columns are null."""
    spot_discount: float = 0.0
    """Fraction off the list price (spot/preemptible capacity)."""
    token_budget: float | None = None
    """Tokens the real run trains on; None → the to-budget columns are null."""

    @property
    def usd_per_hour(self) -> float | None:
        if self.usd_per_device_hour is None:
            return None
        return self.usd_per_device_hour * (1 - self.spot_discount)


def add_cost(df: pd.DataFrame, pricing: Pricing) -> pd.DataFrame:
    """Cost per token and to a token budget, from tokens/s and the device count:
    device-hours per 1M tokens = N ÷ (tokens/s × 3600) × 1e6; $ = device-hours × price × (1 − spot);
    hours to budget = budget ÷ tokens/s ÷ 3600 (wall clock), device-hours = that × N."""
    df = df.copy()
    n = df["world_size"]
    thr = df["tokens_per_s"] if "tokens_per_s" in df else pd.Series(float("nan"), index=df.index)
    df["device_hours_per_1m_tokens"] = n / (thr * 3600) * 1e6
    price = pricing.usd_per_hour
    nan = float("nan")
    df["usd_per_1m_tokens"] = nan if price is None else df["device_hours_per_1m_tokens"] * price
    if pricing.token_budget is None:
        df["hours_to_budget"] = df["device_hours_to_budget"] = df["usd_to_budget"] = nan
    else:
        df["hours_to_budget"] = pricing.token_budget / thr / 3600
        df["device_hours_to_budget"] = df["hours_to_budget"] * n
        df["usd_to_budget"] = nan if price is None else df["device_hours_to_budget"] * price
    return df


def pricing_of(cfg: LauncherConfig) -> Pricing:
    """The cost inputs of a config (cluster price and spot discount, sweep token budget)."""
    c = cfg.cluster
    return Pricing(usd_per_device_hour=c.usd_per_device_hour, spot_discount=c.spot_discount,
                   token_budget=cfg.sweep.token_budget)
