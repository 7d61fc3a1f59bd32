"""The straggler constant of the published replay (launcher/perf/stragglers.py): s in straggle(N) =
1 + s·(H_N − 1), fitted on the efficiency pairs of the published series, each source weighted alike.

The rows are planned once with cluster.step_jitter=0; since straggle(N, s) multiplies the compute as a
lower MFU would, a row's throughput at (MFU m, jitter s) is its jitter-free curve at m / straggle(N, s),
so s is fitted without replanning. The loss is the source-weighted sum of |predicted − published|
efficiency (absolute, so the super-linear pairs of runs that changed more than their size, above 1
in MPT's tables, weigh no more than their distance), with each row's MFU fitted on the same rows at s = 0."""

from __future__ import annotations

from collections import Counter

import numpy as np

from benchmarks.replay_case import Case
from launcher.perf.stragglers import straggle

GRID = np.round(np.arange(0.0, 0.1001, 0.0025), 4)
"""The s values tried: 0 to 10% of a rank's compute, in quarter points."""


def pairs(cases: list[Case], series: list[list[Case]], unit_of) -> list[tuple[Case, Case, float]]:
    """(row, its series' smallest-size row, published efficiency) among `cases`, as published_replay pairs them."""
    inside = {c.index for c in cases}
    out = []
    for members in series:
        counts = sorted({c.mapped.gpus for c in members if c.index in inside})
        base = [c for c in members if c.index in inside and c.mapped.gpus == counts[0]] if counts else []
        if len(counts) < 2 or len(base) != 1:
            continue
        b_value, b_unit = unit_of(base[0].row)
        for c in members:
            value, unit = unit_of(c.row)
            if c is not base[0] and c.index in inside and unit == b_unit and value is not None:
                out.append((c, base[0], value / b_value))
    return out


def throughput(case: Case, curve: np.ndarray, fine: np.ndarray, mfu: float, s: float) -> float:
    """Predicted per-GPU tokens/s at MFU `mfu` and jitter `s`, from the row's jitter-free ln-throughput curve."""
    return float(np.exp(np.interp(mfu / straggle(case.mapped.gpus, s), fine, curve)))


def fit_jitter(found: list[tuple[Case, Case, float]], curves: dict, fine: np.ndarray, mfu_of) -> float:
    """The s of GRID minimising Σ w·|predicted − published efficiency| over `found` (w = 1 / the source's pairs)."""
    if not found:
        return 0.0
    n = Counter(c.source for c, _, _ in found)
    loss = []
    for s in GRID:
        total = 0.0
        for c, b, published in found:
            pred = throughput(c, curves[c.index], fine, mfu_of(c), s) / throughput(
                b, curves[b.index], fine, mfu_of(b), s
            )
            total += abs(pred - published) / n[c.source]
        loss.append(total)
    return float(GRID[int(np.argmin(loss))])
