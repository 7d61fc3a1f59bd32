"""precision=fp8: torchao's float8 training on the built-in models (`pip install launcher[fp8]`).

Before any layout wraps the model (on the meta device, as torchtitan converts), every linear layer
inside the blocks becomes torchao's Float8Linear (dynamic tensorwise scaling): its matmuls run on
fp8 tensor cores, the rest of the model computes in bf16 (engines: autocast or FSDP's
MixedPrecisionPolicy at bf16). The output head stays bf16, as in torchtitan (its loss is sensitive
to the logits' precision), and so does any layer whose widths are not multiples of 16 (torch's
fp8 matmul needs them). Under FSDP the converted weights are all-gathered in fp8
(enable_fsdp_float8_all_gather): half the bytes of a bf16 gather, as the performance model counts
them (perf/shapes.py). Each such gather needs its weight's scale, the amax of the whole weight: left
to itself, every converted layer all-reduces its own amax at every all-gather (forward, and again
in backward where FSDP reshards); `ScalePrecompute` computes them all after each optimizer step in
one all-reduce per mesh (torchao's precompute_float8_dynamic_scale_for_fsdp, as torchtitan does).

The device was checked before (config/validate_precision.py): a GPU of compute capability ≥ 8.9.
Run on one H200 (benchmarks/results/gpu_smoke.md: DDP and FSDP, eager and compiled, losses within
0.4% of bf16's; fp8_speedup.md: its speed against the plan's); the CPU tests check the refusals."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import DTensor

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
    config = Float8LinearConfig(enable_fsdp_float8_all_gather=gathers_in_fp8(cfg))
    swapped = [name for name, module in model.named_modules() if wants_fp8(name, module)]
    convert_to_float8_training(model, config=config, module_filter_fn=lambda m, fqn: wants_fp8(fqn, m))
    return len(swapped)


def gathers_in_fp8(cfg: LauncherConfig) -> bool:
    """Whether FSDP2 all-gathers the converted weights in fp8: precision=fp8 under a layout whose
    data parallel is FSDP (fsdp, hsdp, fsdp_cp, fsdp_pp, fsdp_ep)."""
    return cfg.precision == "fp8" and traits(cfg.parallel.layout).data_parallel == DataParallel.fsdp


class ScalePrecompute:
    """After each optimizer step, every fp8-gathered weight's scale for the next all-gathers, from
    one all-reduce of all their amaxes (torchao's precompute_float8_dynamic_scale_for_fsdp) instead
    of one per layer per all-gather. Once a scale is precomputed the gathers use it until the next
    one, so it must run after every step that changes the weights: it is hooked to the optimizer
    (precompute_after_steps). One call per device mesh the weights are sharded on: torchao stacks them all
    into one tensor, and under fsdp_ep the experts' mesh (edp) is not the others' (dp)."""

    def __init__(self, model: nn.Module) -> None:
        # lazy: torchao is an optional extra; convert() has imported it already (or refused)
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
        from torchao.float8.float8_linear import Float8Linear

        by_mesh: dict[object, list[nn.Module]] = {}
        for module in model.modules():  # a pipeline rank: only its stages' weights are DTensors
            if isinstance(module, Float8Linear) and isinstance(module.weight, DTensor):
                by_mesh.setdefault(module.weight.device_mesh, []).append(module)
        self._precompute = precompute_float8_dynamic_scale_for_fsdp
        self.groups = [nn.ModuleList(linears) for linears in by_mesh.values()]
        self.calls = 0
        """Optimizer steps after which the scales were precomputed (the record's figure)."""

    def __call__(self) -> None:
        for group in self.groups:
            self._precompute(group)
        self.calls += 1


def precompute_after_steps(
    model: nn.Module, optimizer: torch.optim.Optimizer, cfg: LauncherConfig
) -> ScalePrecompute | None:
    """Where it applies (fp8 weights gathered by FSDP2, dynamic tensorwise scaling: convert()'s only
    kind), the scale precompute hooked to run after every `optimizer.step()`; None elsewhere (DDP
    holds whole weights: nothing is gathered). Call it once the layout has sharded the model."""
    if not gathers_in_fp8(cfg):
        return None
    precompute = ScalePrecompute(model)
    optimizer.register_step_post_hook(lambda *_: precompute())
    return precompute


def metrics(precompute: ScalePrecompute | None) -> dict[str, int]:
    """The record's figures: after how many optimizer steps the fp8 scales were precomputed, and for
    how many of this rank's weights each time; {} where they are not (no fp8 gathers)."""
    if precompute is None:
        return {}
    weights = sum(len(group) for group in precompute.groups)
    return {"fp8_scales_precomputed_steps": precompute.calls, "fp8_scales_precomputed_weights": weights}
