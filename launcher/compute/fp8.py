"""fp8 training as the performance model counts it (pure: no torch). torchao's float8 training
converts the blocks' linear layers (attention's q, k, v, output projections and the feed-forward's)
to float8: their matmuls run at the device's fp8 peak. The attention core (scores and weighted
values), the output head (torchtitan leaves it in bf16, so does the launcher) and the rest run
at bf16. So a step's hardware FLOPs split into

    fp8:  6 · (block parameters − block norms) · L per token, plus what full checkpointing reruns of them
    bf16: the attention core (12·L·H·Q·T, its forward again under selective or full recompute),
          the head (6 · d · vocab) and the norms' 6 per parameter

and the device runs them at the blend 1 / (s / P_fp8 + (1 − s) / P_bf16), s the fp8 share: the peak
MFU is quoted against for precision=fp8 (cluster.peak_flops_per_device, when set, is taken as that
blend)."""

from __future__ import annotations

from dataclasses import replace

from launcher.compute.flops import (
    attention_forward_flops_per_token,
    hardware_flops_per_token,
    model_parts,
)
from launcher.compute.peaks import PeakChoice, choose_peak
from launcher.config.errors import ConfigError
from launcher.config.schema import ModelConfig


def bf16_flops_per_token(m: ModelConfig) -> float:
    """Hardware FLOPs per token an fp8 run still runs at bf16: attention core, head, norms."""
    parts = model_parts(m)
    core = attention_forward_flops_per_token(m)
    recompute = core if m.activation_checkpointing in ("selective", "full") else 0
    return float(3 * core + recompute + 6 * (parts.head + parts.final_norm + m.n_layers * parts.block_norms))


def fp8_share(m: ModelConfig, non_embedding_params: int | None = None) -> float:
    """s: the share of the hardware FLOPs per token the blocks' float8 linear layers run."""
    total = hardware_flops_per_token(m, non_embedding_params)
    return max(0.0, total - bf16_flops_per_token(m)) / total


def blend(share: float, fp8: float, bf16: float) -> float:
    """FLOP/s of work whose `share` runs at `fp8` FLOP/s and the rest at `bf16`."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"fp8 share must be in [0, 1], got {share}")
    return 1.0 / (share / fp8 + (1.0 - share) / bf16)


def precision_peak(
    *, device_name: str | None, dtype: str, explicit: float | None, model: ModelConfig, detected: str | None = None
) -> PeakChoice:
    """choose_peak's peak, for dtype fp8 the blend of the device's fp8 and bf16 peaks at the model's
    fp8 share. ConfigError for fp8 on a device of the table without fp8 tensor cores (A100)."""
    if dtype != "fp8":
        return choose_peak(device_name=device_name, dtype=dtype, explicit=explicit, detected=detected)
    fp8 = choose_peak(device_name=device_name, dtype=dtype, explicit=None, detected=detected)
    if fp8.device is not None and fp8.flops is None:  # even with an explicit peak: the device cannot run it
        raise ConfigError(
            f"precision=fp8 on {fp8.device}: it has no fp8 tensor cores (compute capability < 8.9); "
            "use precision=bf16, or a device with them (H100, H200, B200, GB200, B300)"
        )
    if explicit or fp8.flops is None:
        return choose_peak(device_name=device_name, dtype=dtype, explicit=explicit, detected=detected)
    bf16 = choose_peak(device_name=device_name, dtype="bf16", explicit=None, detected=detected)
    share = fp8_share(model)
    return replace(
        fp8,
        flops=blend(share, fp8.flops, bf16.flops),
        source=f"{share:.0%} of the FLOPs (the blocks' linear layers) at the {fp8.device} dense fp8 peak "
        f"{fp8.flops:.3g}, the rest (attention core, head, norms) at its bf16 peak {bf16.flops:.3g}: {fp8.source}",
    )
