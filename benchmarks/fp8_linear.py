"""torchao's own microbenchmark of its float8 linear layer, as evidence on the fp8 curve (issue 32 item 1).

The fp8 curve of torchao's stack (`H100/fp8-torchao`) was fitted on training rows alone (torchtitan's), whose
steps carry every other term (collectives, pipeline bubbles, attention): a residual in any of them moves the
fitted e_max. torchao's README prices what the curve stands for in isolation: Float8Linear's speedup over a
bf16 linear, forward and backward, compiled, on an H100, at given shapes. Scored before it was fitted on (the
frozen hold-out of issue 32 item 6): PRE_FIT. The replay fits the stack's e_max on it as one more source
(replay_curve.stack_curves); benchmarks.mfu_width prints the model against it.
"""

from __future__ import annotations

import math

import numpy as np

from launcher.compute.flops import Op
from launcher.compute.fp8_casts import fp8_cast_bytes
from launcher.compute.shape_rate import Curve, Parts, op_parts
from launcher.perf.preset_fit import FP8_STACK, curve_keys

SOURCE = "torchao_float8_readme"
"""The source's name where the replay counts sources."""
KEY = curve_keys("H100/fp8", FP8_STACK)[0]
"""The fit key it is evidence on: the launcher's own fp8 stack (torchao's) on the H100."""
CITATION = (
    "pytorch/ao torchao/float8/README.md @0cf1281a, section 'Performance': the speedup of torchao's Float8Linear "
    "(tensorwise dynamic scaling, compiled) over a bf16 linear, forward and backward, on an NVIDIA H100, given for "
    "two worked examples of the forward's M, K, N"
)
SPEEDUPS = ((1024, 2048, 1024, 0.80), (4096, 8192, 16384, 1.39))
"""(M, K, N, published speedup): CITATION's two examples, read from its text."""
H100 = "NVIDIA H100 80GB HBM3"
"""The H100 the examples are priced on: the README names no power cap or variant, so the SXM datasheet's."""
PRE_FIT = "at 177d55c's curves, before they were fitted on it, the model read +11.6% and +11.4% over the two examples"
"""The source scored before any fit used it, kept beside the in-sample figures benchmarks.mfu_width prints."""


def linear_parts(m: int, k: int, n: int) -> tuple[Parts, Parts]:
    """(bf16, fp8) Parts of one linear layer of forward shape (m, k) × (k, n), forward and both backward
    GEMMs; fp8's with torchao's cast passes (fp8_casts.fp8_cast_bytes: input and output gradient once, the
    weight once per call)."""
    op = Op(name="w1", priced="matmul", m=m, n=n, k=k, flops=6.0 * n * k, fp8=True)
    casts = fp8_cast_bytes([op], tp=1, tokens=m, stack=FP8_STACK)
    return op_parts([op], H100, "bf16"), op_parts([op], H100, "fp8", extra_bytes=casts)


def speedup(m: int, k: int, n: int, bf16: Curve, fp8: Curve) -> float:
    """The speedup the model predicts for SPEEDUPS' layer under the H100's bf16 and fp8 curves."""
    base, low = linear_parts(m, k, n)
    return base.seconds(bf16).total_s / low.seconds(bf16, fp8).total_s


def loss_grid(grid_seconds, bf16: Curve) -> np.ndarray:
    """Mean ln²(predicted/published speedup) over SPEEDUPS at every (e_max, s_half) of the replay's grid
    (`grid_seconds`: replay_curve's, the fp8 matmuls priced over the grid and the rest by `bf16`)."""
    out = 0.0
    for m, k, n, published in SPEEDUPS:
        base, low = linear_parts(m, k, n)
        predicted = base.seconds(bf16).total_s / grid_seconds(low, bf16)
        out = out + (np.log(predicted) - math.log(published)) ** 2 / len(SPEEDUPS)
    return np.asarray(out)
