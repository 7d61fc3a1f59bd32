"""XLA's H100 GEMM table as evidence on the bf16 curve's shape (benchmarks/gemm_table.py, issue 32 item 1)."""

from __future__ import annotations

import csv
import math

from benchmarks import gemm_table as g
from benchmarks import replay_curve as rc
from launcher.compute import gemm_shape
from launcher.compute.flops import Op
from launcher.compute.shape_rate import roofline


def test_the_table_is_the_whole_sm90_grid_and_every_figure_is_a_whole_number_of_nanoseconds():
    """375 rows, one per (b, m, n, k) of b 1, 2, 4 and m, n, k 256..4096. XLA writes each rate as FLOPs over a
    time in whole nanoseconds, so 2·b·m·n·k / rate is within float rounding of an integer ns: a digit mistyped
    in the transcription (or a row's shape) breaks that, as would a rate read off the wrong row."""
    with g.TABLE.open() as f:
        table = list(csv.DictReader(f))
    shapes = {(int(r["b"]), int(r["m"]), int(r["n"]), int(r["k"])) for r in table}
    sides = {256, 512, 1024, 2048, 4096}
    assert len(table) == len(shapes) == 3 * 5 * 5 * 5
    assert {s[0] for s in shapes} == {1, 2, 4} and all(set(s[1:]) <= sides for s in shapes)
    for r in table:
        work = 2 * int(r["b"]) * int(r["m"]) * int(r["n"]) * int(r["k"]) * 1e9
        for key in ("bf16_flops", "f32_flops"):
            ns = work / int(r[key])
            assert abs(ns - round(ns)) < 0.02, (r, key, ns)


def test_the_form_fitted_on_rates_it_generated_gives_its_parameters_back():
    """Rates made by a TableForm on the table's shapes: the grid search finds its e, k_half, mn_half and launch.
    Fails if the fit's rate is not the form's (a launch added per FLOP, the output's term on k)."""
    truth = g.TableForm(e=0.85, k_half=256, mn_half=1e6, launch_s=3e-6, rms=0.0)
    peak = g.peak_flops()
    made = []
    for m, n, k, _ in g.rows():
        flops = 2.0 * m * n * k
        made.append((m, n, k, flops / (truth.launch_s + flops / (peak * truth.share(m, n, k)))))
    found = g.fit_form(made)
    assert (found.e, found.k_half, found.mn_half, found.launch_s) == (0.85, 256.0, 1e6, 3e-6)
    assert found.rms < 1e-6


def test_an_ops_three_gemms_are_priced_each_at_its_own_shape():
    """A (4096 × 1024) · (1024 × 256) layer: forward (4096, 256, 1024), input gradient (4096, 1024, 256), weight
    gradient (256, 1024, 4096), a third of the FLOPs each, so the share is their harmonic mean. Fails if the
    three are priced at the forward's shape (0.5 here, where the mean is lower)."""
    share = {(4096, 256, 1024): 0.5, (4096, 1024, 256): 0.25, (256, 1024, 4096): 0.75}
    op = Op(name="w1", priced="matmul", m=4096, n=256, k=1024, flops=6.0 * 256 * 1024)
    got = g.op_efficiency(lambda m, n, k: share[m, n, k], [op])
    assert math.isclose(got, 3 / (1 / 0.5 + 1 / 0.25 + 1 / 0.75))


def test_the_curves_own_form_fitted_on_rates_it_generated_gives_its_curve_back():
    """The table's shapes at e_max 0.8, s_half 384 on the curve, under the H100's roofline: curve_fit finds them
    with no residual. Fails if it prices a row other than by the smallest dimension under the roofline."""
    made = [
        (m, n, k, min(g.peak_flops() * 0.8 * min(m, n, k) / (min(m, n, k) + 384), roofline(g.H100, m, n, k, "bf16")))
        for m, n, k, _ in g.rows()
    ]
    e, h, rms = g.curve_fit(rc.E_GRID, rc.H_GRID, made)
    assert (e, h) == (0.8, 384.0) and rms < 1e-9


def test_the_plans_bf16_shape_terms_are_the_tables_fit():
    """launcher/compute/gemm_shape.py's K_HALF and MN_HALF are what fit_form finds on the transcribed table.
    Fails if either constant is edited, or the table or the fit changes without them."""
    form = g.fit_form(g.rows())
    assert (form.k_half, form.mn_half) == (gemm_shape.K_HALF, gemm_shape.MN_HALF)
    assert form.rms < 0.06
