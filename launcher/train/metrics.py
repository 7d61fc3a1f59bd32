"""Pure arithmetic on measured times: no torch, no I/O, so it is tested on literal numbers."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), q in [0, 1]."""
    s = sorted(values)
    if not s:
        raise ValueError("quantile of no values")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def step_stats(step_times: Sequence[float]) -> dict[str, float]:
    return {
        "step_time_median_s": statistics.median(step_times),
        "step_time_p10_s": quantile(step_times, 0.10),
        "step_time_p90_s": quantile(step_times, 0.90),
    }


def throughput(*, global_batch: int, seq_len: int, step_time_s: float, devices: int) -> dict[str, float]:
    samples = global_batch / step_time_s
    tokens = samples * seq_len
    return {"samples_per_s": samples, "tokens_per_s": tokens, "tokens_per_s_per_device": tokens / devices}


def mfu(
    *, tokens_per_s: float, flops_per_token: float, peak_flops_per_device: float | None, devices: int
) -> float | None:
    """Achieved model FLOP/s ÷ (peak per device × devices); None when the peak is unknown. With
    hardware FLOPs per token (recompute included) it is the HFU."""
    if not peak_flops_per_device:
        return None
    return tokens_per_s * flops_per_token / (peak_flops_per_device * devices)


def ring_bus_factor(n: int) -> float:
    """nccl-tests all-reduce bus factor: busbw = algbw · 2(n−1)/n."""
    return 2 * (n - 1) / n


def allreduce_bandwidth(*, nbytes: int, seconds: float, n: int) -> dict[str, float | None]:
    """algbw = S/t; busbw = algbw · 2(n−1)/n (GB/s, 1e9). One rank moves nothing: both None."""
    if n < 2 or seconds <= 0:
        return {"algbw_gbps": None, "busbw_gbps": None}
    algbw = nbytes / seconds / 1e9
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * ring_bus_factor(n)}


def ccr(*, comm_s: float, compute_s: float) -> float | None:
    """Communication-to-computation ratio of one optimizer step."""
    return comm_s / compute_s if compute_s > 0 else None


def spread(values: Sequence[float]) -> float:
    """Relative spread max/min − 1 (0 when all equal)."""
    return max(values) / min(values) - 1 if values and min(values) > 0 else 0.0
