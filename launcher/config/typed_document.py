"""A complete config document (every schema key, values of their types: what the composition cache
keeps, composed_cache.py) → LauncherConfig, without OmegaConf's structured schema, whose build and
merges were a fifth of a repeated 256-trial submission (issue 30 item 11).

Strict: a value is taken only where OmegaConf would take it unchanged (an int for an int, a str for a
str; the one widening, an int for a float, and a choice's text for its StrEnum, are OmegaConf's own).
Anything else raises Unfit, and compose.py hands the command to Hydra's road, whose error the user
sees: a value `1` for a str field is not converted here, but composed there.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Sequence
from typing import Any


class Unfit(Exception):
    """The document or a value is outside what this module converts (compose.py: Hydra's road then)."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def typed(cls: type, data: Any) -> Any:
    """`data` (a mapping holding every field of dataclass `cls`) → a `cls`, nested dataclasses too."""
    if not isinstance(data, dict):
        raise Unfit(f"{cls.__name__}: not a mapping")
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if set(data) != {f.name for f in fields}:
        raise Unfit(f"{cls.__name__}: keys differ from the schema's")
    kwargs = {f.name: coerce(_hints(cls)[f.name], data[f.name]) for f in fields}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a __post_init__ check: Hydra's road words it
        raise Unfit(str(exc)) from None


def coerce(tp: Any, value: Any) -> Any:
    """`value` as a field typed `tp` holds it, where OmegaConf takes it unchanged; else Unfit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if value is None and len(rest) < len(args):
            return None
        if len(rest) != 1:
            raise Unfit(f"{tp}: a union")
        return coerce(rest[0], value)
    if origin in (list, Sequence) or tp is list:
        if not isinstance(value, list):
            raise Unfit(f"{value!r} is not a list")
        return [coerce(args[0], v) for v in value] if args else list(value)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise Unfit(f"{value!r} is not a mapping")
        return {k: coerce(args[1], v) for k, v in value.items()} if args else dict(value)
    if dataclasses.is_dataclass(tp):
        return typed(tp, value)  # type: ignore[arg-type]
    return _scalar(tp, value)


def _scalar(tp: Any, value: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, str) and value in tp.__members__:
            return tp[value]
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp in (int, str) and type(value) is tp:
        return value
    raise Unfit(f"{value!r} for a {tp}")
