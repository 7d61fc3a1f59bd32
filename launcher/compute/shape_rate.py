"""Compute time from a step's operations, each at the rate its shape gets on the device (pure: no torch).

A matmul's share of the device's dense peak rises with its smallest dimension s = min(m, n, k) and
saturates (tiles fill the chip, the epilogue's share shrinks; cuBLAS and hipBLASLt alike):

    efficiency(s) = e_max · s / (s + s_half)

capped by the roofline, arithmetic intensity × memory bandwidth (2mnk FLOPs over the bytes of its
three operands). Two parameters per device and precision (`Curve`), fitted on published runs
(benchmarks/published_replay.py, leave-one-source-out). A site profile (perf/site_profile.py) stands
in for the peak table through `Measured`: each matmul at its measured rate, the rest at its bandwidth.
The attention core runs in a fused flash kernel at

    FLASH_SHARE · e_max · Q / (Q + HEAD_DIM_HALF) · T / (T + SEQ_HALF)

of peak, Q the head dim and T the sequence (FlashAttention-2, Dao 2023, arXiv:2307.08691, §4.1 and
Figs. 4–7: forward and backward reach 50–73% of an A100's peak where its GEMMs reach 70–80%, head
dim 64 runs ~10% below 128, and 512-token sequences ~30% below 16K); causal masking skips half the
tiles (flops.CAUSAL_EXECUTED_SHARE).
Memory-bound operations (norms, activations, residual adds, the loss, the optimizer step, fp8
casts) move their bytes at MEMORY_SHARE of the device's HBM bandwidth (peaks.py): each its own pass
in an eager step, fused into one pass per chain between matmuls in a compiled one (flops.model_ops),
and fp8's casts as its stack does them (FP8_CAST_BYTES: torchao's passes of their own, Transformer
Engine's fused into the kernel before).

So MFU is an output: narrow layers (small s, more elementwise bytes per FLOP) run at a lower
share of peak than wide ones, and fp8, whose casts are memory-bound, gains more as layers widen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launcher.compute.flops import CAUSAL_EXECUTED_SHARE, Op, model_ops, param_counts
from launcher.compute.peaks import a100_40gb, find_device
from launcher.config.schema import ModelConfig

FLASH_SHARE = 0.75
"""A flash-attention kernel's rate at long sequences and wide heads ÷ a large matmul's (module docstring)."""
HEAD_DIM_HALF = 16
"""Head dim at which the flash kernel runs at half its wide-head rate (64: 0.8 of it, 128: 0.89)."""
SEQ_HALF = 256
"""Sequence length at which the flash kernel runs at half its long-sequence rate (2K: 0.89, 8K: 0.97)."""
MEMORY_SHARE = 0.8
"""Share of the datasheet bandwidth elementwise kernels sustain on large tensors (STREAM-like copies
reach 80–90% of HBM peak on A100/H100; torch's eager kernels less on small ones)."""
OPTIMIZER_BYTES = {"adamw": 28, "sgd": 16}
"""Bytes per parameter an optimizer step moves: AdamW reads fp32 weight, grad, m, v and writes weight,
m, v (7 × 4); SGD with momentum reads weight, grad, buffer and writes weight, buffer... (4 × 4)."""
FP8_CAST_BYTES = {"torchao": 8, "te": 0}
"""Bytes per element of a float8 linear layer's input and output gradient, per token, by fp8 stack.
torchao's tensorwise dynamic scaling (the launcher's, launcher/train/float8.py) computes each operand's
scale from its own amax at every call: an amax read, a scaled cast read and written, and the transposed
copy its other matmul needs, passes of their own (torchao/float8/float8_scaling_utils.py
hp_tensor_to_float8_dynamic: tensor_to_scale's amax, then the cast; torch.compile fuses the two into
fewer kernels, it cannot skip the amax's pass over the tensor). Transformer Engine's delayed scaling
takes the scale from earlier steps' amax history and writes the fp8 copy from the kernel that produced
the tensor (LayerNormLinear's norm, the activation; Micikevicius et al. 2022, arXiv:2209.05433 §4.3 and
TE's fp8_autocast docs): no pass of its own."""
FP8_WEIGHT_BYTES = {"torchao": 6, "te": 6}
"""Bytes per weight per micro-step for the same: amax, cast and its transpose of each weight (TE casts
its weights once per micro-step too, in one cast-transpose kernel)."""
FP8_STACKS = tuple(FP8_CAST_BYTES)
"""The fp8 stacks the model knows: `torchao` (the launcher's own) and `te` (Transformer Engine)."""


@dataclass(frozen=True)
class Curve:
    """A device's matmul efficiency against its smallest dimension (module docstring)."""

    e_max: float
    """Share of the dense peak a large matmul reaches."""
    s_half: float
    """Smallest dimension at which a matmul reaches half of e_max."""

    def __post_init__(self) -> None:
        if not (0 < self.e_max <= 1 and self.s_half >= 0):
            raise ValueError(f"curve: e_max must be in (0, 1] and s_half ≥ 0, got {self.e_max}, {self.s_half}")

    def efficiency(self, m: int, n: int, k: int) -> float:
        s = min(m, n, k)
        return self.e_max * s / (s + self.s_half)

    def rate(self, peak: float, smallest: int, roofline: float) -> float:
        """FLOP/s of a matmul whose smallest dimension is `smallest`: `peak` × the curve, under `roofline`."""
        return min(peak * self.e_max * smallest / (smallest + self.s_half), roofline)


def mem_bw_gbs(device: str | None) -> float | None:
    """HBM bandwidth of one device, GB/s, from the peak table (an A100 named 40GB: 1,555); None unknown."""
    row = find_device(device)
    if row is None or row.hbm_gbs is None:
        return None
    return 1555.0 if a100_40gb(row.device, device) else float(row.hbm_gbs)


def matmul_tflops(device: str | None, m: int, n: int, k: int, dtype: str, *, curve: Curve) -> float:
    """TFLOP/s of an (m × k) · (k × n) matmul in `dtype` on `device`: the device's peak × `curve`, under the
    roofline, as a step's Parts price it. ValueError for a device or precision the peak table does not know."""
    return curve.rate(_peak(device, dtype), min(m, n, k), _roofline(device, m, n, k, dtype)) / 1e12


@dataclass(frozen=True)
class StepTime:
    """Seconds per token of one rank's work, by kind of operation."""

    matmul_s: float
    attention_s: float
    memory_s: float

    @property
    def total_s(self) -> float:
        return self.matmul_s + self.attention_s + self.memory_s


@dataclass(frozen=True)
class Parts:
    """A step's ops reduced to what the curves act on, so a fit can price them under many curves."""

    matmuls: tuple[tuple[float, int, float, float, bool], ...]
    """Per matmul: (FLOPs per token, smallest dimension s, peak FLOP/s at its precision, roofline
    FLOP/s cap, runs at fp8)."""
    attention_s: float
    """Seconds per token of the attention core at e_max = 1 (its time is this ÷ the curve's e_max)."""
    memory_s: float
    """Seconds per token of the memory-bound ops, curve-free."""

    def seconds(self, curve: Curve, fp8_curve: Curve | None = None) -> StepTime:
        mm = 0.0
        for flops, s, peak, cap, fp8 in self.matmuls:
            c = fp8_curve if fp8 and fp8_curve is not None else curve
            mm += flops / c.rate(peak, s, cap)
        return StepTime(matmul_s=mm, attention_s=self.attention_s / curve.e_max, memory_s=self.memory_s)


@dataclass(frozen=True)
class Measured:
    """A device's measured rates (a site profile) in place of the peak table's peak, roofline and
    bandwidth. Parts priced on it are read with Curve(1, 0): each matmul then runs at its measured rate."""

    matmul_flops: Callable[[int, int, int, str], float]
    """FLOP/s of an (m, n, k) matmul in a dtype, as measured at (or between) the profile's shapes."""
    peak_flops: Callable[[str], float]
    """FLOP/s of the dtype's fastest measured matmul: the peak the attention kernel's share is of."""
    mem_bw_gbs: float
    """GB/s the memory-bound ops move their bytes at (measured: no datasheet share applies)."""
    attention_flops: Callable[[int, int, str], float | None] = lambda seq, head_dim, dtype: None
    """Counted FLOP/s of the causal attention kernel at (sequence, head dim, dtype) as measured; None where
    not measured (then its FLASH_SHARE of `peak_flops`, as for a datasheet peak)."""


def _peak(device: str | None, dtype: str) -> float:
    row = find_device(device)
    peak = row.flops(dtype) if row is not None else None
    if peak is None:
        raise ValueError(f"shape_rate: no {dtype} peak for device {device!r} in the peak table")
    return peak


def _roofline(device: str | None, m: int, n: int, k: int, dtype: str) -> float:
    """Arithmetic intensity × bandwidth, FLOP/s (inf for a device of no known bandwidth)."""
    bw = mem_bw_gbs(device)
    if bw is None:
        return math.inf
    width = 1 if dtype == "fp8" else 4 if dtype in ("tf32", "fp32") else 2
    return 2.0 * m * n * k / (width * (m * k + k * n + m * n)) * bw * 1e9


def op_parts(
    ops: Sequence[Op], device: str | None, dtype: str, *, extra_bytes: float = 0.0, measured: Measured | None = None
) -> Parts:
    """`ops` on `device` as Parts (every FLOP of the model's token, tp's ranks each doing their 1/tp at
    the split shapes' rate). `dtype` fp8 runs the blocks' linear layers at fp8, the rest at bf16.
    `extra_bytes`: memory-bound bytes per token beyond the ops' (the optimizer step, fp8's casts).
    `measured`: the device's measured rates in place of the peak table (read the Parts with Curve(1, 0))."""
    base = "bf16" if dtype == "fp8" else dtype
    bw = measured.mem_bw_gbs * 1e9 if measured else (mem_bw_gbs(device) or math.nan) * 1e9 * MEMORY_SHARE
    matmuls, att, nbytes = [], 0.0, extra_bytes
    for op in ops:
        if op.priced == "matmul":
            d = "fp8" if dtype == "fp8" and op.fp8 else base
            rate = measured.matmul_flops(op.m, op.n, op.k, d) if measured else _peak(device, d)
            cap = math.inf if measured else _roofline(device, op.m, op.n, op.k, d)
            matmuls.append((op.flops, min(op.m, op.n, op.k), rate, cap, d == "fp8"))
        elif op.priced == "attention" and measured and (kernel := measured.attention_flops(op.n, op.k, base)):
            att += op.flops / kernel  # measured on the causal kernel at counted FLOPs: its skipping is in the rate
        elif op.priced == "attention":
            shape = op.k / (op.k + HEAD_DIM_HALF) * op.n / (op.n + SEQ_HALF)
            peak = measured.peak_flops(base) if measured else _peak(device, base)
            att += op.flops * CAUSAL_EXECUTED_SHARE / (peak * FLASH_SHARE * shape)
        else:
            nbytes += op.nbytes
    return Parts(matmuls=tuple(matmuls), attention_s=att, memory_s=nbytes / bw)


def step_parts(
    model: ModelConfig,
    *,
    micro_batch: int,
    device: str | None,
    dtype: str,
    tp: int = 1,
    cp: int = 1,
    optimizer: str = "adamw",
    tokens_per_step: float | None = None,
    compiled: bool = False,
    fp8_stack: str = "torchao",
) -> Parts:
    """The Parts of a recipe's step on one device: its ops at one micro-batch's shapes (`compiled`:
    the blocks' memory-bound ops fused, flops.model_ops), the optimizer step spread over
    `tokens_per_step` (the tokens of one optimizer step over the whole job: with the optimizer's state
    sharded as FSDP does, each rank's share of both is 1/world), fp8's casts where `dtype` is fp8, as
    `fp8_stack` does them (FP8_CAST_BYTES)."""
    if fp8_stack not in FP8_STACKS:
        raise ValueError(f"shape_rate: fp8 stack {fp8_stack!r} is not one of {', '.join(FP8_STACKS)}")
    tokens = max(1, micro_batch * model.seq_len // cp)
    ops = model_ops(model, tokens=tokens, tp=tp, cp=cp, compiled=compiled)
    extra = 0.0
    if tokens_per_step:
        extra += OPTIMIZER_BYTES.get(optimizer, 28) * param_counts(model)[0] / tokens_per_step
    if dtype == "fp8":
        linear = [op for op in ops if op.priced == "matmul" and op.fp8]
        # Per token of the whole model's work (tp's ranks each cast their split): inputs and output
        # gradients once per forward-and-backward, each weight once per micro-step of `tokens`.
        elements = sum((op.k + op.n) * op.flops / (2.0 * op.n * op.k) for op in linear) / 3.0
        weights = sum(op.flops / 6.0 for op in linear)
        extra += FP8_CAST_BYTES[fp8_stack] * elements + FP8_WEIGHT_BYTES[fp8_stack] * weights / tokens
    return op_parts(ops, device, dtype, extra_bytes=extra)


def step_time(model: ModelConfig, *, curve: Curve, fp8_curve: Curve | None = None, **shape) -> StepTime:
    """Seconds per token of a recipe's step (step_parts' arguments) under the device's curves."""
    return step_parts(model, **shape).seconds(curve, fp8_curve)
