"""Plan-time checks of a `_target_` model, before any folder or job exists (launcher sweep): the
target imports, returns an nn.Module, and takes a batch of its declared inputs — its forward and
loss run on the meta device (nothing allocated), so a shape that does not fit is one line here,
not a failed trial on every rank. Each failure is one ConfigError line."""

from __future__ import annotations

import contextlib
import fnmatch
import inspect
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from launcher.compute.flop_count import random_tensor
from launcher.config.derived import derives_microbatches
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.train.models.byo import (
    HOST_INIT_LIMIT,
    build_target,
    can_be_unit,
    is_integer,
    loss_fn,
    own_loss,
    unit_classes,
    unruled,
)
from launcher.train.models.target import first_line as _first
from launcher.train.models.target import locate

CHECK_BATCH = 2
"""Samples in the meta batch the check runs (2, not 1: a batch dim of 1 hides squeeze mistakes)."""


def check_targets(configs: Sequence[LauncherConfig]) -> None:
    """Every distinct `_target_` model among `configs` (a sweep's combinations), checked once, and
    every `data._target_` located, found as the ranks will find them: this environment, plus the
    folders of a PYTHONPATH that cluster.env gives the ranks (locally and on Slurm)."""
    seen: list[tuple[ModelConfig, Any, list[str], int, list[str]]] = []
    for cfg in configs:
        with ranks_path(cfg.cluster.env):
            if cfg.data.kind == "dataset" and cfg.data._target_:
                locate(
                    cfg.data._target_, "data._target_"
                )  # the dataset is built in the payload: its import is checked here
            par = cfg.parallel
            key = (
                cfg.model,
                par.tp_plan,
                list(par.pp_split),
                pipeline_micro(cfg) if par.pp_split else 0,
                list(par.fsdp_units),
            )
            if cfg.model._target_ is not None and key not in seen:
                seen.append(key)
                check_target(cfg.model, par.tp_plan, pp_split=par.pp_split, pp_micro=key[3], fsdp_units=par.fsdp_units)


@contextlib.contextmanager
def ranks_path(env: Sequence[str]) -> Iterator[None]:
    """sys.path with cluster.env's PYTHONPATH folders first (a `${...}` part expands only in the
    job, so it is left out), as it was again afterwards."""
    folders = [
        f
        for item in env
        if item.startswith("PYTHONPATH=")
        for f in item.split("=", 1)[1].split(os.pathsep)
        if f and "${" not in f
    ]
    before = list(sys.path)
    sys.path[:0] = folders
    try:
        yield
    finally:
        sys.path[:] = before


def check_target(
    m: ModelConfig,
    tp_plan: Mapping[str, str] | None = None,
    *,
    pp_split: Sequence[str] = (),
    pp_micro: int = CHECK_BATCH,
    fsdp_units: Sequence[str] = (),
) -> None:
    """`pp_split` is traced with a meta microbatch of `pp_micro` samples (the pipeline's)."""
    locate(str(m._target_))
    with torch.device("meta"):
        try:
            model = build_target(m)
        except TypeError as exc:
            if "not a torch.nn.Module" in str(exc):
                raise ConfigError(f"{exc}; point model._target_ at a callable that builds the model") from None
            raise ConfigError(
                _raised(m, "building it", exc, f"check its keyword arguments (model.kwargs={m.kwargs})")
            ) from None
        except Exception as exc:  # the user's code: any exception, one line
            raise ConfigError(
                _raised(m, "building it", exc, f"check its keyword arguments (model.kwargs={m.kwargs})")
            ) from None
    check_input_names(m, model)
    check_host_init(m, model)
    check_vocabulary(m)
    check_forward(m, model)
    check_units(m, model, fsdp_units)
    check_plan(m, model, dict(tp_plan or {}))
    if pp_split:
        check_split(m, model, list(pp_split), pp_micro)


