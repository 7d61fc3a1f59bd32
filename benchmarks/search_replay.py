"""Replaying the adaptive search against scaling curves it did not make (pure; no I/O but reading
the curve files): published tables and the dev bed's measured trials.

One replay draws a measured table for the whole grid (every size × repeats, with noise), and
both searches see the same draws: the grid judges every size, the adaptive search
(`launcher.run.next_size.run_search`, the rule `sweep.search=adaptive` drives) only the sizes it
asks for. Each then picks as the `max_efficient` policy does (largest size whose median
efficiency ≥ threshold), and its pick is scored on the noise-free curve.
"""

from __future__ import annotations

import csv
import hashlib
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from launcher.run.next_size import run_search


@dataclass(kw_only=True, frozen=True)
class Curve:
    """One scaling curve: per-device throughput by size (any unit: only ratios matter)."""

    family: str
    """Where it comes from (`published:<source>` or `bed`): results are reported per family."""
    name: str
    """The curve as its source names it."""
    rate: dict[int, float]
    """Size → per-device throughput (noise-free truth; for the bed, the median of its trials)."""
    trials: dict[int, tuple[tuple[float, float], ...]] | None = None
    """Bed only: size → every measured trial as (per-device throughput, device-hours)."""
    citation: str = ""
    """Source and table (published), or how the trials were measured (bed)."""
    bounds: dict[frozenset[int], dict[int, float]] | None = None
    """Bed only: measured sizes → the calibrated model's upper bound on efficiency at each
    unmeasured size (benchmarks/knee.py fits it on the bed's trials, as adaptive search does)."""

    @property
    def sizes(self) -> list[int]:
        return sorted(self.rate)

    def efficiency(self, n: int) -> float:
        """True efficiency against the smallest size, as the sweep's table defines it."""
        return self.rate[n] / self.rate[self.sizes[0]]

    def throughput(self, n: int) -> float:
        """True aggregate throughput: what a pick is worth."""
        return n * self.rate[n]


@dataclass(kw_only=True, frozen=True)
class Noise:
    """How a measurement departs from the truth."""

    sigma: float
    """Log-normal spread of one trial's throughput (0.1 ≈ ±10% run to run); 0: none."""
    slow_p: float = 0.0
    """Chance that a trial hits a slow stretch (a non-monotone outlier)."""
    slow_factor: float = 1.0
    """Throughput of a trial in a slow stretch, relative to its draw."""
    label: str = ""
    """How the report names it."""


def load_published(path: Path) -> list[Curve]:
    """published_curves.csv → curves. `kind` says what `value` is: aggregate throughput
    (divided by GPUs), per-device throughput, or an efficiency the source states itself."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            grouped.setdefault((row["source"], row["curve"]), []).append(row)
    curves = []
    for (source, name), rows in grouped.items():
        rate = {}
        for r in rows:
            n, v = int(r["gpus"]), float(r["value"])
            if r["kind"] not in ("aggregate", "per_device", "efficiency"):
                raise ValueError(f"{path}: kind {r['kind']!r} of {name!r} is not aggregate, per_device or efficiency")
            rate[n] = v / n if r["kind"] == "aggregate" else v
        curves.append(Curve(family=f"published:{source}", name=name, rate=rate, citation=rows[0]["citation"]))
    return curves


def load_bed(path: Path, bounds_path: Path | None = None) -> list[Curve]:
    """bed_curves.csv (written by benchmarks/knee.py) → one curve per configuration: every
    completed trial's tokens/s per rank and device-hours, by world size; with bed_bounds.csv,
    the model's bound for each set of measured sizes."""
    grouped: dict[str, dict[int, list[tuple[float, float]]]] = {}
    notes: dict[str, str] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["status"] != "completed":
                continue
            n = int(row["world_size"])
            grouped.setdefault(row["curve"], {}).setdefault(n, []).append(
                (float(row["tokens_per_s"]) / n, float(row["device_hours"]))
            )
            notes[row["curve"]] = row["settings"]
    bounds: dict[str, dict[frozenset[int], dict[int, float]]] = {}
    if bounds_path is not None and bounds_path.exists():
        with open(bounds_path, newline="") as f:
            for row in csv.DictReader(f):
                measured = frozenset(int(x) for x in row["measured"].split(";"))
                bounds.setdefault(row["curve"], {}).setdefault(measured, {})[int(row["world_size"])] = float(
                    row["efficiency_high"]
                )
    return [
        Curve(
            family="bed",
            name=k,
            rate={n: statistics.median(r for r, _ in t) for n, t in v.items()},
            trials={n: tuple(t) for n, t in v.items()},
            citation=notes[k],
            bounds=bounds.get(k),
        )
        for k, v in grouped.items()
    ]


def draw_published(curve: Curve, noise: Noise, repeats: int, rng: np.random.Generator) -> dict[int, list[float]]:
    """Every size's `repeats` trials: the true rate × log-normal noise × an occasional slow stretch."""
    out = {}
    for n in curve.sizes:
        factor = np.exp(rng.normal(0.0, noise.sigma, repeats)) if noise.sigma else np.ones(repeats)
        slow = rng.random(repeats) < noise.slow_p
        out[n] = [float(curve.rate[n] * f * (noise.slow_factor if s else 1.0)) for f, s in zip(factor, slow)]
    return out


