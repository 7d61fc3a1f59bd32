"""Your own model by `_target_`: built with Hydra's `instantiate` on the meta device, fed a dict
batch (`model(**inputs)`), its loss from model.loss or its own output; FSDP units and full
activation checkpointing picked by class name or size.

The recipe (recipes/model/<name>.yaml, or model/<name>.yaml in your --recipes folder):

    _target_: mypkg.models.build        # any callable returning an nn.Module
    width: 512                          # every other key: the callable's keyword arguments
    inputs:                             # one sample of the synthetic batch, name → spec
      tokens: {shape: [1024], dtype: int64, high: 32000}
    target: {shape: [], dtype: int64, high: 1000}     # what the loss compares with
    loss: cross_entropy                 # or mse, or {_target_: mypkg.losses.my_loss}

- Keys the launcher reads: name (default: the recipe's file name), _target_, kwargs, inputs,
  target, loss, activation_checkpointing; every other key (vocab_size, seq_len too) is moved into
  `kwargs` and passed to the callable (launcher/config/load.py).
- The batch: a dict of `inputs` (the batch dimension first) reaching the model as keyword
  arguments, plus model.target under "target" (validate_byo.TARGET_KEY), which only the loss
  sees. Integers uniform in [low, high), floats N(0, 1); sample i from its own seeded generator,
  the same on every rank and layout (data.sample_seed). data=dataset gives your own samples.
- The loss: loss(output, target) → scalar; with no `loss` (and no `target`) the model's own: a
  scalar output, or its `.loss` (Hugging Face models given a `labels` input).
- Tokens per sample: the elements of the first integer input; none (an image model): 1, so
  tokens/s is samples/s (tokens_per_sample). FLOPs: torch's counter (model/flop_count.py).
- Layouts: ddp and fsdp (units: parallel.fsdp_units by class name, else parallel.fsdp_min_params);
  tp with the recipe's parallel.tp_plan (engines/byo_tp.py); pipeline and dp_pp with its
  parallel.pp_split (engines/byo_pipeline.py): each row's byo_engine in launcher/layouts.py;
  fsdp_pp, fsdp_tp and fsdp_tp_pp have none and are refused by config validation (config/validate_layout.py).
- Found through this environment locally (the ranks inherit it, and cluster.env), through
  cluster.setup / cluster.env (`PYTHONPATH=/shared/src`) on Slurm; checked at plan time
  (byo_check.py), cluster.env's PYTHONPATH included.

Initial values are the same whatever the layout and rank count (so the parity tests hold): the
module types the launcher knows (Linear, Embedding, LayerNorm, RMSNorm, Conv, BatchNorm,
GroupNorm: init.RULE_TYPES) get theirs from (seed, name) as the built-in models do, each rank drawing
only its own piece; anything else a module holds (a parameter of a module type the launcher does not
know, such as a Hugging Face RMSNorm's weight, or a buffer computed in __init__, such as a rotary
table) is copied from one build of the model on the CPU under the seed in which the known types stay
on the meta device (`ReferenceValues`, made only when such a tensor exists): a rank allocates on the
host those unknown tensors alone, never the model. Where they are a large part of the model
(over HOST_INIT_LIMIT elements), the plan refuses it, naming their module types (byo_check.py)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import Dataset

from launcher.compute.flop_count import FlopCount, cached_flops, count_flops, flops_key, random_tensor, torch_dtype
from launcher.config.schema import InputSpec, ModelConfig, ParallelConfig
from launcher.config.validate_byo import TARGET_KEY  # the batch key of model.target; the others are inputs
from launcher.train.models.init import has_rule, param_seed, rule_types_on_meta
from launcher.train.models.target import instantiate


def is_byo(m: ModelConfig) -> bool:
    return m._target_ is not None


def build_target(m: ModelConfig) -> nn.Module:
    """model._target_(**model.kwargs), on the current default device (the payload: meta)."""
    built = instantiate({"_target_": m._target_, **m.kwargs}, key="model._target_")
    if not isinstance(built, nn.Module):
        raise TypeError(f"model._target_={m._target_!r} returned {type(built).__name__}, not a torch.nn.Module")
    return built


def is_integer(spec: InputSpec) -> bool:
    return not torch_dtype(spec).is_floating_point


def tokens_per_sample(m: ModelConfig) -> int:
    """Tokens in one sample: model.seq_len for the built-in models; for a `_target_` model the
    elements of its first integer input (token ids: [seq] → seq); a model with no integer input
    (an image model) counts each sample as one token, so tokens/s is its samples/s and the table,
    efficiency, cost and recommendation apply unchanged (the record's `tokens_per_sample` says 1)."""
    if not is_byo(m):
        return m.seq_len
    first = next((s for s in m.inputs.values() if is_integer(s)), None)
    return 1 if first is None else math.prod(first.shape)


def counted_flops_per_token(m: ModelConfig, micro: int, folder: Path | None = None) -> float:
    """Training FLOPs per token (tokens_per_sample) of a `_target_` model, counted by torch's FLOP
    counter on the meta device (model/flop_count.py); what activation checkpointing recomputes is
    not in it (MFU's model FLOPs; HFU is then the same figure). With `folder` (the trial's), the
    count is cached in its sweep's flops.json under the model recipe: a sweep counts once."""

    def count() -> FlopCount:
        specs = dict(m.inputs) | ({TARGET_KEY: m.target} if m.target is not None else {})
        batch = {name: random_tensor(spec, (micro,)) for name, spec in specs.items()}
        loss = loss_fn(m)
        return count_flops(
            lambda: build_target(m),
            batch,
            lambda model, b: step_loss(model, b, loss),
            tokens_per_sample=tokens_per_sample(m),
        )

    found = count() if folder is None else cached_flops(folder, flops_key(dataclasses.asdict(m)), count)
    return found.per_sample / tokens_per_sample(m)


class SyntheticInputs(Dataset):
    """Sample i of model.inputs (and model.target under TARGET_KEY), drawn when asked for from
    its own generator seeded by `sample_seed(i)` alone: every rank and layout sees the same data."""

    def __init__(self, m: ModelConfig, num_samples: int, sample_seed: Callable[[int], int]) -> None:
        self.specs = dict(m.inputs) | ({TARGET_KEY: m.target} if m.target is not None else {})
        self.num_samples, self.sample_seed = num_samples, sample_seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} is outside 0..{self.num_samples - 1}")
        g = torch.Generator().manual_seed(self.sample_seed(i))
        return {name: random_tensor(spec, (), generator=g) for name, spec in self.specs.items()}


