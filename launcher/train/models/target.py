"""A recipe's `_target_` (your model, dataset or loss) found and called, with the standard library.

Hydra's `instantiate` as far as recipes use it: `_target_` (a dotted path to a callable), its
keyword arguments beside it, `_args_`, `_partial_` and `_recursive_` (nested `_target_` mappings
are built first). The payload calls it on compute nodes, often inside the site's container
image, where Hydra is not installed; the control plane's checks call the same code, so what a
plan accepted is what a node builds.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from launcher.config.errors import ConfigError

WHERE = "put its package on PYTHONPATH (locally) or in cluster.setup/cluster.env (Slurm)"
_RESERVED = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")


def instantiate(node: Any, *, partial: bool = False, key: str = "_target_") -> Any:
    """`node` with every `_target_` mapping in it called (or made a functools.partial where
    `_partial_` or `partial` says); lists and plain mappings are walked, other values kept."""
    if isinstance(node, (list, tuple)):
        return [instantiate(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    if "_target_" not in node:
        return {k: instantiate(v) for k, v in node.items()}
    target = locate(str(node["_target_"]), key)
    args = list(node.get("_args_", []))
    kwargs = {k: v for k, v in node.items() if k not in _RESERVED}
    if node.get("_recursive_", True):
        args, kwargs = [instantiate(a) for a in args], {k: instantiate(v) for k, v in kwargs.items()}
    if node.get("_partial_", partial):
        return functools.partial(target, *args, **kwargs)
    return target(*args, **kwargs)


def locate(target: str, key: str = "model._target_") -> Callable[..., Any]:
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
                f"{key}={target!r} does not import: {type(exc).__name__}: {first_line(exc)}; fix the module"
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
        return obj
    raise ConfigError(f"{key}={target!r} does not import: {first_line(error) if error else 'no module path'}; {WHERE}")


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]
