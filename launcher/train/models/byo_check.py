"""Plan-time checks of a `_target_` model, before any folder or job exists (launcher sweep): the
target imports, returns an nn.Module, and takes a batch of its declared inputs — its forward and
loss run on the meta device (nothing allocated), so a shape that does not fit is one line here,
not a failed trial on every rank. Each failure is one ConfigError line."""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from launcher.compute.flop_count import random_tensor
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ModelConfig
from launcher.train.models.byo import build_target, loss_fn, own_loss

WHERE = "put its package on PYTHONPATH (locally) or in cluster.setup/cluster.env (Slurm)"
CHECK_BATCH = 2
"""Samples in the meta batch the check runs (2, not 1: a batch dim of 1 hides squeeze mistakes)."""


def check_targets(configs: Sequence[LauncherConfig]) -> None:
    """Every distinct `_target_` model among `configs` (a sweep's combinations), checked once, and
    every `data._target_` located, found as the ranks will find them: this environment, plus the
    folders of a PYTHONPATH that cluster.env gives the ranks (locally and on Slurm)."""
    seen: list[tuple[ModelConfig, Any, list[str], int]] = []
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
                max(1, cfg.batch.micro // par.microbatches) if par.pp_split else 0,
            )
            if cfg.model._target_ is not None and key not in seen:
                seen.append(key)
                check_target(cfg.model, par.tp_plan, pp_split=par.pp_split, pp_micro=key[3])


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
    check_forward(m, model)
    for pattern in tp_plan or {}:
        check_plan_entry(m, model, pattern)
    if pp_split:
        check_split(m, model, list(pp_split), pp_micro)


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


def check_plan_entry(m: ModelConfig, model: nn.Module, pattern: str) -> None:
    """parallel.tp_plan's `pattern` names Linear or Embedding modules (parallelize_module's
    matching: each dotted part by fnmatch)."""
    parts = pattern.split(".")
    found = [
        (n, mod)
        for n, mod in model.named_modules()
        if n and len(n.split(".")) == len(parts) and all(map(fnmatch.fnmatch, n.split("."), parts))
    ]
    if not found:
        names = ", ".join(n for n, _ in list(model.named_modules())[1:9])
        raise ConfigError(
            f"parallel.tp_plan.{pattern} names no module of model._target_={m._target_!r} (its modules: "
            f"{names}, …); use their dotted names, * for any part"
        )
    odd = next(((n, mod) for n, mod in found if not isinstance(mod, (nn.Linear, nn.Embedding))), None)
    if odd is not None:
        raise ConfigError(
            f"parallel.tp_plan.{pattern}: {odd[0]} is a {type(odd[1]).__name__}; colwise and rowwise "
            "split nn.Linear and nn.Embedding modules only"
        )


def locate(target: str, key: str = "model._target_") -> None:
    """Import `target`'s module (the longest importable dotted prefix) and find the attribute;
    `key` names the setting in the error line."""
    parts = target.split(".")
    error: Exception | None = None
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            error = exc if error is None else error  # the longest path's error names the missing module
            if exc.name is not None and not ".".join(parts[:cut]).startswith(exc.name):
                break  # the module exists but imports something missing: that is the error to show
            continue
        except Exception as exc:  # the user's module raised while importing
            raise ConfigError(
                f"{key}={target!r} does not import: {type(exc).__name__}: {_first(exc)}; fix the module"
            ) from None
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                raise ConfigError(
                    f"{key}={target!r} does not import: {'.'.join(parts[:cut])} has no "
                    f"attribute {attr!r}; check the name"
                ) from None
            obj = getattr(obj, attr)
        if not callable(obj):
            raise ConfigError(
                f"{key}={target!r} is a {type(obj).__name__}, not a callable; point it at the function or class that "
                "builds it"
            )
        return
    raise ConfigError(f"{key}={target!r} does not import: {_first(error) if error else 'no module path'}; {WHERE}")


def check_forward(m: ModelConfig, model: nn.Module) -> None:
    """Forward and loss on a meta batch of the declared shapes. An op with no meta kernel (a
    data-dependent shape, `.item()`) cannot be checked this way: then the payload is the check."""
    batch = {name: random_tensor(spec, (CHECK_BATCH,), device="meta") for name, spec in m.inputs.items()}
    shapes = ", ".join(f"{name}{[CHECK_BATCH, *spec.shape]} {spec.dtype}" for name, spec in m.inputs.items())
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


def _meta_limit(exc: BaseException) -> bool:
    """An error of the meta device itself, not of the model: nothing to refuse."""
    text = str(exc).lower()
    return isinstance(exc, NotImplementedError) or "meta" in text and "shape" not in text


def _raised(m: ModelConfig, doing: str, exc: BaseException, fix: str) -> str:
    return f"model._target_={m._target_!r}: {doing} raised {type(exc).__name__}: {_first(exc)}; {fix}"


def _first(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]
