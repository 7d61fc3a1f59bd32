"""Training FLOPs of any model, counted rather than derived: torch's FlopCounterMode over the
forward and backward of one micro-batch, for models no analytic formula (launcher/compute/flops.py)
describes. Counted once per recipe and cached in the sweep folder (`flops.json`), so the trials
of one sweep share the count.

Where it runs: the model is built on the meta device and fed meta tensors, so nothing is
allocated and a 70B model counts as fast as a tiny one; scaled_dot_product_attention on meta
takes the math path, whose batched matmuls the counter sees. A model with an op that has no meta
kernel (a custom op, a data-dependent shape) is counted instead by one real step on the CPU
(`FlopCount.counted_on` says which); there the fused CPU attention kernel is counted by
`CPU_ATTENTION` (torch registers no formula for it).

What is counted is what FlopCounterMode counts: matmuls, convolutions and attention. Norms,
activations, softmax and the optimizer are not, as in the analytic convention (6N + 12·L·H·Q·T,
there "N" also counts norm weights and biases, which no matmul multiplies: for the built-in GPTs
the two agree within 0.1% at d_model ≥ 1024, tests/unit/test_flop_count.py).

Unlike its neighbours in launcher/compute, this module imports torch: it builds the model. Its
callers are the payload (launcher/train/measure.py) and plan-time checks, never `plan` itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from launcher.config.schema import InputSpec

FLOPS_FILE = "flops.json"
"""The cache file in a sweep folder: {key: FlopCount as a dict}."""


def torch_dtype(spec: InputSpec) -> torch.dtype:
    """The torch dtype of an input spec's `dtype` (a name such as int64 or bfloat16)."""
    dtype = getattr(torch, str(spec.dtype), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"input dtype {str(spec.dtype)!r} is not a torch dtype; use e.g. int64, float32, bfloat16")
    return dtype


def random_tensor(
    spec: InputSpec,
    leading: tuple[int, ...],
    *,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A tensor of shape `leading` + spec.shape: integers (and bool) uniform in [low, high), floats N(0, 1)."""
    shape, dtype = (*leading, *spec.shape), torch_dtype(spec)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator, device=device).to(dtype)
    high = spec.high if spec.high is not None else 2
    return torch.randint(spec.low, high, shape, generator=generator, device=device).to(dtype)


@dataclass(kw_only=True, frozen=True)
class FlopCount:
    """FLOPs of one training micro-batch (forward + backward), and per sample and per token."""

    forward: int
    """FLOPs of the micro-batch's forward (the loss included)."""
    backward: int
    """FLOPs of its backward."""
    micro: int
    """Samples in the counted micro-batch."""
    per_sample: float
    """(forward + backward) ÷ micro: training FLOPs per sample."""
    tokens_per_sample: int | None
    """Tokens in one sample, as the caller gave it; None: the batch has no token dimension
    (images), and only per-sample figures apply."""
    per_token: float | None
    """per_sample ÷ tokens_per_sample (None without a token dimension)."""
    counted_on: str
    """`meta` (no memory, no compute) or `cpu` (one real step: some op had no meta kernel)."""
    meta_error: str | None = None
    """Why meta was given up for the CPU (the op's error, one line); None when meta worked."""


def cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """CPU's fused attention forward: scores and weighted values, 2·b·H·Tq·Tk·Q each, every
    position against the whole sequence (the convention: the causal half is not discounted)."""
    b, h, t_q, q = query
    return 4 * b * h * t_q * key[-2] * q


def cpu_attention_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return 2 * cpu_attention_flops(query, key, value)


CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_attention_backward_flops,
}
"""Formulas FlopCounterMode lacks for the CPU's fused attention (a CPU-counted step uses it)."""

Step = Callable[[nn.Module, Mapping[str, torch.Tensor]], torch.Tensor]
"""step(model, batch) → the scalar loss of one micro-batch (forward and loss, no backward)."""


