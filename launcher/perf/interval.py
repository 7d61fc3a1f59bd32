"""How sure a fitted model is: the scatter its intervals use and the quantile that turns that
scatter into a nominal coverage. Pure: no I/O, no model imports (fit.py supplies the numbers).

A fitted model's prediction interval must cover trials it never saw, so its scatter is measured
on held-out errors, not on the fit's own residuals: every group of repeated trials (one shape) is
left out in turn, the model refitted on the rest, and the group's trials predicted. That error
holds run-to-run noise and the model's misfit alike. Repeats measure the noise alone, which
bounds the scatter from below: no model predicts a single trial better than trials repeat.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def t_quantile(p: float, dof: float) -> float:
    """Quantile `p` of Student's t with `dof` degrees of freedom (math only: no scipy here).

    Bisection on the CDF, whose tail integral is taken by Simpson's rule on the density: at
    2,000 panels its error is far below the third significant digit any interval shows."""
    if not 0.5 <= p < 1.0:
        raise ValueError(f"t_quantile needs 0.5 ≤ p < 1, got {p}")
    if not dof > 0:
        raise ValueError(f"t_quantile needs dof > 0, got {dof}")
    log_c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def cdf(x: float) -> float:
        u = np.linspace(0.0, x, 2001)
        f = math.exp(log_c) * (1.0 + u * u / dof) ** (-(dof + 1) / 2)
        h = x / 2000
        return 0.5 + h / 3 * float(f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def repeat_noise(groups: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """Run-to-run relative std of one trial's step time, pooled over groups of repeats (same
    shape), on the log scale so a 10% slower and a 10% faster repeat weigh alike; and its degrees
    of freedom. (None, 0) when no shape was measured twice."""
    ss, dof = 0.0, 0
    for g in groups:
        if len(g) < 2:
            continue
        logs = np.log(np.asarray(g, dtype=float))
        ss += float(((logs - logs.mean()) ** 2).sum())
        dof += len(g) - 1
    return (math.sqrt(ss / dof), dof) if dof else (None, 0)


@dataclass(kw_only=True, frozen=True)
class Scatter:
    """The relative std a fitted model's intervals use, and where it came from."""

    sigma: float
    """Relative std of a new trial around the prediction (before the parameter term)."""
    quantile: float
    """Multiplier of the std for the nominal level: t (or normal, when assumed) quantile."""
    source: str
    """One phrase: which of held-out error, repeat noise or the assumed default set `sigma`."""
    held_out: bool
    """Whether the held-out error was measured and is in `sigma` (it then holds parameter
    variance too; see PerfModel.param_var_in_sigma)."""


def scatter(
    *, holdout: float | None, holdout_dof: int, repeat: float | None, repeat_dof: int, assumed: float, level: float
) -> Scatter:
    """The scatter for intervals at nominal coverage `level`: the held-out error with a t quantile
    on its degrees of freedom, never below the repeat noise; without held-out errors, the repeat
    noise (t on its own dof) or else the `assumed` std with a normal quantile."""
    if not 0 < level < 1:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    p = (1 + level) / 2
    if holdout is not None and holdout_dof > 0:
        if repeat is not None and repeat > holdout:
            return Scatter(
                sigma=repeat,
                quantile=t_quantile(p, holdout_dof),
                source=f"repeat noise {repeat:.1%} (above the held-out error {holdout:.1%})",
                held_out=True,
            )
        return Scatter(
            sigma=holdout,
            quantile=t_quantile(p, holdout_dof),
            source=f"held-out error {holdout:.1%} (leave one shape out, t on {holdout_dof} dof)",
            held_out=True,
        )
    if repeat is not None and repeat_dof > 0:
        return Scatter(
            sigma=repeat,
            quantile=t_quantile(p, repeat_dof),
            source=f"repeat noise {repeat:.1%} (too few shapes to hold one out)",
            held_out=False,
        )
    return Scatter(
        sigma=assumed,
        quantile=t_quantile(p, 1e6),
        source=f"assumed {assumed:.0%} (too few shapes to hold one out, no repeats)",
        held_out=False,
    )


def coverage(cases: Sequence[tuple[float, float, float]]) -> tuple[int, int]:
    """(inside, total) of measured values within their [low, high]: what an interval's nominal
    level promises about trials it did not see."""
    inside = sum(1 for measured, low, high in cases if low <= measured <= high)
    return inside, len(cases)
