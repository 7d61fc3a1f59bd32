"""Where a precision can train: fp16 not on CUDA (no loss scaling in the built-in loop); fp8 only where
torchao's float8 linear layers find fp8 tensor cores (NVIDIA compute capability ≥ 8.9: L40S, H100,
H200, B200, GB200, B300), on a model whose linear layers the launcher knows (the built-in ones) and
without tensor parallel. A plan may still model both (fp8 on any device of the peak table that has an
fp8 peak, compute/fp8.py)."""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.config.schema import ModelConfig
from launcher.layouts import layout_names, traits

FP8_CAPABILITY = (8, 9)
"""The first CUDA compute capability with fp8 tensor cores (Ada; Hopper is 9.0)."""
USE_INSTEAD = "use precision=bf16 (or fp32)"


def check_precision_device(precision: str, device_type: str) -> None:
    """fp16 on CUDA is refused: its gradients underflow without loss scaling (a GradScaler, which
    the built-in loop and its FSDP/pipeline layouts do not run). bf16 has fp32's range and the
    same tensor-core peak on A100/H100. On CPU fp16 autocast stays allowed (no GPU peak to chase)."""
    if precision == "fp16" and device_type == "cuda":
        raise ConfigError(
            "precision=fp16 on CUDA needs loss scaling (a gradient scaler), which the built-in loop "
            "does not run; use precision=bf16 (same peak on A100/H100) or precision=fp32"
        )
    check_fp8_device(precision, device_type)


def check_fp8_device(precision: str, device_type: str) -> None:
    """fp8 on a CPU rank is refused: float8 matmuls (torch._scaled_mm) run on fp8 tensor cores only."""
    if precision == "fp8" and device_type != "cuda":
        raise ConfigError(
            f"precision=fp8 needs an NVIDIA GPU of compute capability ≥ 8.9 (H100, L40S, B200), but the ranks "
            f"run on {device_type} (cluster.device, or no GPU found); {USE_INSTEAD}"
        )


def check_fp8_capability(precision: str, capability: tuple[int, int], name: str) -> None:
    """fp8 on a GPU older than Ada/Hopper (A100 is 8.0) is refused, in the payload that sees it."""
    if precision == "fp8" and tuple(capability) < FP8_CAPABILITY:
        major, minor = capability
        raise ConfigError(
            f"precision=fp8 needs a GPU of compute capability ≥ 8.9 (fp8 tensor cores), but {name} is "
            f"{major}.{minor}; {USE_INSTEAD}"
        )


def check_fp8_model(m: ModelConfig, precision: str) -> None:
    """fp8 converts the built-in models' block linear layers; a `_target_` model's are unknown here."""
    if precision == "fp8" and m._target_ is not None:
        raise ConfigError(
            f"precision=fp8 converts the built-in models' linear layers; model._target_={m._target_!r} is not "
            f"one; {USE_INSTEAD}, or convert your model's layers to float8 yourself"
        )


def check_fp8_layout(precision: str, layout: str) -> None:
    """fp8 trains where no tensor parallel splits the linear layers: torchao's float8 layers need its own
    TP styles (Float8ColwiseParallel, …) under tensor parallel, which the engines do not apply."""
    if precision == "fp8" and traits(layout).splits("tp"):
        can = " or ".join(f"parallel={name}" for name in layout_names(lambda t: not t.splits("tp")))
        raise ConfigError(
            f"precision=fp8 trains under {can}, not parallel={layout}: tensor parallel would need torchao's "
            "float8 TP styles, which the engines do not apply; `launcher plan` still models it"
        )