def draw_bed(curve: Curve, repeats: int, rng: np.random.Generator) -> tuple[dict[int, list[float]], dict[int, float]]:
    """Every size's `repeats` trials resampled from the bed's own measured trials (their real
    noise); returns the rates and what those trials cost in device-hours."""
    rates, hours = {}, {}
    assert curve.trials is not None
    for n, trials in curve.trials.items():
        picks = [trials[i] for i in rng.integers(0, len(trials), repeats)]
        rates[n] = [r for r, _ in picks]
        hours[n] = sum(h for _, h in picks)
    return rates, hours


def size_efficiency(measured: dict[int, list[float]]) -> dict[int, float]:
    """Median efficiency per size against the smallest size's median throughput: the table's
    rule (launcher.results.scaling.add_scaling, then by_size's median over repeats)."""
    # thr(N)·N₀ / (thr(N₀)·N) with thr = N × per-device rate: the per-device rates' ratio.
    base = statistics.median(measured[min(measured)])
    return {n: statistics.median(r / base for r in rs) for n, rs in measured.items()}


def max_efficient(eff: dict[int, float | None], threshold: float) -> int:
    """The max_efficient policy's pick (launcher.results.policy): the largest size whose median
    efficiency ≥ threshold; the smallest size always qualifies (efficiency 1 by definition)."""
    done = sorted(n for n, e in eff.items() if e is not None)
    good = [n for n in done if eff[n] >= threshold]  # type: ignore[operator]
    return good[-1] if good else done[0]


@dataclass(kw_only=True, frozen=True)
class Replay:
    """One replay's outcome for one (curve, threshold, noise, repeats)."""

    grid_pick: int
    """The grid's pick (every size measured)."""
    search_pick: int
    """The adaptive search's pick (only the sizes it measured)."""
    sizes_run: tuple[int, ...]
    """The sizes the adaptive search measured."""
    hours_ratio: float
    """Device-hours the adaptive search spent ÷ the grid's."""
    within_5pct: bool
    """The adaptive pick's true throughput is within 5% of the grid pick's."""


def model_bound(curve: Curve) -> Callable[[Mapping[int, float | None]], Callable[[int], float | None] | None]:
    """What adaptive search asks of the calibrated model after each size: an upper bound on
    efficiency at unmeasured sizes, fitted on the sizes completed so far (≥ 2 of them)."""
    table = curve.bounds or {}

    def upper_from(measured: Mapping[int, float | None]) -> Callable[[int], float | None] | None:
        done = frozenset(n for n, e in measured.items() if e is not None)
        known = table.get(done) if len(done) >= 2 else None
        return known.get if known else None

    return upper_from


def replay(
    curve: Curve, measured: dict[int, list[float]], hours: Callable[[int], float], threshold: float, bound: bool = False
) -> Replay:
    """Both searches on one drawn table. `hours(n)`: what measuring size n (all its repeats) cost;
    `bound`: the adaptive search uses the model's bound (bed curves, which have one)."""
    eff = size_efficiency(measured)
    grid_pick = max_efficient(eff, threshold)
    seen, _ = run_search(curve.sizes, lambda n: eff[n], threshold, model_bound(curve) if bound else None)
    search_pick = max_efficient(seen, threshold)
    spent = sum(hours(n) for n in seen)
    grid = sum(hours(n) for n in curve.sizes)
    t_grid, t_search = curve.throughput(grid_pick), curve.throughput(search_pick)
    return Replay(
        grid_pick=grid_pick,
        search_pick=search_pick,
        sizes_run=tuple(sorted(seen)),
        hours_ratio=spent / grid,
        within_5pct=abs(t_search / t_grid - 1) <= 0.05,
    )


def weak_scaling_hours(curve: Curve, repeats: int, run_s: float, startup_s: float) -> Callable[[int], float]:
    """Device-hours of measuring a size for a published curve: fixed steps at fixed per-device
    work, so the run lasts run_s / efficiency, plus start-up, on n devices, `repeats` times."""
    return lambda n: repeats * n * (startup_s + run_s / curve.efficiency(n)) / 3600


def oracle_pick(curve: Curve, threshold: float) -> int:
    """The pick on the noise-free curve."""
    return max_efficient({n: curve.efficiency(n) for n in curve.sizes}, threshold)


def is_monotone(curve: Curve) -> bool:
    """Does the true efficiency never rise with size?"""
    effs = [curve.efficiency(n) for n in curve.sizes]
    return all(b <= a + 1e-12 for a, b in zip(effs, effs[1:]))


def knee_inside(curve: Curve, threshold: float) -> bool:
    """Does the truth cross the threshold inside the grid (some size below it)?"""
    return any(curve.efficiency(n) < threshold for n in curve.sizes)


def summarise(replays: Sequence[Replay]) -> dict:
    ratios = [r.hours_ratio for r in replays]
    return {
        "replays": len(replays),
        "within_5pct": sum(r.within_5pct for r in replays) / len(replays),
        "same_pick": sum(r.grid_pick == r.search_pick for r in replays) / len(replays),
        "search_smaller": sum(r.search_pick < r.grid_pick for r in replays) / len(replays),
        "hours_ratio_mean": statistics.fmean(ratios),
        "hours_ratio_median": statistics.median(ratios),
        "hours_ratio_max": max(ratios),
    }


def seed_of(*parts: object) -> int:
    """A stable seed per cell (Python's hash() of a str changes per process)."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little")


def spread(values: Sequence[float]) -> float:
    """Relative spread of repeats: standard deviation of log throughput (≈ CV for small spreads)."""
    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) if len(logs) > 1 else float("nan")
