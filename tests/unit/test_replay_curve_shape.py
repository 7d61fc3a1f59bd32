"""The shape model's curves as the replay fits them (issue 32 item 1): bf16, e_max per device over matmuls at their
measured shape's share (compute/gemm_shape), s_half stored 0; fp8, s_half fitted over every device's fp8 rows, e_max
per device: one device's rows at one width cannot place how a matmul's rate rises with width."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np

from benchmarks import published_replay as pr
from benchmarks import replay_curve as rc
from benchmarks.replay_case import Case
from launcher.compute.shape_rate import Parts
from launcher.perf.stragglers import straggle


def _case(i: int, source: str, device: str, precision: str, s: int, truth: float, shape: float | None = None) -> Case:
    """A row of one matmul of smallest dimension `s` (bf16: at `shape` of its large-GEMM rate) that published
    `truth` × its peak."""
    fp8 = precision == "fp8"
    parts = Parts(matmuls=((1.0, s, 1.0, math.inf, fp8, None if fp8 else shape),), attention_s=0.0, memory_s=0.0)
    return Case(
        index=i,
        row={"source": source, "precision": precision},
        key=f"{device}/{precision}",
        published=truth,
        parts=(parts, 1.0),
    )


def _log_at(case: Case, mfu: np.ndarray) -> np.ndarray:
    return np.log(mfu)


def _bf16(start: int = 100) -> list[Case]:
    """bf16 rows of two sources per device at e_max 0.5 over shares 0.5..1: what the fp8 rows' other ops take."""
    return [
        _case(start + 10 * d + i, f"{dev.lower()}_bf16_{i % 2}", dev, "bf16", 4096, 0.5 * share, shape=share)
        for d, dev in enumerate(("A100", "H100"))
        for i, share in enumerate([0.5, 0.75, 1.0, 0.6])
    ]


def test_bf16_fits_e_max_alone_per_device_over_the_shapes_share():
    """A100 rows at e_max 0.60 and H100 rows at 0.55, each over shares 0.4..0.95: each device's e_max is its own,
    s_half stored 0. Fails if the replay fits bf16 on the curve by s (the shares would be ignored: e_max lower)."""
    shares = [0.4, 0.5, 0.7, 0.95]
    a100 = [_case(i, f"a100_{i % 2}", "A100", "bf16", 768, round(0.60 * x, 4), shape=x) for i, x in enumerate(shares)]
    h100 = [
        _case(20 + i, f"h100_{i % 2}", "H100", "bf16", 768, round(0.55 * x, 4), shape=x) for i, x in enumerate(shares)
    ]
    curves = rc.fit_curves(a100 + h100, _log_at, 2)
    assert curves["A100/bf16"] == [0.60, 0.0] and curves["H100/bf16"] == [0.55, 0.0]


def test_an_fp8_device_whose_rows_span_one_width_takes_the_pooled_s_half_and_fits_its_own_e_max():
    """B200 fp8 rows of two sources at widths 256..4096 follow e_max 0.60, s_half 512; H100 fp8 rows of two others
    publish 0.55 at width 4096 only, where any s_half fits them. The H100 fp8 curve keeps the pooled s_half, and its
    e_max prices its rows: 0.55 = e_max · 4096 / (4096 + 512). (Sources named as the replay's, for their stacks.)"""
    wide = [
        _case(i, ("nemo_perf_2407", "nemo_long_seq_2505")[i % 2], "B200", "fp8", s, round(0.60 * s / (s + 512), 4))
        for i, s in enumerate([256, 512, 1024, 2048, 4096, 256, 1024, 4096])
    ]
    one = [
        _case(20 + i, ("torchtitan_h100_2024", "torchtitan_asynctp_2025")[i % 2], "H100", "fp8", 4096, 0.55)
        for i in range(4)
    ]
    bf16 = [dataclasses.replace(c, key=c.key.replace("A100", "B200")) for c in _bf16()]
    curves = rc.fit_curves(bf16 + wide + one, _log_at, 2)
    assert curves["*/fp8"][1] == curves["B200/fp8"][1] == curves["H100/fp8"][1] == 512.0
    assert curves["B200/fp8"][0] == 0.60
    assert curves["H100/fp8"][0] == round(0.55 * (4096 + 512) / 4096, 2)


def test_the_curves_are_fitted_with_the_straggler_jitter_every_prediction_is_made_at():
    """Rows at 512 GPUs that ran at e_max 0.60 over shares 0.4..0.95 and lost straggle(512, 0.05) = 1.29 to
    stragglers: the curve fitted at that jitter gives back 0.60. A fit without the jitter in it finds the slowed
    rows' e_max (0.47), and every prediction, made with the jitter, then reads them 1.29× low."""
    s, gpus = 0.05, 512
    slowed = straggle(gpus, s)
    cases = []
    for i, share in enumerate([0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.45]):
        c = _case(i, f"a100_{i % 2}", "A100", "bf16", 4096, 1000.0 * 0.60 * share / slowed, shape=share)
        c.inv_grid, c.mapped = 1 / (1000.0 * pr.GRID), SimpleNamespace(gpus=gpus)  # throughput 1000 × MFU
        cases.append(c)
    at_s = {c.index: pr.jittered_log(s)(c, pr.FINE) for c in cases}
    assert pr.fit_constants(cases, at_s, s)["curves"]["A100/bf16"] == [0.60, 0.0]
    assert pr.fit_constants(cases, at_s)["curves"]["A100/bf16"][0] == round(0.60 / slowed, 2)