def check_host_init(m: ModelConfig, model: nn.Module) -> None:
    """The tensors of module types without an initialisation rule are built whole on every rank's
    host (byo.ReferenceValues): refused where they would be a model's worth, not a few norms."""
    found = unruled(model)
    total = sum(found.values())
    if total <= HOST_INIT_LIMIT:
        return
    types = ", ".join(f"{name} {n:.2g}" for name, n in sorted(found.items(), key=lambda kv: -kv[1]))
    raise ConfigError(
        f"model._target_={m._target_!r} holds {total:.3g} elements in module types the launcher has no "
        f"initialisation rule for ({types}); every rank would build them whole on the host "
        f"({total * 4 / 1e9:.3g} GB in fp32) instead of its shard: build those layers from torch.nn.Linear, "
        f"Embedding, Conv, LayerNorm or RMSNorm (initialised on each rank's shard), or keep such tensors under "
        f"{HOST_INIT_LIMIT:.3g} elements"
    )


def check_split(m: ModelConfig, model: nn.Module, split: list[str], micro: int) -> None:
    """parallel.pp_split names modules of the model, and torch's tracer cuts its forward there
    into len + 1 stages that pass activations between neighbours (byo_pipeline.trace_stages)."""
    names = {n for n, _ in model.named_modules()}
    for name in split:
        if name in names:
            continue
        parent = name.rpartition(".")[0]
        while parent not in names:  # the nearest module above the name ("" is the model's own)
            parent = parent.rpartition(".")[0]
        kids = [f"{parent}.{k}" if parent else k for k, _ in model.get_submodule(parent).named_children()]
        raise ConfigError(
            f"parallel.pp_split names {name!r}, no module of model._target_={m._target_!r}; "
            f"{parent or 'the model'} holds {', '.join(kids[:8])}{', …' if len(kids) > 8 else ''}: "
            "name the module where a stage begins"
        )
    # Lazy: torch's pipelining (and the engines package) only where a split is asked for.
    from launcher.train.engines.byo_pipeline import trace_stages

    try:
        trace_stages(model, m, split, micro)
    except ValueError as exc:
        raise ConfigError(f"model._target_={m._target_!r}: {_first(exc)}") from None
    except Exception as exc:  # torch.export on the user's forward: any exception, one line
        raise ConfigError(
            _raised(
                m,
                f"tracing it for parallel.pp_split={split}",
                exc,
                "torch.export must trace the forward for a pipeline split; or use parallel=ddp or parallel=fsdp",
            )
        ) from None


def check_units(m: ModelConfig, model: nn.Module, names: Sequence[str]) -> None:
    """parallel.fsdp_units names classes of modules the model holds (else FSDP wraps nothing by
    that name: the model runs as one unit, gathered whole, without a word)."""
    have = unit_classes(model)
    wrong = [n for n in names if n not in have]
    if wrong:
        compound = [type(c).__name__ for c in model.modules() if can_be_unit(c, model) and next(c.children(), None)]
        best = max(dict.fromkeys(compound), key=compound.count) if compound else have[0] if have else "Block"
        raise ConfigError(
            f"parallel.fsdp_units names {wrong[0]!r}, no class of a module inside model._target_={m._target_!r}, "
            f"so FSDP would wrap nothing by it; its classes: {', '.join(have)}; e.g. parallel.fsdp_units=[{best}]"
        )


