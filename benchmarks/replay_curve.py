"""The shape model's curves fitted on the published replay (issue 32 item 1).

Each replayed row's step is reduced once to its Parts (launcher/compute/shape_rate.py: its matmuls'
FLOPs, shapes, peaks and roofline caps; its attention and memory-bound seconds), so its predicted
throughput under any curve is read off the row's throughput-vs-MFU curve (published_replay.predicted_log)
at the MFU those Parts come to, fitted by grid search on Σ w·ln²(predicted/published), each source weighted
alike; bf16 keys first, then fp8 keys with their family's bf16 curve for the ops fp8 leaves at bf16.
bf16: one parameter per device family, e_max; a matmul's shape is XLA's measured table's
(launcher/compute/gemm_shape.py, every device: SHARED_SHAPE says why), and s_half is stored 0, unused.
fp8: e_max per device, s_half fitted once over every backed device's fp8 rows (its curve prices a matmul
by its smallest dimension; the table has no fp8 figures).
A key fewer than MIN_SOURCES sources back takes the curve fitted on every device of its precision, and
its rows stay out of that fit (POOLED_FROM_BACKED says why).
fp8 is fitted per fp8 stack as well (`H100/fp8-torchao`, `H100/fp8-te`: benchmarks/replay_fp8_stack.py
names each source's), where MIN_SOURCES sources of the stack back it (torchao's own microbenchmark of its
float8 linear layer, benchmarks/fp8_linear.py, is one more of torchao's): its e_max on the stack's rows, its
s_half the device's fp8 curve's over every stack (stack_curves says why); a row is priced by the first curve
of preset_fit.curve_keys the fit has (its stack's, else its device's over every stack, else every
device's), as `launcher plan` prices its own fp8 (torchao's). Each row's step is priced fused or eager as
its source ran it (replay_fp8_stack.fused).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from benchmarks import fp8_linear
from benchmarks.replay_attention import attention_kernel
from benchmarks.replay_case import Case
from benchmarks.replay_fp8_stack import fp8_stack, fused
from launcher.compute.loss_bytes import loss_kind
from launcher.compute.shape_rate import Curve, Parts, mem_bw_gbs, step_parts
from launcher.perf.compute_term import expert_degree, tokens_per_optimizer_step
from launcher.perf.plan_table import work_of
from launcher.perf.preset_fit import curve_keys

E_GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)
"""Candidate e_max: the share of peak a large matmul reaches."""
H_GRID = np.array([0.0, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048])
"""Candidate s_half: the smallest dimension at which a matmul reaches half of e_max."""


def case_parts(case: Case) -> tuple[Parts, float] | None:
    """(the row's Parts, executed FLOPs per token ÷ the peak its MFU is against), or None where the
    shape model does not apply (a device of no known bandwidth)."""
    cfg = case.cfg
    if mem_bw_gbs(cfg.cluster.device_name) is None:
        return None
    work = work_of(cfg)
    parts = step_parts(
        cfg.model,
        micro_batch=cfg.batch.micro,
        device=cfg.cluster.device_name,
        dtype=work.dtype,
        tp=cfg.parallel.tp or 1,
        cp=cfg.parallel.cp or 1,
        ep=expert_degree(cfg),
        optimizer=str(cfg.optim.name),
        tokens_per_step=tokens_per_optimizer_step(cfg),
        compiled=fused(case.row)[0],
        fp8_stack=fp8_stack(case.row) or "torchao",
        attention_kernel=attention_kernel(case.row),
        fused_optimizer=True,  # FUSED_OPTIMIZER
        loss=loss_kind(cfg.trainer),
    )
    return parts, work.executed_flops / work.peak.flops


FUSED_OPTIMIZER = """Published rows are priced with a fused optimizer step (launcher/compute/optimizer.FUSED_BYTES):
Megatron-LM and NeMo run Apex's or Transformer Engine's FusedAdam in their distributed optimizer; the other
sources do not say, but torchtitan's 2024 tables (A100, H100) stepped AdamW with torch's foreach kernels and
weight decay 0.1 (its build_optimizers: foreach=not job_config.optimizer.fused, fused off by default until
pytorch/torchtitan PR #881, Feb 2025). Priced as they ran (80 B a parameter), at e569a06 they moved the
leave-one-source-out rows within 25% from 160 to 159 of 172 and the held-out interval's source-weighted coverage
from 92.1% to 89.7% (one row fewer inside): left fused, a known error of the replay's mapping, as the HBM
bandwidth of torchtitan's H100s is (benchmarks/data/README.md)."""


def grid_seconds(parts: Parts, fixed: Curve | None) -> np.ndarray:
    """Seconds per token over E_GRID × H_GRID: of every matmul and the attention (fixed None), or of
    the fp8 matmuls only, the rest priced by `fixed` (an fp8 row's bf16 curve)."""
    e, h = E_GRID[:, None], H_GRID[None, :]
    total = np.full((len(E_GRID), len(H_GRID)), parts.memory_s + parts.kernel_s)  # curve-free
    total += parts.attention_s / (e if fixed is None else fixed.e_max)
    for flops, s, peak, cap, fp8, shape in parts.matmuls:  # shape None: on the curve by s (fp8's)
        if fixed is not None and not fp8:
            share = s / (s + fixed.s_half) if shape is None else shape
            total += flops / min(peak * fixed.e_max * share, cap)
        else:
            total += flops / np.minimum(peak * e * (s / (s + h) if shape is None else shape), cap)
    return total


def fit_curve(
    cases: list[Case],
    log_at: Callable[[Case, np.ndarray], np.ndarray],
    fixed: dict,
    s_half: float | None = None,
    extra: np.ndarray | None = None,
) -> list[float]:
    """[e_max, s_half] minimising the source-weighted Σ ln²(predicted/published) over `cases`;
    `fixed[key]`: the bf16 curve an fp8 row prices its other ops by; `s_half` given: e_max alone;
    `extra`: one more source's loss over the grid (a microbenchmark's, fp8_linear)."""
    per_source = Counter(c.source for c in cases)
    loss = np.zeros((len(E_GRID), len(H_GRID))) if extra is None else extra.copy()
    for c in cases:
        parts, exec_per_peak = c.parts
        seconds = grid_seconds(parts, fixed.get(c.key))
        loss += (log_at(c, (exec_per_peak / seconds).ravel()).reshape(seconds.shape) - math.log(c.published)) ** 2 / (
            per_source[c.source]
        )
    if s_half is not None:  # every other column out of reach
        loss[:, H_GRID != s_half] = np.inf
    i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return [float(E_GRID[i]), float(H_GRID[j])]


SHARED_SHAPE = """How a matmul's rate rises with its shape comes from how tiled GEMM kernels fill a GPU (tiles, waves,
the k-loop's fill and drain), common to the devices here; one device's published rows span too few widths to
place it: on the 64 H100/bf16 rows the source-weighted loss moved 6% between s_half 0 and 256, and with
Qwen3's heads counted at their width the free fit fell to s_half 0, a curve flat in width. For bf16 it is
measured instead: XLA's table of 375 lone H100 GEMMs (benchmarks/gemm_table.py), whose rates one smallest
dimension cannot describe (the curve fitted on it: s_half 256 or 768 by the rows kept, rms 15-38%) and
compute/gemm_shape's two terms can (rms 5.2%); the pooled s_half the bf16 rows placed before (768, then 512)
was set by MPT's small models on H100s and borrowed by every other device. fp8 keeps its curve, its s_half
fitted over every device's fp8 rows, e_max per device."""


POOLED_FROM_BACKED = """The curve over every device (`*/bf16`) is fitted on the keys backed by MIN_SOURCES sources,
not on a key with fewer. Such a key has no e_max of its own, so in the pooled fit its rows can only move what
every device shares (the pooled e_max; fp8's s_half): one stack on one device would set every device's curve, as
MIN_SOURCES keeps it from setting its own device's constant. It did, when bf16 had a fitted s_half: B200's one
source (NousResearch's Qwen3 MoE on torchtitan, 18% of the B200's peak) and NeMo AutoModel's on H100 are the only
rows whose widest matmuls are narrow experts (768), and the B200 rows, fitted through s_half, pulled it from 192
(the fold without them) to 512 in-sample and to 1024 in the fold that held AutoModel out, which priced
AutoModel's expert GEMMs at 768 / (768 + 1024) = 43% of e_max, where s_half 192 gives 80% (its rows read -34%).
A key with fewer sources is still priced by the pooled curve, fitted without it."""


def fit_curves(cases: list[Case], log_at: Callable, min_sources: int) -> dict[str, list[float]]:
    """Curves per fit key backed by `min_sources` sources, fp8's also per fp8 stack (`H100/fp8-torchao`),
    and per precision over every backed device (`*/bf16`: POOLED_FROM_BACKED; over every device where no key
    is backed)."""
    shaped = [c for c in cases if c.parts is not None]
    curves: dict[str, list[float]] = {}
    for precision in ("bf16", "fp8"):
        mine = [c for c in shaped if c.key.endswith("/" + precision)]
        fixed = {c.key: bf16_curve(curves, c.key) for c in mine} if precision == "fp8" else {}
        if not mine or any(v is None for v in fixed.values()):
            continue
        groups: dict[str, list[Case]] = {}
        for c in mine:
            groups.setdefault(c.key, []).append(c)
        backed = [c for c in mine if len({d.source for d in groups[c.key]}) >= min_sources] or mine
        shape_free = 0.0 if precision == "bf16" else None  # bf16's shape is the table's (SHARED_SHAPE)
        curves[f"*/{precision}"] = pooled = fit_curve(backed, log_at, fixed, s_half=shape_free)
        for key in sorted(groups):  # each device's e_max on its own rows, at the pooled s_half (SHARED_SHAPE)
            if len({c.source for c in groups[key]}) >= min_sources:
                curves[key] = fit_curve(groups[key], log_at, fixed, s_half=pooled[1])
        if precision == "fp8":
            curves |= stack_curves(mine, log_at, fixed, curves, min_sources)
    return curves


def stack_curves(cases: list[Case], log_at: Callable, fixed: dict, curves: dict, min_sources: int) -> dict:
    """fp8 per stack (`H100/fp8-torchao`): e_max fitted on the stack's rows, s_half the device's fp8 curve's
    over every stack. Both stacks run cuBLASLt's fp8 GEMMs, so how a matmul's rate rises with its smallest
    dimension is the chip's; what a stack changes is a factor on every fp8 matmul (its scaling's work,
    beside the casts step_parts prices). One stack's sources (torchtitan's: Llama 3 8B to 405B) span too
    few widths to place s_half themselves. torchao's stack also fits on torchao's own microbenchmark of its
    float8 linear layer (fp8_linear), one more source, the one that prices the curve in isolation."""
    groups: dict[str, list[Case]] = {}
    for c in cases:
        groups.setdefault(curve_keys(c.key, fp8_stack(c.row))[0], []).append(c)
    out = {}
    for key, members in sorted(groups.items()):
        device = curves.get(key.split("-")[0]) or curves.get("*/fp8")
        micro, bf16 = key == fp8_linear.KEY, bf16_curve(curves, key)
        extra = fp8_linear.loss_grid(grid_seconds, bf16) if micro and bf16 is not None else None
        sources = {c.source for c in members} | ({fp8_linear.SOURCE} if extra is not None else set())
        if len(sources) >= min_sources and device is not None:
            out[key] = fit_curve(members, log_at, fixed, s_half=device[1], extra=extra)
    return out


def bf16_curve(curves: dict[str, list[float]], key: str) -> Curve | None:
    found = curves.get(key.split("/")[0] + "/bf16") or curves.get("*/bf16")
    return Curve(*found) if found else None


def own_curve(case: Case, curves: dict[str, list[float]]) -> list[float] | None:
    """The curve the row's matmuls (fp8's: its fp8 matmuls) are priced by: preset_fit.curve_keys' first."""
    return next((curves[k] for k in curve_keys(case.key, fp8_stack(case.row)) if k in curves), None)


def shaped_mfu(case: Case, curves: dict[str, list[float]]) -> float | None:
    """The MFU (executed FLOPs ÷ peak) the row's Parts come to under `curves`; None without a curve."""
    own = own_curve(case, curves) if case.parts is not None else None
    if own is None:
        return None
    parts, exec_per_peak = case.parts
    if case.key.endswith("/fp8"):
        base = bf16_curve(curves, case.key)
        return None if base is None else exec_per_peak / parts.seconds(base, Curve(*own)).total_s
    return exec_per_peak / parts.seconds(Curve(*own)).total_s


def curve_lines(constants: dict, folds: dict) -> list[str]:
    """The report's table of the fitted curves, in-sample and their range over the LOSO folds."""
    out = ["", "Matmul curves per key: e_max, and fp8's s_half (bf16's shape is compute/gemm_shape's, measured):", ""]
    out += ["| key | in-sample e_max | e_max over folds | s_half, in-sample and over folds |", "|---|---|---|---|"]
    for key, (e, h) in sorted(constants.get("curves", {}).items()):
        loso = [f["curves"][key] for f in folds.values() if key in f.get("curves", {})]
        es, hs = [v[0] for v in loso] or [e], [v[1] for v in loso] or [h]
        shape = "— (measured shape)" if key.endswith("/bf16") else f"{h:.0f}; {min(hs):.0f}–{max(hs):.0f}"
        out.append(f"| {key} | {e:.2f} | {min(es):.2f}–{max(es):.2f} | {shape} |")
    return out
