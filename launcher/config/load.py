"""Composed config (plain dict) → typed dataclasses, and back."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping

from launcher.config.schema import LauncherConfig
from launcher.config.store import config_key, fields_of


def from_dict(cls: type, data: Mapping[str, Any], prefix: str = "") -> Any:
    """Build dataclass `cls` from a mapping keyed by config keys; unknown keys are errors."""
    from launcher.config.errors import ConfigError

    known = {config_key(f) for f, _, _ in fields_of(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        where = prefix.rstrip(".") or "the top level"
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}'; {where} has: {', '.join(sorted(known))}"
        )
    kwargs = {}
    for f, tp, optional in fields_of(cls):
        key = config_key(f)
        if key not in data:
            continue
        value = data[key]
        if value is None and optional:
            pass
        elif dataclasses.is_dataclass(tp):
            value = from_dict(tp, value, prefix=f"{prefix}{key}.")
        elif typing.get_origin(tp) in (list, typing.List):
            value = _as_list(f"{prefix}{key}", value, typing.get_args(tp)[0])
        kwargs[f.name] = value
    return cls(**kwargs)


def _as_list(key: str, value: Any, elem: type) -> list[Any]:
    """A list of `elem`; a bare value (`sweep.world_sizes=4`) means a one-element list."""
    from launcher.config.errors import ConfigError

    items = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, elem) and not isinstance(v, bool) for v in items):
        what = {int: "integers", str: "strings"}.get(elem, elem.__name__)
        example = "[1,2]" if elem is int else "['a','b']"
        raise ConfigError(f"{key}={value!r} must be a list of {what}; e.g. {key}={example}")
    return list(items)


def to_dict(obj: Any) -> dict[str, Any]:
    """Dataclass → mapping keyed by config keys (inverse of from_dict)."""
    out: dict[str, Any] = {}
    for f, _, _ in fields_of(type(obj)):
        value = getattr(obj, f.name)
        out[config_key(f)] = to_dict(value) if dataclasses.is_dataclass(value) else value
    return out


def load_config(data: Mapping[str, Any]) -> LauncherConfig:
    return from_dict(LauncherConfig, data)
