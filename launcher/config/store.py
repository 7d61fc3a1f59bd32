"""Derive the Hydra schema from the dataclasses in schema.py and register it in ConfigStore.

OmegaConf's own `structured()` cannot express a key that is a Python keyword (`batch.global`),
so the schema is built node by node from the dataclass fields. The result behaves like a
structured config: struct mode rejects unknown keys, typed nodes reject wrong types.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterator

from omegaconf import (
    BooleanNode,
    DictConfig,
    FloatNode,
    IntegerNode,
    ListConfig,
    OmegaConf,
    StringNode,
)

from launcher.config.schema import LauncherConfig

SCHEMA_NAME = "launcher_schema"

_SCALAR_NODES = {int: IntegerNode, float: FloatNode, bool: BooleanNode, str: StringNode}


def config_key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return tp, False


def fields_of(cls: type) -> Iterator[tuple[dataclasses.Field, Any, bool]]:
    """Yield (field, type, optional) for a dataclass, with string annotations resolved."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap_optional(hints[f.name])
        yield f, tp, optional


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def schema_node(cls: type) -> DictConfig:
    """A struct-mode DictConfig with one typed node per dataclass field."""
    content: dict[str, Any] = {}
    for f, tp, optional in fields_of(cls):
        if dataclasses.is_dataclass(tp):
            content[config_key(f)] = schema_node(tp)
        elif typing.get_origin(tp) in (list, typing.List):
            (elem,) = typing.get_args(tp)
            content[config_key(f)] = ListConfig(_default(f), element_type=elem, is_optional=optional)
        else:
            content[config_key(f)] = _SCALAR_NODES[tp](_default(f), is_optional=optional)
    node = OmegaConf.create(content)
    OmegaConf.set_struct(node, True)
    return node


def register() -> None:
    """Register the root schema; recipes/config.yaml lists it first in its defaults."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=schema_node(LauncherConfig))
