"""Compute time from a step's operations, each at the rate its shape gets on the device (pure: no torch).

A bf16 matmul runs at e_max of the device's dense peak times its shape's share (compute/gemm_shape.py: a short
reduction and an output too small to fill the SMs each cost, as a measured H100 table shows), each of a linear
layer's three GEMMs at its own shape, capped by the roofline (2mnk FLOPs over its operands' bytes × bandwidth).
An fp8 matmul runs on its stack's curve, e_max · s / (s + s_half) on its smallest dimension s (`Curve`). e_max
is per device and precision, fitted on published runs (benchmarks/published_replay.py, leave-one-source-out).
A site profile (perf/site_profile.py) stands
in for the peak table through `Measured`: each matmul at its measured rate, the rest at its bandwidth.
The attention core runs in a fused flash kernel. On a chip with a cited kernel figure (KERNEL_SHARE:
A100, H100, H200) it runs at that figure's share of the chip's dense bf16 peak, whatever its matmuls
reach, scaled from the figure's head dim 128 and 16K tokens by

    Q / (Q + HEAD_DIM_HALF) · T / (T + SEQ_HALF)

Q the head dim and T the keys one kernel call sees (a ring step's chunk, seq/cp, under context
parallel: flops.model_ops). Elsewhere (no cited figure) it keeps the older rule, FLASH_SHARE · e_max
of peak times the same shape terms. Causal masking skips half the tiles (flops.CAUSAL_EXECUTED_SHARE).
Memory-bound operations (norms, activations, residual adds, the loss, the optimizer step, fp8
casts) move their bytes at MEMORY_SHARE of the device's HBM bandwidth (peaks.py): each its own pass
in an eager step, fused into one pass per chain between matmuls in a compiled one (flops.model_ops),
and fp8's casts as its stack does them (fp8_casts.FP8_CAST_BYTES: torchao's passes of their own, Transformer
Engine's fused into the kernel before).

So MFU is an output: narrow layers (short reductions, more elementwise bytes per FLOP) run at a lower
share of peak than wide ones, and fp8, whose casts are memory-bound, gains more as layers widen.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launcher.compute.flops import ACT_BYTES, CAUSAL_EXECUTED_SHARE, Op, model_ops, param_counts
from launcher.compute.fp8_casts import FP8_STACKS, fp8_cast_bytes
from launcher.compute.gemm_shape import gemm_share, op_share
from launcher.compute.optimizer import step_bytes
from launcher.compute.peaks import a100_40gb, find_device
from launcher.config.schema import ModelConfig

KERNEL_SHARE = {
    "sdpa": {"A100": 189 / 312, "H100": 328 / 989.4, "H200": 328 / 989.4},
    "cudnn": {"H100": 522 / 989.4, "H200": 522 / 989.4},
}
"""A causal attention kernel's forward and backward at head dim 128 and 16K tokens ÷ the chip's dense bf16
peak, by kernel and by the chip its peak-table row names (ATTENTION_KERNELS says who runs which).
sdpa, torch SDPA's flash kernel (FlashAttention-2): FA2 (Dao 2023, arXiv:2307.08691) Fig. 4(d), 189 TFLOP/s
on an A100 80GB SXM4 (61% of 312); Fig. 7(d), 328 on an H100 80GB SXM5 (33% of 989.4; "only 35%
utilization" on H100, FlashAttention-3, Shah et al. 2024, arXiv:2407.08608 §1: FA2 uses none of Hopper's
wgmma or TMA). cudnn, cuDNN's fused attention on an H100: FA3 Fig. 5(d) forward, causal, 539 TFLOP/s, and
Fig. 6 backward (no causal column), 516, combined as FA2's benchmark counts (backward 2.5 forwards):
3.5 / (1/539 + 2.5/516) = 522; the same rule on FA2's columns (335, 322) gives 326 for its measured 328.
The H200 is the same GH100 die at the same clocks: the H100's figures. A chip a kernel does not list runs
sdpa's figure (below Hopper Transformer Engine prefers flash-attn); a chip sdpa does not list keeps the
matmul-curve rule (module docstring)."""
ATTENTION_KERNELS = {
    "sdpa": "torch.nn.functional.scaled_dot_product_attention's flash backend: the launcher's blocks, torchtitan",
    "cudnn": "Transformer Engine's DotProductAttention (NeMo, Megatron-Core): on Hopper its backend choice "
    "drops flash-attn for cuDNN's fused attention 'for performance reasons' (get_attention_backend)",
    "unfused": "Megatron-LM's CoreAttention before flash attention (2021-22, and Megatron-DeepSpeed): "
    "two batched GEMMs over the whole score square and its fused scale-mask-softmax and dropout (UNFUSED_BYTES)",
}
"""The attention kernels the model prices, and who runs them."""
UNFUSED_BYTES = 20 / 3
"""Bytes per score element per forward-equivalent run that Megatron's unfused attention moves outside its two
GEMMs (megatron/model/transformer.py CoreAttention: baddbmm, FusedScaleMaskSoftmax, attention_dropout, bmm;
half-precision scores). Forward: the fused scale-mask-softmax reads and writes the scores (2 + 2), dropout reads
them and writes them and its mask (2 + 2 + 1); backward: dropout's (2 + 1 + 2) and softmax's (2 + 2 + 2): 9 + 11
over a forward and backward counted as 3 runs (a rerun forward, 9, is priced at the mean). The GEMMs
run the whole square (no causal skipping) with the head dim as their smallest dimension, on the matmul curve;
their reads and writes of the square are in their roofline."""
KERNEL_REF = (16384, 128)
"""(tokens, head dim) of the KERNEL_SHARE figures: the shape terms are 1 there."""
KERNEL_COUNTED = 3.5
"""Forward-equivalents FA2's benchmark counts for a forward and backward (benchmarks/benchmark_flash_attention.py
`flops`: backward 2.5 forwards, its five matmuls, the scores recomputed, to forward's two; causal halves
both): an op counts 3 (flops.attention_core_runs), so per counted FLOP the kernel runs at 3/3.5 of the
figure (a recompute's extra forward is priced the same, ≤ 4% over)."""
FLASH_SHARE = 0.75
"""Uncited chips: the kernel's rate at long sequences and wide heads ÷ a large matmul's (FA2 §4.1, an
A100's forward and backward at 50–73% of peak where its GEMMs reach 70–80%)."""
HEAD_DIM_HALF = 16
"""Head dim at which the flash kernel runs at half its wide-head rate (64: 0.8 of it, 128: 0.89; FA2's
figures, causal at 16K, head dim 64 ÷ 128: A100 171/189 = 0.90, H100 284/328 = 0.87)."""
SEQ_HALF = 512
"""Sequence length at which the causal flash kernel runs at half its long-sequence rate (2K: 0.8, 8K:
0.94). FA2's Figs. 4(d) and 7(d), causal, head dim 128, 16K tokens per batch at every length: 512 tokens
run at 99/189 (A100) and 163/328 (H100) of 16K's, T/(T + 512)'s 0.52 (the diagonal tiles, run whole,
weigh more in a short causal square; 2K: 155/189 and 265/328, the rule's 0.82)."""
MEMORY_SHARE = 0.8
"""Share of the datasheet bandwidth elementwise kernels sustain on large tensors (STREAM-like copies
reach 80–90% of HBM peak on A100/H100; torch's eager kernels less on small ones)."""


@dataclass(frozen=True)
class Curve:
    """A device's matmul efficiency for one precision (module docstring)."""

    e_max: float
    """Share of the dense peak a large matmul reaches."""
    s_half: float
    """fp8's curve: the smallest dimension at which a matmul reaches half of e_max (bf16's shape is gemm_shape's)."""

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
    """TFLOP/s of one (m × k) · (k × n) GEMM in `dtype` on `device`, under the roofline: bf16 at e_max × its
    shape's share (gemm_shape), fp8 on `curve` by its smallest dimension. ValueError for a device or precision the
    peak table does not know."""
    peak, cap = _peak(device, dtype), roofline(device, m, n, k, dtype)
    if dtype == "fp8":
        return curve.rate(peak, min(m, n, k), cap) / 1e12
    return min(peak * curve.e_max * gemm_share(m, n, k), cap) / 1e12


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

    matmuls: tuple[tuple[float, int, float, float, bool, float | None], ...]
    """Per matmul: (FLOPs per token, smallest dimension s, peak FLOP/s at its precision, roofline
    FLOP/s cap, runs at fp8, its shape's share (gemm_shape.op_share) or None: priced on the curve by s)."""
    attention_s: float
    """Seconds per token of the attention core at e_max = 1 (its time is this ÷ the curve's e_max),
    on a chip of no cited kernel figure."""
    memory_s: float
    """Seconds per token of the memory-bound ops, curve-free."""
    kernel_s: float = 0.0
    """Seconds per token of the attention core at its chip's cited kernel rate (KERNEL_SHARE), curve-free."""

    def seconds(self, curve: Curve, fp8_curve: Curve | None = None) -> StepTime:
        mm = 0.0
        for flops, s, peak, cap, fp8, shape in self.matmuls:
            c = fp8_curve if fp8 and fp8_curve is not None else curve
            mm += flops / (c.rate(peak, s, cap) if shape is None else min(peak * c.e_max * shape, cap))
        attention = self.attention_s / curve.e_max + self.kernel_s
        return StepTime(matmul_s=mm, attention_s=attention, memory_s=self.memory_s)


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


def attention_tflops(device: str | None, seq: int, head_dim: int, dtype: str, kernel: str = "sdpa") -> float | None:
    """TFLOP/s of the causal attention `kernel` forward and backward on `device` with `seq` keys at `head_dim`,
    in FA2's counting (causal halved, backward 2.5 forwards: KERNEL_COUNTED): its chip's KERNEL_SHARE of the
    dense peak at KERNEL_REF, by the shape terms elsewhere. None for a chip or dtype no figure covers."""
    row = find_device(device)
    chip = next((c for c in KERNEL_SHARE["sdpa"] if row is not None and row.device.startswith(c)), None)
    share = KERNEL_SHARE[kernel].get(chip, KERNEL_SHARE["sdpa"].get(chip)) if chip else None
    if share is None or dtype not in ("bf16", "fp16"):
        return None
    return _peak(device, dtype) * share * _kernel_shape(seq, head_dim) / _kernel_shape(*KERNEL_REF) / 1e12


def _kernel_shape(seq: int, head_dim: int) -> float:
    return head_dim / (head_dim + HEAD_DIM_HALF) * seq / (seq + SEQ_HALF)


def _peak(device: str | None, dtype: str) -> float:
    row = find_device(device)
    peak = row.flops(dtype) if row is not None else None
    if peak is None:
        raise ValueError(f"shape_rate: no {dtype} peak for device {device!r} in the peak table")
    return peak


def roofline(device: str | None, m: int, n: int, k: int, dtype: str) -> float:
    """Arithmetic intensity × bandwidth, FLOP/s (inf for a device of no known bandwidth)."""
    bw = mem_bw_gbs(device)
    if bw is None:
        return math.inf
    width = 1 if dtype == "fp8" else 4 if dtype in ("tf32", "fp32") else 2
    out = 2 if dtype == "fp8" else width  # an fp8 GEMM (torch._scaled_mm) writes its output in bf16
    return 2.0 * m * n * k / (width * (m * k + k * n) + out * m * n) * bw * 1e9


def op_parts(
    ops: Sequence[Op],
    device: str | None,
    dtype: str,
    *,
    extra_bytes: float = 0.0,
    measured: Measured | None = None,
    attention_kernel: str = "sdpa",
) -> Parts:
    """`ops` on `device` as Parts (every FLOP of the model's token, tp's ranks each doing their 1/tp at
    the split shapes' rate). `dtype` fp8 runs the blocks' linear layers at fp8, the rest at bf16.
    `extra_bytes`: memory-bound bytes per token beyond the ops' (the optimizer step, fp8's casts).
    `measured`: the device's measured rates in place of the peak table (read the Parts with Curve(1, 0)).
    `attention_kernel`: the kernel the attention core runs (ATTENTION_KERNELS)."""
    base = "bf16" if dtype == "fp8" else dtype
    bw = measured.mem_bw_gbs * 1e9 if measured else (mem_bw_gbs(device) or math.nan) * 1e9 * MEMORY_SHARE
    matmuls, att, kernel_s, nbytes = [], 0.0, 0.0, extra_bytes
    for op in ops:
        if op.priced == "matmul":
            d = "fp8" if dtype == "fp8" and op.fp8 else base
            rate = measured.matmul_flops(op.m, op.n, op.k, d) if measured else _peak(device, d)
            cap = math.inf if measured else roofline(device, op.m, op.n, op.k, d)
            shape = None if measured or d == "fp8" else op_share(op.m, op.n, op.k)  # fp8: its stack's curve
            matmuls.append((op.flops, min(op.m, op.n, op.k), rate, cap, d == "fp8", shape))
        elif op.priced == "attention" and attention_kernel == "unfused" and not measured:
            # Q·Kᵀ (seq × seq × head dim) and P·V (seq × head dim × seq): the same FLOPs and intensity each.
            # Their short head-dim side makes them memory-bound: the roofline prices it, the shape the tiles.
            cap = roofline(device, op.m, op.n, op.k, base)
            matmuls.append((op.flops, op.m, _peak(device, base), cap, False, op_share(op.m, op.n, op.k)))
            nbytes += op.flops / (4.0 * op.k) * UNFUSED_BYTES  # 4·head dim FLOPs per score element a run
        elif op.priced == "attention" and measured and (kernel := measured.attention_flops(op.n, op.k, base)):
            att += op.flops / kernel  # measured on the causal kernel at counted FLOPs: its skipping is in the rate
        elif (
            op.priced == "attention"
            and not measured
            and (cited := attention_tflops(device, op.n, op.k, base, attention_kernel))
        ):
            kernel_s += op.flops * CAUSAL_EXECUTED_SHARE * KERNEL_COUNTED / 3.0 / (cited * 1e12)
        elif op.priced == "attention":
            shape = _kernel_shape(op.n, op.k)
            peak = measured.peak_flops(base) if measured else _peak(device, base)
            att += op.flops * CAUSAL_EXECUTED_SHARE / (peak * FLASH_SHARE * shape)
        else:
            nbytes += op.nbytes
    return Parts(matmuls=tuple(matmuls), attention_s=att, memory_s=nbytes / bw, kernel_s=kernel_s)


def step_parts(
    model: ModelConfig,
    *,
    micro_batch: int,
    device: str | None,
    dtype: str,
    tp: int = 1,
    cp: int = 1,
    ep: int = 1,
    optimizer: str = "adamw",
    tokens_per_step: float | None = None,
    compiled: bool = False,
    fp8_stack: str = "torchao",
    attention_kernel: str = "sdpa",
    measured: Measured | None = None,
    fused_optimizer: bool = False,
    weight_decay: bool = False,
    loss: str = "torch",
) -> Parts:
    """The Parts of a recipe's step on one device (`measured`: a site profile's rates, op_parts): its ops at
    one micro-batch's shapes (`compiled`: the blocks' memory-bound ops fused, flops.model_ops; an fp32 or
    tf32 step's activations at 4 bytes, twice the ops' bf16), the optimizer step spread over
    `tokens_per_step` (the tokens of one optimizer step over the whole job: with the optimizer's state
    sharded as FSDP does, each rank's share of both is 1/world; `fused_optimizer`: one kernel, else torch's default
    passes as the launcher's trainer runs them, `weight_decay` one more: compute/optimizer.py), the loss as its
    kind (`loss`: compute/loss_bytes.py), fp8's casts where `dtype` is fp8, as `fp8_stack` does them
    (fp8_casts.FP8_CAST_BYTES), the attention core on `attention_kernel` (ATTENTION_KERNELS).
    `ep`, the expert-parallel degree (parallel.ep; 1 without expert parallel), sets a routed expert's GEMM rows
    (flops.block_matmuls): expert parallel gathers each local expert's tokens from every rank of its group and
    runs them as one group (torchtitan torchtitan/distributed/expert_parallel.py @e1f7f318 _token_dispatch: the
    all-to-all delivers '#tokens for local expert 0 from EP rank 0, ... from EP rank 1', which _permute lays out
    expert by expert), so an expert multiplies micro-batch tokens × ep × top-k ÷ n_experts rows (FLOPs unchanged)."""
    if fp8_stack not in FP8_STACKS:
        raise ValueError(f"shape_rate: fp8 stack {fp8_stack!r} is not one of {', '.join(FP8_STACKS)}")
    if attention_kernel not in ATTENTION_KERNELS:
        raise ValueError(
            f"shape_rate: attention kernel {attention_kernel!r} is not one of {', '.join(ATTENTION_KERNELS)}"
        )
    tokens = max(1, micro_batch * model.seq_len // cp)
    width = 4 / ACT_BYTES if dtype in ("fp32", "tf32") else 1.0
    ops = [
        dataclasses.replace(op, nbytes=op.nbytes * width) if op.name == "elementwise" else op
        for op in model_ops(model, tokens=tokens, tp=tp, cp=cp, ep=ep, compiled=compiled, loss=loss)
    ]
    extra = 0.0
    if tokens_per_step:
        extra += (
            step_bytes(optimizer, fused=fused_optimizer, decay=weight_decay) * param_counts(model)[0] / tokens_per_step
        )
    if dtype == "fp8":
        linear = [op for op in ops if op.priced == "matmul" and op.fp8]
        extra += fp8_cast_bytes(linear, tp=tp, tokens=tokens, stack=fp8_stack)
    return op_parts(ops, device, dtype, extra_bytes=extra, measured=measured, attention_kernel=attention_kernel)


def step_time(model: ModelConfig, *, curve: Curve, fp8_curve: Curve | None = None, **shape) -> StepTime:
    """Seconds per token of a recipe's step (step_parts' arguments) under the device's curves."""
    return step_parts(model, **shape).seconds(curve, fp8_curve)