def own_loss_step(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The default step: the model takes the batch as keyword arguments and returns its loss."""
    return model(**batch)


def count_flops(
    build: Callable[[], nn.Module],
    batch: Mapping[str, torch.Tensor],
    step: Step = own_loss_step,
    *,
    tokens_per_sample: int | None = None,
) -> FlopCount:
    """Training FLOPs of one micro-batch: `step(model, batch)` (forward and loss) and the loss's
    backward, counted by FlopCounterMode.

    build: returns the model; called under `torch.device("meta")`, then, should meta fail, on
        the CPU. Called once or twice: it must build the same model each time.
    batch: one micro-batch, name → tensor with the batch dimension first (its size is the number
        of samples), e.g. a synthetic batch; moved to the meta device for the count (no copy of
        values), used as it is on the CPU fallback.
    step: step(model, batch) → scalar loss; default: `model(**batch)` is the loss.
    tokens_per_sample: tokens in one sample, for `per_token`; None: no token dimension.
    Raises what the model raises on the CPU too (meta's error is the exception's __context__).

    For a `_target_` recipe (launcher/train/models/byo.py) that is, e.g.,
    `count_flops(lambda: build_target(m), batch, lambda model, b: step_loss(model, b, m),
    tokens_per_sample=tokens_per_sample(m))`."""
    micro = next(iter(batch.values())).shape[0]
    try:
        fwd, bwd = _count_on(torch.device("meta"), build, batch, step)
        where, why = "meta", None
    except Exception as meta_error:  # noqa: BLE001 — any op without a meta kernel: count one real step
        why = f"{type(meta_error).__name__}: {(str(meta_error).splitlines() or [''])[0]}"[:300]
        fwd, bwd = _count_on(torch.device("cpu"), build, batch, step)
        where = "cpu"
    per_sample = (fwd + bwd) / micro
    return FlopCount(
        forward=fwd,
        backward=bwd,
        micro=micro,
        per_sample=per_sample,
        tokens_per_sample=tokens_per_sample,
        per_token=per_sample / tokens_per_sample if tokens_per_sample else None,
        counted_on=where,
        meta_error=why,
    )


def _count_on(
    device: torch.device, build: Callable[[], nn.Module], batch: Mapping[str, torch.Tensor], step: Step
) -> tuple[int, int]:
    """(forward, backward) FLOPs of one micro-batch on `device`."""
    with torch.random.fork_rng(devices=[]), torch.device(device):  # the count leaves the caller's RNG alone
        model = build()
    if not isinstance(model, nn.Module):
        raise TypeError(f"the model builder returned {type(model).__name__}, not a torch.nn.Module")
    model.to(device)  # a builder that ignores the default device still counts where asked
    here = {name: t.to(device) for name, t in batch.items()}
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        loss = step(model, here)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(
                f"the loss is {type(loss).__name__} of shape {tuple(getattr(loss, 'shape', ()))}, "
                "not a scalar tensor; give the recipe a `loss` or return a scalar from forward"
            )
        forward = counter.get_total_flops()
        loss.backward()
        total = counter.get_total_flops()
    return int(forward), int(total - forward)


def flops_key(*parts: Any) -> str:
    """A stable key for what the count depends on (the model recipe, the inputs, micro, the loss):
    16 hex digits of the SHA-256 of their JSON (sorted keys; anything else by str())."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_folder(folder: str | Path) -> Path:
    """Where flops.json lives: a sweep's trial folder (`<sweep>/trials/<id>`, trials/folder.py)
    gives its sweep's folder, shared by all its trials; any other folder (a sweep's, a `launcher
    run`'s) is itself."""
    folder = Path(folder)
    return folder.parent.parent if folder.parent.name == "trials" else folder


def cached_flops(folder: str | Path, key: str, compute: Callable[[], FlopCount]) -> FlopCount:
    """The count under `key` from flops.json in `cache_folder(folder)` (a sweep folder or one of
    its trial folders), else `compute()` written there: the trials of one sweep count once.
    Written atomically (a rename); two trials counting at once write the same figures, the
    later rename wins, nothing is torn."""
    path = cache_folder(folder) / FLOPS_FILE
    known = _read(path)
    if key in known:
        try:
            return FlopCount(**known[key])
        except TypeError:  # written by another version of FlopCount: count afresh
            pass
    count = compute()
    known = {**_read(path), key: dataclasses.asdict(count)}
    tmp = path.with_name(f".{FLOPS_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return count


def _read(path: Path) -> dict[str, Any]:
    """flops.json's entries; {} where it is missing or unreadable (the cache only saves time)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