def to_device(batch: Any, device: torch.device) -> Any:
    """A tensor or a dict batch on `device`."""
    if isinstance(batch, Mapping):
        return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    return batch.to(device, non_blocking=True)


Loss = Callable[[Any, torch.Tensor], torch.Tensor]
"""loss(model output, target) → the scalar loss of a micro-batch."""


def loss_fn(m: ModelConfig) -> Loss | None:
    """model.loss as a callable loss(output, target); None: the model's own loss."""
    if m.loss is None:
        return None
    if m.loss == "cross_entropy":
        return lambda out, t: F.cross_entropy(out.float().reshape(-1, out.shape[-1]), t.reshape(-1).long())
    if m.loss == "mse":
        return lambda out, t: F.mse_loss(out.float(), t.float())
    if isinstance(m.loss, Mapping) and "_target_" in m.loss:
        return instantiate(dict(m.loss), partial=True, key="model.loss._target_")
    raise ValueError(f"model.loss={m.loss!r} is not cross_entropy, mse or {{_target_: ...}}")


def own_loss(output: Any) -> torch.Tensor:
    """The loss a model returned itself: a scalar tensor, or an output's `.loss` / ["loss"]."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", output)
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        shape = list(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(
            f"model.loss is null, so the model must return a scalar loss (or an output with .loss); "
            f"it returned {shape}: set model.loss=cross_entropy and model.target, or return the loss"
        )
    return loss


def step_loss(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    loss: Loss | None,
    autocast: AbstractContextManager | None = None,
) -> torch.Tensor:
    """Forward of one dict micro-batch and its loss (a scalar): model(**inputs), then
    `loss` (loss_fn(model config), made once per run) against batch[TARGET_KEY], or with None
    the model's own loss."""
    inputs = {k: v for k, v in batch.items() if k != TARGET_KEY}
    with autocast or nullcontext():
        output = model(**inputs)
    return own_loss(output) if loss is None else loss(output, batch[TARGET_KEY])


