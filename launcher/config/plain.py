"""Typed config ↔ plain JSON document, with the standard library only.

The job side (the payload, the link probe, a command's record step) reads its trial from
trial.json on a compute node, often inside the site's container image, where neither Hydra nor
OmegaConf is installed. The control plane checked and resolved the document before writing it
(load.py, with OmegaConf's key, type and choice checks); here it is only rebuilt, by the schema's
type hints. A key the schema does not know or a value of the wrong kind is still one line
(ConfigError), never a half-built config.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from launcher.config.errors import ConfigError
from launcher.config.schema import InputDtype, InputSpec, LauncherConfig

# Config keys that were renamed: old dotted key → new one. Stored documents are upgraded on
# load; on the command line and in recipes the old key is refused, naming the new one (messages.py).
RENAMED = {"batch.global": "batch.global_batch"}


def to_dict(cfg: Any) -> Any:
    """Typed config → plain dict (choices as their names): what trial.json and sweep.json store."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, enum.Enum):
        return cfg.name
    if isinstance(cfg, Mapping):
        return {k: to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    return cfg


def from_dict(data: Mapping[str, Any]) -> LauncherConfig:
    """A stored document (what to_dict wrote, or an older one: RENAMED) → typed config."""
    cfg = _build(LauncherConfig, upgraded(data), "")
    return with_input_specs(cfg)


def upgraded(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A document written before a key was renamed (RENAMED), with the key's new name."""
    out = dict(data)
    for old, new in RENAMED.items():
        group, old_leaf = old.rsplit(".", 1)
        new_leaf = new.rsplit(".", 1)[1]
        section = out.get(group)
        if isinstance(section, Mapping) and old_leaf in section and new_leaf not in section:
            out[group] = {new_leaf if k == old_leaf else k: v for k, v in section.items()}
    return out


def current_spelling(override: str) -> str:
    """A stored override (a sweep's sweep.json) with a key renamed since (RENAMED) respelled: a sweep
    measured before the rename still plans and runs from its folder."""
    key, sep, value = override.partition("=")
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    new = RENAMED.get(key.lstrip("+~"))
    return f"{prefix}{new}{sep}{value}" if new else override


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'the document'}={data!r} must be a mapping of its keys")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}' in a stored trial; this launcher knows "
            f"{', '.join(sorted(fields))} there (was the document written by another version?)"
        )
    hints = _hints(cls)
    return cls(**{name: _value(hints[name], value, prefix + name) for name, value in data.items()})


def _value(tp: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, value, key)
    if dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else _build(tp, value, key + ".")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _choice(tp, value, key)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}={value!r} must be a list")
        return [_value(args[0], v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}={value!r} must be a mapping")
        return {k: _value(args[1], v, f"{key}.{k}") for k, v in value.items()}
    return _scalar(tp, value, key)


def _choice(tp: type[enum.Enum], value: Any, key: str) -> enum.Enum:
    if isinstance(value, tp):
        return value
    if isinstance(value, str) and value in tp.__members__:
        return tp[value]
    raise ConfigError(f"{key}={value!r} is not one of {', '.join(tp.__members__)}")


_KINDS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}


def _scalar(tp: Any, value: Any, key: str) -> Any:
    kinds = _KINDS.get(tp)
    if kinds is None:
        return value
    if isinstance(value, kinds) and (tp is bool or not isinstance(value, bool)):
        return float(value) if tp is float else value
    raise ConfigError(f"{key}={value!r} must be {tp.__name__}")


_SPEC_KEYS = [f.name for f in dataclasses.fields(InputSpec)]
_SPEC_EXAMPLE = "{shape:[1024],dtype:int64,high:32000}"


def with_input_specs(cfg: LauncherConfig) -> LauncherConfig:
    """model.inputs and model.target as InputSpecs (the schema types them Any: see InputSpec)."""
    m = cfg.model
    if not m.inputs and m.target is None:
        return cfg
    inputs = {name: input_spec(f"model.inputs.{name}", v) for name, v in m.inputs.items()}
    target = None if m.target is None else input_spec("model.target", m.target)
    return dataclasses.replace(cfg, model=dataclasses.replace(m, inputs=inputs, target=target))


def input_spec(key: str, value: Any) -> InputSpec:
    """One input's {shape, dtype, high, low} → InputSpec; ConfigError (one line) for anything else."""
    if isinstance(value, InputSpec):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}={value!r} must be a mapping of {', '.join(_SPEC_KEYS)}; e.g. {key}={_SPEC_EXAMPLE}")
    unknown = sorted(set(value) - set(_SPEC_KEYS))
    if unknown:
        raise ConfigError(f"unknown config key '{key}.{unknown[0]}'; {key} has: {', '.join(sorted(_SPEC_KEYS))}")
    shape = value.get("shape", [])
    if not (isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape)):
        raise ConfigError(
            f"{key}.shape={shape!r} must be a list of integers (one sample's shape); e.g. {key}.shape=[1024]"
        )
    dtype = str(value.get("dtype", "float32"))
    if dtype not in InputDtype.__members__:
        raise ConfigError(
            f"{key}.dtype={dtype!r} is not one of {', '.join(InputDtype.__members__)}; set e.g. {key}.dtype=int64"
        )
    bounds = {k: value[k] for k in ("high", "low") if value.get(k) is not None}
    for k, v in bounds.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise ConfigError(f"{key}.{k}={v!r} must be an integer; e.g. {key}.{k}=1000")
    return InputSpec(shape=list(shape), dtype=InputDtype[dtype], **bounds)
