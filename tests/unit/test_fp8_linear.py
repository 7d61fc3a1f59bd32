"""torchao's microbenchmark of its float8 linear layer as the replay prices and fits it (benchmarks/fp8_linear.py)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import fp8_linear
from benchmarks.replay_curve import E_GRID, H_GRID, grid_seconds
from launcher.compute.shape_rate import Curve

BF16, FP8, BW = 989.4e12, 1979e12, 3350e9 * 0.8
"""The H100 SXM's dense bf16 and fp8 peaks and 80% of its 3.35 TB/s (shape_rate.MEMORY_SHARE)."""


def test_a_linear_layers_speedup_is_its_three_gemms_over_the_fp8_gemms_and_torchaos_casts():
    """By hand at the README's larger example (M, K, N = 4096, 8192, 16384, far from the roofline): bf16, three
    GEMMs of 2·M·K·N FLOPs each at e_max times its own shape's share (the reduction k/(k + 192), the output
    mn/(mn + 500,000): forward reduces K, the input gradient N, the weight gradient M); fp8, the three on the fp8
    curve by the smallest dimension, and fp8's casts: input and output gradient 6 B an element, the weight 8 B
    (fp8_casts.TORCHAO_CAST_PASSES)."""
    m, k, n = 4096, 8192, 16384
    gemm = 2.0 * m * k * n

    def share(rows: int, cols: int, reduce: int) -> float:
        return reduce / (reduce + 192) * rows * cols / (rows * cols + 500_000)

    bf16_s = sum(gemm / (BF16 * 0.6 * share(*g)) for g in ((m, n, k), (m, k, n), (n, k, m)))
    fp8_s = 3 * gemm / (FP8 * 0.66 * 4096 / (4096 + 2048)) + (6 * m * k + 6 * m * n + 8 * k * n) / BW
    got = fp8_linear.speedup(m, k, n, Curve(0.6, 0), Curve(0.66, 2048))
    assert got == pytest.approx(bf16_s / fp8_s, rel=1e-9)


def test_the_readmes_examples_alone_place_torchaos_fp8_curve_near_the_bf16_share():
    """Under an H100 bf16 e_max of 0.60 (its shape the table's) and the fp8 s_half the replay fits (2048), the loss
    of the README's two examples (0.80 and 1.39) is least at fp8 e_max 0.71; both examples then read within 2%."""
    loss = fp8_linear.loss_grid(grid_seconds, Curve(0.6, 0))
    assert loss.shape == (len(E_GRID), len(H_GRID))
    best = float(E_GRID[int(np.argmin(loss[:, list(H_GRID).index(2048)]))])
    assert best == pytest.approx(0.71)
    for m, k, n, published in fp8_linear.SPEEDUPS:
        assert fp8_linear.speedup(m, k, n, Curve(0.6, 0), Curve(best, 2048)) == pytest.approx(published, rel=0.02)
