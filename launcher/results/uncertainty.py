"""How sure a measured figure is: bootstrap intervals of a size's median throughput and of its
efficiency against the smallest size, from the repeats of each. Pure: numpy only, seeded, so a
table's intervals are the same every time it is built."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

LEVEL = 0.90
"""Two-sided coverage of every interval the tables print."""
N_BOOT = 2000
"""Bootstrap resamples: enough for stable 5th/95th percentiles of a median."""
SEED = 0


@dataclass(kw_only=True, frozen=True)
class Interval:
    median: float
    """The point estimate: the median of the repeats (NaN with none)."""
    lo: float
    """Lower end of the LEVEL interval; NaN when one repeat leaves the spread unknown."""
    hi: float
    """Upper end; NaN likewise."""

    @property
    def known(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def half_width(self) -> float:
        """(hi − lo) / 2 / median: the relative half-width `sweep.target_ci` bounds; inf if unknown."""
        if not self.known or not self.median:
            return math.inf
        return (self.hi - self.lo) / 2.0 / abs(self.median)

    def contains(self, x: float) -> bool:
        return self.known and self.lo <= x <= self.hi


def _clean(values: Sequence[float]) -> np.ndarray:
    a = np.asarray([float(v) for v in values], dtype=float)
    return a[np.isfinite(a)]


def _resampled_medians(a: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    return np.median(a[rng.integers(0, len(a), size=(n_boot, len(a)))], axis=1)


def _percentiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(draws, [tail, 100.0 - tail])
    return float(lo), float(hi)


def median_interval(values: Sequence[float], *, level: float = LEVEL, n_boot: int = N_BOOT,
                    seed: int = SEED) -> Interval:
    """Median of `values` and a percentile-bootstrap interval of it (NaN ends with < 2 values)."""
    a = _clean(values)
    if len(a) == 0:
        return Interval(median=math.nan, lo=math.nan, hi=math.nan)
    med = float(np.median(a))
    if len(a) < 2:
        return Interval(median=med, lo=math.nan, hi=math.nan)
    lo, hi = _percentiles(_resampled_medians(a, np.random.default_rng(seed), n_boot), level)
    return Interval(median=med, lo=lo, hi=hi)


def efficiency_interval(values: Sequence[float], base: Sequence[float], *, size: float, base_size: float,
                        level: float = LEVEL, n_boot: int = N_BOOT, seed: int = SEED) -> Interval:
    """Efficiency median(values)·base_size / (median(base)·size), with both sizes' repeats
    resampled independently, so the base size's own noise widens every other size's interval."""
    a, b = _clean(values), _clean(base)
    if len(a) == 0 or len(b) == 0:
        return Interval(median=math.nan, lo=math.nan, hi=math.nan)
    scale = base_size / size
    med = float(np.median(a)) / float(np.median(b)) * scale
    if len(a) < 2 and len(b) < 2:
        return Interval(median=med, lo=math.nan, hi=math.nan)
    rng = np.random.default_rng(seed)
    draws = _resampled_medians(a, rng, n_boot) / _resampled_medians(b, rng, n_boot) * scale
    lo, hi = _percentiles(draws, level)
    return Interval(median=med, lo=lo, hi=hi)


def interval_text(median: float, lo: float, hi: float, fmt: str = "{:.2f}") -> str:
    """'0.83 [0.76–0.90]': the median and its interval, each in `fmt`; the median alone where the
    spread is unknown (one repeat) or nil (the base size's efficiency is 1 by definition)."""
    shown = fmt.format(median)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi == median:
        return shown
    return f"{shown} [{fmt.format(lo)}–{fmt.format(hi)}]"