def unit_modules(model: nn.Module, par: ParallelConfig) -> list[nn.Module]:
    """The FSDP units of a `_target_` model (root excluded), children before parents: each
    instance of a class in parallel.fsdp_units, or else (size policy) bottom-up every module
    whose parameters not already in a unit below it number at least parallel.fsdp_min_params.
    Containers without a forward of their own (ModuleList, ModuleDict) are never units: FSDP
    shards around a forward call."""
    units: list[nn.Module] = []
    wanted = set(par.fsdp_units)

    def visit(module: nn.Module) -> int:  # returns its parameters not yet in a unit
        loose = sum(visit(child) for child in module.children())
        loose += sum(p.numel() for p in module.parameters(recurse=False))
        if not can_be_unit(module, model):
            return loose
        if (type(module).__name__ in wanted) if wanted else loose >= par.fsdp_min_params:
            units.append(module)
            return 0
        return loose

    visit(model)
    return units


def can_be_unit(module: nn.Module, model: nn.Module) -> bool:
    """Neither the root (it holds the rest) nor a container without a forward of its own
    (ModuleList, ModuleDict): FSDP shards around a forward call."""
    return module is not model and type(module).forward is not nn.Module.forward


def unit_classes(model: nn.Module) -> list[str]:
    """The class names parallel.fsdp_units can name in `model`: those of its possible units."""
    return sorted({type(m).__name__ for m in model.modules() if can_be_unit(m, model)})


def checkpoint_modules(modules: list[nn.Module]) -> None:
    """Full activation checkpointing of each module: its forward recomputed in backward from its
    inputs. The forward is replaced on the instance (no wrapper module), so parameter names and
    FSDP's hooks, which run outside forward, stay as they were (as models.common.run_block)."""
    for module in modules:
        inner = module.forward

        def forward(*args, _inner=inner, **kwargs):
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)  # RNG kept: your dropout replays

        module.forward = forward


class ReferenceValues:
    """Full initial values of the tensors init.initial_value has no rule for, by name: from one
    build of the model on the CPU under torch.manual_seed(seed) (made on first use) in which the
    module types that have a rule stay on the meta device (init.rule_types_on_meta)."""

    def __init__(self, m: ModelConfig, seed: int) -> None:
        self.m, self.seed = m, seed
        self._values: dict[str, torch.Tensor] | None = None
        self.built = 0
        """Elements the reference build allocated on the host (the record's host_init_elements)."""

    def __call__(self, name: str) -> torch.Tensor:
        if self._values is None:
            with torch.random.fork_rng(devices=[]), torch.device("cpu"), rule_types_on_meta():
                torch.manual_seed(param_seed(self.seed, "<reference build>"))
                built = build_target(self.m)
            tensors = dict(built.named_parameters(remove_duplicate=False))
            tensors |= dict(built.named_buffers(remove_duplicate=False))
            self._values = {k: t for k, t in tensors.items() if not t.is_meta}
            self.built = sum(t.numel() for t in {id(t): t for t in self._values.values()}.values())
            HOST_BUILT.append(self.built)
        if name not in self._values:  # a known module type's tensor that its rule does not cover
            raise TypeError(f"materialise: no initialisation for {name} (its module type's constructor ran on meta)")
        return self._values[name].detach()


HOST_BUILT: list[int] = []
"""Elements each reference build of this process allocated on the host, for the record
(measure.py: `host_init_elements`, per rank): what start-up cost beside the rank's own piece."""
HOST_INIT_LIMIT = 1 << 28
"""Most elements of tensors without a rule (built whole on every rank's host) a `_target_` model may
hold: 1 GiB in fp32 per rank. A Hugging Face Llama-70B holds 1.3M (its norms and rotary table)."""


def unruled(model: nn.Module) -> dict[str, int]:
    """Elements of the tensors no rule initialises (what ReferenceValues builds), by module type name."""
    found: dict[str, int] = {}
    seen: set[int] = set()
    for owner in model.modules():
        for name, t in [*owner.named_parameters(recurse=False), *owner.named_buffers(recurse=False)]:
            if id(t) not in seen and not has_rule(owner, name):
                found[type(owner).__name__] = found.get(type(owner).__name__, 0) + t.numel()
            seen.add(id(t))
    return found


def reference_values(m: ModelConfig, seed: int) -> ReferenceValues | None:
    """What materialise falls back on for a `_target_` model; None for the built-in ones (every
    module type there has a rule)."""
    return ReferenceValues(m, seed) if is_byo(m) else None
