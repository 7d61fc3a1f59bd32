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
from launcher.perf import preset_fit
from launcher.perf.compute_term import shaped_mfu
from launcher.perf.plan_table import work_of

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


def _bytes_per_param(name: str, decay: float = 0.0, **kw) -> float:
    """Bytes a second step moves per parameter (the first creates the state)."""
    p = torch.nn.Parameter(torch.randn(N))
    if name == "adamw":
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=decay, **kw)
    else:
        opt = torch.optim.SGD([p], lr=1e-3, momentum=0.9, weight_decay=decay, **kw)
    for _ in range(2):
        p.grad = torch.randn(N)
        with Traffic() as seen:
            opt.step()
    return seen.bytes / N


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_torchs_default_step_moves_the_unfused_count_and_its_fused_kernel_the_fused_one(name):
    """The launcher's trainer leaves `fused` unset (train/loop.build_optimizer): a for-loop on CPU, foreach on CUDA
    (the same passes over whole tensors: foreach=True here checks them). AdamW 72 and 28 B, SGD with momentum 32
    and 20; a weight decay adds 8 and 12 unfused. Fails if a count is edited away from the kernels (AdamW's unfused
    at 28, as before this count; a decay priced in a fused step)."""
    assert _bytes_per_param(name) == UNFUSED_BYTES[name] == step_bytes(name, fused=False)
    assert _bytes_per_param(name, foreach=True) == UNFUSED_BYTES[name]
    assert _bytes_per_param(name, fused=True) == FUSED_BYTES[name] == step_bytes(name, fused=True)
    # A weight decay: one more pass unfused (AdamW's mul_ of the weight 8, SGD's grad.add(weight) 12), none fused.
    assert (
        _bytes_per_param(name, 0.1)
        == _bytes_per_param(name, 0.1, foreach=True)
        == step_bytes(name, fused=False, decay=True)
    )
    assert step_bytes(name, fused=False, decay=True) == UNFUSED_BYTES[name] + {"adamw": 8, "sgd": 12}[name]
    assert _bytes_per_param(name, 0.1, fused=True) == FUSED_BYTES[name] == step_bytes(name, fused=True, decay=True)


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


def test_the_planner_prices_the_recipes_weight_decay_as_one_more_unfused_pass():
    """`launcher plan`'s compute term (perf/compute_term.shaped_mfu) at optim.weight_decay 0.1 against 0: AdamW's
    8 B a parameter more over the step's tokens, at the H200's bandwidth. Fails if the planner drops the decay."""
    seconds = {}
    for decay in (0.0, 0.1):
        args = ["model=gpt_125m", "batch.micro=8", "cluster.device=cuda", "cluster.device_name=NVIDIA H200"]
        cfg = compose_config([*args, "precision=bf16", "train.compile=true", f"optim.weight_decay={decay}"], None)
        w = work_of(cfg)
        mfu = shaped_mfu(
            cfg, executed_flops=w.executed_flops, peak_flops=w.peak.flops, dtype=w.dtype, fit=preset_fit.load()
        )
        seconds[decay] = w.executed_flops / (w.peak.flops * mfu[0])
    tokens = 8 * cfg.model.seq_len
    assert seconds[0.1] - seconds[0.0] == pytest.approx(8 * param_counts(cfg.model)[0] / tokens / (4800e9 * 0.8))
