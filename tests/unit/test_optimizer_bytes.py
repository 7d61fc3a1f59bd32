"""What an optimizer step moves (launcher/compute/optimizer.py), counted from the kernels torch runs: each aten
op a step dispatches on the parameter-sized tensors, its distinct tensors read and the ones it writes."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from launcher.compute.flops import param_counts
from launcher.compute.optimizer import FUSED_BYTES, UNFUSED_BYTES, step_bytes
from launcher.compute.shape_rate import step_parts
from launcher.config.compose import compose_config

N = 4096
"""Elements of the one parameter: scalars (the step count, bias corrections) are not parameter-sized."""


class Traffic(TorchDispatchMode):
    """Bytes of N-element tensors each dispatched op reads (its distinct inputs) and writes (its outputs, and the
    arguments its schema lets it write that it changed: an in-place foreach or fused op returns none)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        mutable = [a for a, arg in zip(args, func._schema.arguments) if arg.alias_info and arg.alias_info.is_write]
        before = [(t, t.clone()) for t in _tensors(mutable) if t.numel() == N]
        out = func(*args, **(kwargs or {}))
        ins = {t.data_ptr(): t for t in _tensors((args, kwargs)) if t.numel() == N}
        changed = [t for t, old in before if not torch.equal(t, old)]  # the schema marks grads, unwritten here
        written = {t.data_ptr(): t for t in [*_tensors(out), *changed] if t.numel() == N}
        self.bytes += sum(t.numel() * t.element_size() for t in [*ins.values(), *written.values()])
        return out


def _tensors(tree) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for x in tree for t in _tensors(x)]
    if isinstance(tree, dict):
        return [t for x in tree.values() for t in _tensors(x)]
    return []


def _bytes_per_param(name: str, **kw) -> float:
    """Bytes a second step moves per parameter (the first creates the state)."""
    p = torch.nn.Parameter(torch.randn(N))
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.0, **kw) if name == "adamw" else None
    opt = opt or torch.optim.SGD([p], lr=1e-3, momentum=0.9, **kw)
    for _ in range(2):
        p.grad = torch.randn(N)
        with Traffic() as seen:
            opt.step()
    return seen.bytes / N


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_torchs_default_step_moves_the_unfused_count_and_its_fused_kernel_the_fused_one(name):
    """The launcher's trainer leaves `fused` unset (train/loop.build_optimizer): a for-loop on CPU, foreach on CUDA
    (the same passes over whole tensors: foreach=True here checks them). AdamW 72 and 28 B, SGD with momentum 32
    and 20. Fails if a count is edited away from the kernels (AdamW's unfused at 28, as before this count)."""
    assert _bytes_per_param(name) == UNFUSED_BYTES[name] == step_bytes(name, fused=False)
    assert _bytes_per_param(name, foreach=True) == UNFUSED_BYTES[name]
    assert _bytes_per_param(name, fused=True) == FUSED_BYTES[name] == step_bytes(name, fused=True)


def test_a_step_of_the_launchers_trainer_prices_its_unfused_optimizer():
    """step_parts without fused_optimizer (as the planner calls it, for the launcher's own trainer) adds the unfused
    AdamW's 72 B a parameter, over the step's tokens; the replay's fused 28. Fails if the default were fused (the
    difference 0) or the table read were one for both."""
    cfg = compose_config(["model=gpt_125m", "batch.micro=8", "cluster.device_name=NVIDIA H200"], None)
    shape = dict(micro_batch=8, device="NVIDIA H200", dtype="bf16", tokens_per_step=8192.0, compiled=True)
    unfused = step_parts(cfg.model, **shape)
    fused = step_parts(cfg.model, **shape, fused_optimizer=True)
    bw = 4800e9 * 0.8  # the H200's 4.8 TB/s at shape_rate.MEMORY_SHARE
    assert unfused.memory_s - fused.memory_s == pytest.approx((72 - 28) * param_counts(cfg.model)[0] / 8192.0 / bw)
    with pytest.raises(ValueError, match="optimizer 'lion': its step's bytes are counted for adamw, sgd only"):
        step_bytes("lion", fused=False)
