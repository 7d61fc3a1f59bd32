"""precision=fp8: torchao's float8 training on the built-in models (`pip install launcher[fp8]`).

Before any layout wraps the model (on the meta device, as torchtitan converts), every linear layer
inside the blocks becomes torchao's Float8Linear (dynamic tensorwise scaling): its matmuls run on
fp8 tensor cores, the rest of the model computes in bf16 (engines: autocast or FSDP's
MixedPrecisionPolicy at bf16). The output head stays bf16, as in torchtitan (its loss is sensitive
to the logits' precision), and so does any layer whose widths are not multiples of 16 (torch's
fp8 matmul needs them). Under FSDP the converted weights are all-gathered in fp8
(enable_fsdp_float8_all_gather): half the bytes of a bf16 gather, as the performance model counts
them (perf/shapes.py).

The device was checked before (config/validate_precision.py): a GPU of compute capability ≥ 8.9.
Run on one H200 (benchmarks/results/gpu_smoke.md: DDP and FSDP, eager and compiled, losses within
0.4% of bf16's; fp8_speedup.md: its speed against the plan's); the CPU tests check the refusals."""

from __future__ import annotations

from torch import nn

from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.layouts import DataParallel, traits

FP8_MULTIPLE = 16
"""torch._scaled_mm needs both widths of a float8 matmul divisible by 16."""


def wants_fp8(name: str, module: nn.Module) -> bool:
    """A linear layer of a block whose widths fp8 matmuls take."""
    return (
        isinstance(module, nn.Linear)
        and name.startswith("blocks.")
        and module.in_features % FP8_MULTIPLE == 0
        and module.out_features % FP8_MULTIPLE == 0
    )


def convert(model: nn.Module, cfg: LauncherConfig) -> int:
    """Swap the blocks' linear layers for Float8Linear in place; returns how many were swapped."""
    try:  # lazy: torchao is an optional extra, needed by precision=fp8 only
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        raise ConfigError(
            "precision=fp8 needs torchao (torchao.float8), which is not installed here; "
            "pip install 'launcher[fp8]', or use precision=bf16"
        ) from None
    fsdp = traits(cfg.parallel.layout).data_parallel == DataParallel.fsdp
    config = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp)
    swapped = [name for name, module in model.named_modules() if wants_fp8(name, module)]
    convert_to_float8_training(model, config=config, module_filter_fn=lambda m, fqn: wants_fp8(fqn, m))
    return len(swapped)