def check_plan(m: ModelConfig, model: nn.Module, plan: Mapping[str, str]) -> None:
    """parallel.tp_plan's patterns name Linear or Embedding modules (parallelize_module's matching:
    the whole dotted name, each part by fnmatch). A pattern that names none is answered with the
    plan that would: `fc1` → `blocks.*.fc1`, the model's own names."""
    found = {pattern: _matching(model, pattern) for pattern in plan}
    lost = [pattern for pattern, hits in found.items() if not hits]
    if lost:
        fixed = {k: style for p, style in plan.items() for k in ([p] if found[p] else _plan_names(model, p))}
        guess = all(_plan_names(model, pattern) for pattern in lost)
        hint = (
            "e.g. parallel.tp_plan={" + ", ".join(f"{k}: {v}" for k, v in fixed.items()) + "}"
            if guess
            else f"its Linear and Embedding modules: {', '.join(_plan_names(model, '*')[:8])}"
        )
        raise ConfigError(
            f"parallel.tp_plan.{lost[0]} names no module of model._target_={m._target_!r}: a pattern is the whole "
            f"dotted name, * for any part; {hint}"
        )
    odd = next(((p, n, mod) for p, hits in found.items() for n, mod in hits if not isinstance(mod, _SPLITTABLE)), None)
    if odd is not None:
        raise ConfigError(
            f"parallel.tp_plan.{odd[0]}: {odd[1]} is a {type(odd[2]).__name__}; colwise and rowwise "
            "split nn.Linear and nn.Embedding modules only"
        )


_SPLITTABLE = (nn.Linear, nn.Embedding)


def _matching(model: nn.Module, pattern: str) -> list[tuple[str, nn.Module]]:
    parts = pattern.split(".")
    return [
        (n, mod)
        for n, mod in model.named_modules()
        if n and len(n.split(".")) == len(parts) and all(map(fnmatch.fnmatch, n.split("."), parts))
    ]


def _plan_names(model: nn.Module, pattern: str) -> list[str]:
    """Patterns of the Linear and Embedding modules whose last name part matches `pattern`'s,
    each index part as * (`blocks.*.fc1`), in the model's order."""
    last = pattern.split(".")[-1]
    names = [n for n, mod in model.named_modules() if n and isinstance(mod, _SPLITTABLE)]
    general = [
        ".".join("*" if p.isdigit() else p for p in n.split("."))
        for n in names
        if fnmatch.fnmatch(n.split(".")[-1], last)
    ]
    return list(dict.fromkeys(general))


