"""Adaptive search over a grid of sizes (pure): which size to measure next, or stop.

Start at the smallest size, double while efficiency holds, stop at the first size below the
threshold (measured, or predicted by the calibrated model with its whole interval below),
then bisect the grid between the last good and the first bad size. The answer is the one
the exhaustive grid gives when efficiency falls with size, at a fraction of its cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(kw_only=True, frozen=True)
class Decision:
    size: int | None
    """The next size to measure; None: the search is over."""
    reason: str
    """Why (one line, for the log and search.json)."""
    predicted_bad: tuple[int, ...] = ()
    """Sizes the model ruled out without measuring them."""


def next_size(
    grid: Sequence[int],
    efficiency: Mapping[int, float | None],
    threshold: float,
    eff_upper: Callable[[int], float | None] | None = None,
) -> Decision:
    """`efficiency`: measured sizes → median efficiency (None: the size failed). `eff_upper`:
    the model's upper bound on a size's efficiency (None where it cannot say)."""
    grid = sorted(set(grid))
    completed = [n for n in grid if efficiency.get(n) is not None]
    if not completed:
        # Efficiency needs a baseline: walk up until some size completes.
        rest = [n for n in grid if n not in efficiency]
        if not rest:
            return Decision(size=None, reason="no size completed")
        return Decision(
            size=rest[0], reason="baseline" if not efficiency else f"no size completed yet; trying {rest[0]}"
        )
    good = [n for n in completed if efficiency[n] >= threshold]  # type: ignore[operator]
    last_good = max(good) if good else min(completed)
    ruled_out: list[int] = []

    def bad(n: int) -> bool:
        if n in efficiency:
            e = efficiency[n]
            return e is None or e < threshold
        up = eff_upper(n) if eff_upper else None
        if up is not None and up < threshold:
            ruled_out.append(n)
            return True
        return False

    above = [n for n in grid if n > last_good]
    first_bad = next((n for n in above if n in efficiency and bad(n)), None)
    if first_bad is None:
        # Doubling: the first grid size at or past 2× the last good one (or the largest left).
        target = next((n for n in above if n >= 2 * last_good), above[-1] if above else None)
        if target is None:
            return Decision(
                size=None, reason=f"every size up to the largest, {last_good}, holds efficiency ≥ {threshold:.2f}"
            )
        if not bad(target):
            return Decision(size=target, reason=f"doubling: {last_good} holds {efficiency[last_good]:.2f}")
        first_bad = target
    between = [n for n in grid if last_good < n < first_bad and n not in efficiency]
    while between:
        mid = between[(len(between) - 1) // 2]
        if not bad(mid):
            below = "predicted below" if first_bad in ruled_out else "below"
            return Decision(
                size=mid,
                reason=f"refining between {last_good} (good) and {first_bad} ({below} {threshold:.2f})",
                predicted_bad=tuple(ruled_out),
            )
        first_bad = mid
        between = [n for n in between if n < mid]
    return Decision(
        size=None,
        reason=f"{last_good} is the largest size holding efficiency ≥ {threshold:.2f}; {first_bad} "
        + ("is predicted below it" if first_bad in ruled_out else "falls below it"),
        predicted_bad=tuple(ruled_out),
    )


def run_search(
    grid: Sequence[int],
    measure: Callable[[int], float | None],
    threshold: float,
    eff_upper_from: Callable[[Mapping[int, float | None]], Callable[[int], float | None] | None] | None = None,
) -> tuple[dict[int, float | None], Decision]:
    """Drive next_size to the end with a `measure(size) → efficiency` callback (the sweep does
    the same with real trials). Returns what was measured and the final decision."""
    measured: dict[int, float | None] = {}
    while True:
        upper = eff_upper_from(measured) if eff_upper_from else None
        decision = next_size(grid, measured, threshold, upper)
        if decision.size is None:
            return measured, decision
        measured[decision.size] = measure(decision.size)
