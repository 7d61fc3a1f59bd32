"""A bf16 matmul's share of its device's large-GEMM rate, by its shape (pure: no torch).

A measured table of lone GEMMs over shapes (XLA's for the H100: benchmarks/gemm_table.py) shows two losses apart:
a short reduction (each output tile's k-loop fills and drains its pipeline) and an output of too few tiles to
fill the chip's SMs. Its rates follow

    k / (k + K_HALF) · mn / (mn + MN_HALF)

of the large-GEMM rate (rms 5.2% over its 375 shapes, with a launch per call that a step's queued kernels hide),
where one smallest dimension cannot describe them (the curve e_max · s / (s + s_half) fitted on the same table
gives s_half 256 or 768 by the rows kept, rms 15-38%). A linear layer's three GEMMs each take their own shape
(op_share): forward (m × k)·(k × n), input gradient (m × n)·(n × k), weight gradient (n × m)·(m × k). The
terms are the H100's; how tiled GEMM kernels fill a GPU is common to the devices the corpus holds (A100: 108
SMs, H100: 132, B200: 148), so every device's bf16 matmuls take them, and what differs by device is the
large-GEMM rate, e_max of its peak, fitted on its published runs (benchmarks/replay_curve.py).
"""

from __future__ import annotations

from collections.abc import Callable

K_HALF = 192.0
"""Reduction length at which a GEMM runs at half its large-GEMM rate (a chip-filling output)."""
MN_HALF = 500_000.0
"""Output elements (rows × columns) at which a GEMM runs at half that rate (a long reduction)."""


def gemm_share(m, n, k, *, k_half: float = K_HALF, mn_half: float = MN_HALF):
    """Share of the large-GEMM rate of one (m × k) · (k × n) GEMM (numbers or numpy arrays; `k_half` and `mn_half`
    given: the form at other terms, as benchmarks/gemm_table.py fits it)."""
    return k / (k + k_half) * (m * n) / (m * n + mn_half)


def op_share(m: float, n: float, k: float, share: Callable[[float, float, float], float] = gemm_share) -> float:
    """Share of the large-GEMM rate a linear layer of forward shape (m × k)·(k × n) runs at, forward and both
    gradients each a third of its FLOPs, each at its own shape under `share`: their harmonic mean."""
    shares = [share(a, b, r) for a, b, r in ((m, n, k), (m, k, n), (n, k, m))]
    return 3.0 / sum(1.0 / s for s in shares)