def check_input_names(m: ModelConfig, model: nn.Module) -> None:
    """model.inputs reach the forward as keyword arguments: each name must be one of its
    parameters (unless it takes **kwargs), and each parameter without a default must be given."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # a forward Python cannot introspect (a C extension): the forward is the check
        return
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    where = f"{type(model).__name__}.forward({', '.join(named) or '*args'})"
    unknown = [] if takes_any else [n for n in m.inputs if n not in named]
    if unknown:
        raise ConfigError(
            f"model.inputs.{unknown[0]}: {where} has no parameter named {unknown[0]!r}; name each input after a "
            f"forward parameter: {', '.join(named) or 'none can be given by name'}"
        )
    needed = [p.name for p in params if p.name in named and p.default is p.empty and p.name not in m.inputs]
    if needed:
        raise ConfigError(
            f"{where} needs {needed[0]!r}, which model.inputs does not give (it gives {', '.join(m.inputs)}); "
            f"name each input after a forward parameter: {', '.join(named)}"
        )


def check_forward(m: ModelConfig, model: nn.Module) -> None:
    """Forward and loss on a meta batch of the declared shapes. An op with no meta kernel (a
    data-dependent shape, `.item()`) cannot be checked this way: then the payload is the check."""
    batch = {name: random_tensor(spec, (CHECK_BATCH,), device="meta") for name, spec in m.inputs.items()}
    shapes = ", ".join(f"{name}{[CHECK_BATCH, *spec.shape]} {spec.dtype}" for name, spec in m.inputs.items())
    with embedding_lookups(model) as embedded:
        try:
            output = model(**batch)
        except (NotImplementedError, RuntimeError) as exc:
            if _meta_limit(exc):
                return
            raise ConfigError(
                _raised(m, f"a forward on model.inputs ({shapes})", exc, "fix the inputs' shapes or dtypes")
            ) from None
        except Exception as exc:  # the user's forward: any exception, one line
            raise ConfigError(
                _raised(m, f"a forward on model.inputs ({shapes})", exc, "fix the inputs' shapes or dtypes")
            ) from None
    check_embedded(m, batch, embedded)
    fn = loss_fn(m)
    if fn is None:
        try:
            own_loss(output)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return
    target = random_tensor(m.target, (CHECK_BATCH,), device="meta")  # type: ignore[arg-type]
    try:
        loss = fn(output, target)
    except Exception as exc:  # the loss's own code: any exception, one line
        if _meta_limit(exc):
            return
        out = list(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ConfigError(
            _raised(
                m,
                f"model.loss={m.loss} on output {out} and model.target {[CHECK_BATCH, *m.target.shape]}",
                exc,
                "fix model.target or model.loss",
            )
        ) from None  # type: ignore[union-attr]
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        raise ConfigError(
            f"model.loss={m.loss} returned {getattr(loss, 'shape', type(loss).__name__)}, not a scalar; "
            "make it reduce to one number (a mean)"
        )


def check_vocabulary(m: ModelConfig) -> None:
    """The token ids (the first integer input, as tokens_per_sample counts them) stay below the
    recipe's vocab_size, a keyword argument of the callable: an id past the embedding's rows is
    a device-side assert on a GPU, at the first step of every trial."""
    vocab = m.kwargs.get("vocab_size")
    ids = next(((n, s) for n, s in m.inputs.items() if is_integer(s)), None)
    if isinstance(vocab, int) and ids is not None and ids[1].high is not None and ids[1].high > vocab:
        raise ConfigError(
            f"model.inputs.{ids[0]}.high={ids[1].high} is above model.vocab_size={vocab}: ids up to "
            f"{ids[1].high - 1} would index past the vocabulary; set model.inputs.{ids[0]}.high={vocab}"
        )


@contextlib.contextmanager
def embedding_lookups(model: nn.Module) -> Iterator[list[tuple[str, int, Any]]]:
    """(module name, rows, the tensor looked up) of each nn.Embedding call made inside the block."""
    seen: list[tuple[str, int, Any]] = []
    hooks = [
        mod.register_forward_pre_hook(
            lambda mod, args, name=name: seen.append((name, mod.num_embeddings, args[0] if args else None))
        )
        for name, mod in model.named_modules()
        if isinstance(mod, nn.Embedding)
    ]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def check_embedded(m: ModelConfig, batch: Mapping[str, torch.Tensor], embedded: list[tuple[str, int, Any]]) -> None:
    """An input the forward hands to an nn.Embedding as it is: its `high` within the table's rows."""
    for name, tensor in batch.items():
        spec = m.inputs[name]
        for module, rows, looked_up in embedded:
            fed = looked_up is tensor or getattr(looked_up, "_base", None) is tensor  # itself, or a view of it
            if fed and spec.high is not None and spec.high > rows:
                raise ConfigError(
                    f"model.inputs.{name}.high={spec.high} is above the {rows} rows of {module} (nn.Embedding) "
                    f"of model._target_={m._target_!r}: ids up to {spec.high - 1} would index past it; set "
                    f"model.inputs.{name}.high={rows}"
                )


def _meta_limit(exc: BaseException) -> bool:
    """An error of the meta device itself, not of the model: nothing to refuse."""
    text = str(exc).lower()
    return isinstance(exc, NotImplementedError) or "meta" in text and "shape" not in text


def _raised(m: ModelConfig, doing: str, exc: BaseException, fix: str) -> str:
    return f"model._target_={m._target_!r}: {doing} raised {type(exc).__name__}: {_first(exc)}; {fix}"


def pipeline_micro(cfg: LauncherConfig) -> int:
    """Samples in one pipeline micro-batch: batch.micro where a fixed global batch derives the
    micro-batches (config/derived.py), else batch.micro split into parallel.microbatches."""
    return cfg.batch.micro if derives_microbatches(cfg) else max(1, cfg.batch.micro // cfg.parallel.microbatches)
