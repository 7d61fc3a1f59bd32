"""Adaptive search on synthetic scaling curves: the grid's answer for a fraction of its cost."""

from __future__ import annotations

import math

import pytest

from launcher.run.next_size import next_size, run_search

GRID = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def curve(knee: float, sharpness: float = 2.0):
    """Efficiency falling smoothly with size: 1 at the smallest, 0.5 at `knee`."""
    return lambda n: 1 / (1 + (math.log2(n / GRID[0]) / math.log2(knee / GRID[0])) ** sharpness)


def gpu_hours(n: int, eff: float) -> float:
    """A fixed-steps trial on n GPUs (weak scaling): time ∝ 1/efficiency, plus 60 s start-up."""
    return n * (600 / eff + 60) / 3600


def grid_answer(eff, threshold: float) -> int:
    return max(n for n in GRID if eff(n) >= threshold)


@pytest.mark.parametrize("knee", [48, 100, 180, 300, 700])
@pytest.mark.parametrize("threshold", [0.7, 0.8, 0.9])
def test_adaptive_finds_the_grid_answer_with_at_most_a_quarter_of_its_gpu_hours(knee, threshold):
    eff = curve(knee)
    measured, decision = run_search(GRID, eff, threshold)
    answer = max(n for n, e in measured.items() if e is not None and e >= threshold)
    assert answer == grid_answer(eff, threshold)
    spent = sum(gpu_hours(n, eff(n)) for n in measured)
    grid = sum(gpu_hours(n, eff(n)) for n in GRID)
    assert spent / grid <= 0.25, (sorted(measured), spent / grid)
    assert decision.size is None


def test_refines_between_last_good_and_first_bad():
    grid = [1, 2, 3, 4, 6, 8, 12, 16]
    eff = {1: 1.0, 2: 0.95, 4: 0.9, 8: 0.6}.get
    # 1 → 2 → 4 → 8 (bad) → refine: 6 between 4 and 8
    assert next_size(grid, {1: 1.0, 2: 0.95, 4: 0.9, 8: 0.6}, 0.8).size == 6
    measured, decision = run_search(grid, lambda n: eff(n) if n in (1, 2, 4, 8) else 0.85 if n == 6 else 0.5, 0.8)
    assert sorted(measured) == [1, 2, 4, 6, 8]
    assert "6 is the largest size" in decision.reason


def test_the_model_stops_the_search_before_a_size_it_rules_out():
    # Measured 8, 16, 32 all good; the model's upper bound at 64 is 0.6 → 64 is never run, and
    # nothing lies between 32 and 64 on this grid.
    d = next_size(GRID, {8: 1.0, 16: 0.95, 32: 0.9}, 0.8, eff_upper=lambda n: 0.6 if n >= 64 else 0.95)
    assert d.size is None and d.predicted_bad == (64,)
    assert d.reason == "32 is the largest size holding efficiency ≥ 0.80; 64 is predicted below it"


def test_a_failed_smallest_size_moves_the_baseline_up():
    assert next_size(GRID, {8: None}, 0.8).size == 16
    assert next_size(GRID, {}, 0.8).size == 8


def test_every_size_good_ends_at_the_largest():
    measured, decision = run_search([1, 2, 4], lambda n: 1.0, 0.8)
    assert sorted(measured) == [1, 2, 4]
    assert decision.reason == "every size up to the largest, 4, holds efficiency ≥ 0.80"
