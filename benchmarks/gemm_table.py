"""XLA's measured matmul table for the H100 (sm_90): where the plan's bf16 matmul shape comes from (issue 32 item 1).

How a GEMM's share of peak rises with its shape cannot be placed by the published training rows (one device's
span too few widths: replay_curve.SHARED_SHAPE). A lone GEMM's rate over shapes can. OpenXLA ships one for the
H100 (CITATION): measured bf16 throughput of (b × m × k) · (b × k × n) dot products over b 1, 2, 4 and m, n, k 256
to 4096, written by XLA's own table generator for its GPU cost model, so not the project's, not fitted on any
training run, and not the H200 runs benchmarks.mfu_width judges. A batched dot's rows are b · m here (one kernel
over b · m rows of tiles).

Two readings (benchmarks.mfu_width prints both):
- a form with both of a GEMM's losses (TableForm, fitted on every row): the reduction's k / (k + k_half), the
  output's mn / (mn + mn_half) (too few tiles to fill the SMs), a launch time per call. Its k_half and mn_half are
  launcher/compute/gemm_shape.py's (tests/unit/test_gemm_table.py holds them equal), the shape every device's bf16
  matmuls are priced at, forward, input gradient and weight gradient each at its own (op_efficiency here);
- the curve e_max · s / (s + s_half) on the smallest dimension (curve_fit), which prices fp8 matmuls and priced
  bf16's before: one s_half cannot describe the table, and which loss it follows depends on the rows kept.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from launcher.compute.gemm_shape import gemm_share, op_share
from launcher.compute.peaks import find_device
from launcher.compute.shape_rate import roofline

HERE = Path(__file__).resolve().parent
TABLE = HERE / "data" / "xla_matmul_sm90.csv"
"""The table's sm_90 entries, one row each in the file's order: b, m, n, k and the measured FLOP/s."""
CITATION = (
    "openxla/xla xla/service/gpu/model/matmul_interpolator_data.h, as vendored in tensorflow/tensorflow "
    "third_party/xla @372d578b: kDefaultMatmulPTable, key sm_90, flops 'bf16xbf16->bf16'"
)
H100 = "NVIDIA H100 80GB HBM3"
"""The device the table is priced on: the file names only sm_90; its 4096³ at 783 TFLOP/s is above the
PCIe card's dense peak (756), so the SXM part's peak and bandwidth."""
ROW_SETS = {
    "a dimension of at least 4096 (a step's tokens; chosen before the fit)": lambda m, n, k: max(m, n, k) >= 4096,
    "shaped like the H200 runs' forward GEMMs (b·m ≥ 8192; n, k ≥ 512; chosen after the first)": lambda m, n, k: (
        m >= 8192 and min(n, k) >= 512
    ),
}
"""The table rows the curve's own form is fitted on, two ways (module doc: its s_half depends on the choice)."""


@dataclass(frozen=True, kw_only=True)
class TableForm:
    """A lone GEMM's rate as the table shows it: peak · e · k/(k + k_half) · mn/(mn + mn_half), plus a launch."""

    e: float
    """Share of the datasheet peak at a long reduction and a chip-filling output."""
    k_half: float
    """Reduction length at which the rate is half of that: the tile's fill and drain over its k-loop."""
    mn_half: float
    """Output elements (rows × columns) at which the rate is half: too few tiles to fill the SMs."""
    launch_s: float
    """Seconds each call adds whatever its size (the table times single calls)."""
    rms: float
    """Root mean square of ln(predicted/measured) over the rows it was fitted on."""

    def share(self, m: int, n: int, k: int) -> float:
        """Share of peak of an (m × k) · (k × n) GEMM inside a step (no launch: a step's kernels queue)."""
        return self.e * gemm_share(m, n, k, k_half=self.k_half, mn_half=self.mn_half)


FORM_GRID = {
    "e": np.round(np.arange(0.70, 1.0001, 0.01), 2),
    "k_half": np.array([0, 64, 128, 192, 256, 384, 512, 768]),
    "mn_half": np.array([0, 2.5e5, 5e5, 7.5e5, 1e6, 1.5e6, 2e6, 3e6]),
    "launch_s": np.array([0, 1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 7e-6, 8e-6, 10e-6, 12e-6]),
}
"""Candidate TableForm parameters (a grid search, as the replay's curves are fitted)."""


def rows(path: Path = TABLE) -> list[tuple[int, int, int, float]]:
    """(rows b·m, n, k, measured bf16 FLOP/s) of every table entry with a bf16 figure."""
    with path.open() as f:
        return [
            (int(r["b"]) * int(r["m"]), int(r["n"]), int(r["k"]), float(r["bf16_flops"]))
            for r in csv.DictReader(f)
            if r["bf16_flops"]
        ]


def fit_form(table: list[tuple[int, int, int, float]]) -> TableForm:
    """TableForm minimising the mean ln²(predicted/measured) over `table` (FORM_GRID)."""
    m, n, k, measured = (np.array(c, dtype=float) for c in zip(*table))
    flops, peak = 2.0 * m * n * k, peak_flops()
    best = (math.inf, {})
    for launch in FORM_GRID["launch_s"]:
        for k_half in FORM_GRID["k_half"]:
            for mn_half in FORM_GRID["mn_half"]:
                shape = gemm_share(m, n, k, k_half=k_half, mn_half=mn_half)
                e = FORM_GRID["e"][:, None]
                loss = np.mean(np.log(flops / (launch + flops / (peak * e * shape)) / measured) ** 2, axis=1)
                i = int(np.argmin(loss))
                if loss[i] < best[0]:
                    best = (
                        float(loss[i]),
                        {
                            "e": float(e[i, 0]),
                            "k_half": float(k_half),
                            "mn_half": float(mn_half),
                            "launch_s": float(launch),
                        },
                    )
    return TableForm(**best[1], rms=math.sqrt(best[0]))


def op_efficiency(share, ops) -> float:
    """Share of peak the matmul `ops` (flops.Op, per token, forward and both backward GEMMs) come to, each op's
    three GEMMs at their own shapes under `share(m, n, k)` (gemm_shape.op_share, as the plan prices them)."""
    return sum(op.flops for op in ops) / sum(op.flops / op_share(op.m, op.n, op.k, share) for op in ops)


def curve_fit(e_grid, h_grid, table) -> tuple[float, float, float]:
    """(e_max, s_half, rms) of the curve's own form fitted on `table`'s rows: the H100's peak ×
    e_max · s / (s + s_half), s = min(m, n, k), under its roofline (as an fp8 matmul is priced on its curve)."""
    peak, loss = peak_flops(), 0.0
    e, h = np.asarray(e_grid)[:, None], np.asarray(h_grid)[None, :]
    for m, n, k, measured in table:
        s = min(m, n, k)
        rate = np.minimum(peak * e * s / (s + h), roofline(H100, m, n, k, "bf16"))
        loss = loss + (np.log(rate) - math.log(measured)) ** 2 / len(table)
    i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return float(e_grid[i]), float(h_grid[j]), math.sqrt(float(loss[i, j]))


def peak_flops() -> float:
    """The H100's dense bf16 peak, FLOP/s (the peak table's)."""
    return find_device(H100).flops("bf16")
