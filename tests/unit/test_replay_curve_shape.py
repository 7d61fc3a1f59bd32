"""The shape model's s_half is fitted over every device's rows of a precision, e_max per device (issue 32
item 1): one device's rows at one width cannot place how a matmul's rate rises with width."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from benchmarks import published_replay as pr
from benchmarks import replay_curve as rc
from benchmarks.replay_case import Case
from launcher.compute.shape_rate import Parts
from launcher.perf.stragglers import straggle


def _case(i: int, source: str, device: str, s: int, truth: float) -> Case:
    parts = Parts(matmuls=((1.0, s, 1.0, math.inf, False),), attention_s=0.0, memory_s=0.0)
    return Case(
        index=i, row={"source": source, "precision": "bf16"}, key=f"{device}/bf16", published=truth, parts=(parts, 1.0)
    )


def _log_at(case: Case, mfu: np.ndarray) -> np.ndarray:
    return np.log(mfu)


def test_a_device_whose_rows_span_one_width_takes_the_pooled_s_half_and_fits_its_own_e_max():
    """A100 sources at widths 256..4096 follow e_max 0.60, s_half 512; H100 sources publish 0.55 at width
    4096 only, where any s_half fits them. The H100 curve keeps the pooled s_half, and its e_max prices its
    rows: 0.55 = e_max · 4096 / (4096 + 512)."""
    a100 = [
        _case(i, f"a100_{i % 2}", "A100", s, round(0.60 * s / (s + 512), 4))
        for i, s in enumerate([256, 512, 1024, 2048, 4096, 256, 1024, 4096])
    ]
    h100 = [_case(20 + i, f"h100_{i % 2}", "H100", 4096, 0.55) for i in range(4)]
    curves = rc.fit_curves(a100 + h100, _log_at, 2)
    assert curves["*/bf16"][1] == curves["A100/bf16"][1] == curves["H100/bf16"][1] == 512.0
    assert curves["A100/bf16"][0] == 0.60
    assert curves["H100/bf16"][0] == round(0.55 * (4096 + 512) / 4096, 2)


def test_the_curves_are_fitted_with_the_straggler_jitter_every_prediction_is_made_at():
    """Rows at 512 GPUs that ran at e_max 0.60, s_half 512 and lost straggle(512, 0.05) = 1.29 to stragglers:
    the curves fitted at that jitter give back 0.60 and 512. A fit without the jitter in it finds the slowed
    rows' e_max (0.47), and every prediction, made with the jitter, then reads them 1.29× low."""
    s, gpus = 0.05, 512
    slowed = straggle(gpus, s)
    cases = []
    for i, width in enumerate([256, 512, 1024, 2048, 4096, 256, 1024, 4096]):
        c = _case(i, f"a100_{i % 2}", "A100", width, 1000.0 * 0.60 * width / (width + 512) / slowed)
        c.inv_grid, c.mapped = 1 / (1000.0 * pr.GRID), SimpleNamespace(gpus=gpus)  # throughput 1000 × MFU
        cases.append(c)
    at_s = {c.index: pr.jittered_log(s)(c, pr.FINE) for c in cases}
    assert pr.fit_constants(cases, at_s, s)["curves"]["A100/bf16"] == [0.60, 512.0]
    assert pr.fit_constants(cases, at_s)["curves"]["A100/bf16"][0] == round(0.60 / slowed, 2)
