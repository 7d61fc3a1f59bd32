"""Least squares with bounds, for the model's fits (`fit`, `fit_links`). Pure: numpy only."""

from __future__ import annotations

import itertools
import math

import numpy as np


def bounded_lstsq(a: np.ndarray, y: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """min ‖a v − y‖ subject to lower ≤ v ≤ upper, and the indices left strictly free.

    The optimum of a convex bounded least squares is the unconstrained optimum on the face of the
    box it lies on, so trying every face (each variable free, at its lower or at its upper bound)
    and keeping the best feasible solution is exact. That is 3^k solves: fine for k ≤ 3.
    """
    k = a.shape[1]
    # Columns differ by many orders of magnitude (bytes vs hops); scaling keeps lstsq honest.
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a_s = a / norms
    best: tuple[float, np.ndarray, list[int]] | None = None
    choices = [("free", "low") + (("high",) if math.isfinite(upper[j]) else ()) for j in range(k)]
    for combo in itertools.product(*choices):
        v = np.where(np.array(combo) == "high", upper, lower).astype(float)
        free = [j for j in range(k) if combo[j] == "free"]
        if free:
            fixed = [j for j in range(k) if combo[j] != "free"]
            rhs = y - a[:, fixed] @ v[fixed]
            sol = np.linalg.lstsq(a_s[:, free], rhs, rcond=None)[0] / norms[free]
            tol = 1e-9 * np.maximum(1.0, np.abs(sol))
            if np.any(sol < lower[free] - tol) or np.any(sol > upper[free] + tol):
                continue
            v[free] = np.clip(sol, lower[free], upper[free])
        cost = float(np.sum((a @ v - y) ** 2))
        if best is None or cost < best[0] - 1e-15 * max(1.0, cost):
            best = (cost, v, free)
    assert best is not None  # the all-at-bounds face is always feasible
    return best[1], best[2]


def nonnegative(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """min ‖a v − y‖ with every v ≥ 0."""
    k = a.shape[1]
    return bounded_lstsq(a, y, np.zeros(k), np.full(k, np.inf))[0]


def rank(x: np.ndarray) -> int:
    """Rank of a design after normalising its columns, so magnitudes do not pass for directions."""
    norms = np.linalg.norm(x, axis=0)
    keep = norms > 0
    if not keep.any():
        return 0
    return int(np.linalg.matrix_rank(x[:, keep] / norms[keep], tol=1e-9))
