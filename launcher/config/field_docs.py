"""The doc of each config field, as launcher/config/schema.py and its parts (the modules whose
classes it imports: model_schema.py, parallel_schema.py, …) write it: the string expression
after a dataclass field (an attribute docstring), which Python keeps nowhere at run time, so the
module's source is parsed with `ast`, once. What `launcher --info GROUP` prints."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import typing
from enum import Enum
from typing import Any

from launcher.config import schema
from launcher.config.errors import ConfigError


@functools.cache
def field_docs() -> dict[str, dict[str, str]]:
    """Class name → field name → its docstring (indentation removed), for every class of schema.py
    and of the modules it takes config classes from."""
    docs: dict[str, dict[str, str]] = {}
    for node in (n for module in _schema_modules() for n in ast.parse(inspect.getsource(module)).body):
        if isinstance(node, ast.ClassDef):
            pairs = zip(node.body, node.body[1:])
            docs[node.name] = {
                field.target.id: inspect.cleandoc(doc.value.value)
                for field, doc in pairs
                if isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            }
    return docs


def _schema_modules() -> list[Any]:
    """schema.py and every module one of its dataclasses (LauncherConfig's parts) is defined in."""
    homes = {inspect.getmodule(c) for c in vars(schema).values() if isinstance(c, type) and dataclasses.is_dataclass(c)}
    return [schema, *sorted(homes - {schema}, key=lambda m: m.__name__)]


def groups() -> dict[str, type]:
    """The config groups (LauncherConfig's dataclass fields: model, parallel, …) → their class."""
    hints = typing.get_type_hints(schema.LauncherConfig)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(schema.LauncherConfig)
        if dataclasses.is_dataclass(hints[f.name])
    }


def _spelled(value: Any) -> str:
    """A default as an override writes it: null, true, fsdp, [1, 2]."""
    if isinstance(value, Enum):
        return str(value.value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(map(_spelled, value)) + "]"
    return str(value)


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return _spelled(f.default)
    return _spelled(f.default_factory()) if f.default_factory is not dataclasses.MISSING else "(required)"


def _kind(f: dataclasses.Field, hint: Any) -> str:
    """The field's type as schema.py writes it; an enum's choices after it."""
    if isinstance(hint, type) and issubclass(hint, Enum):
        return f"{f.type} ({', '.join(str(m.value) for m in hint)})"
    return str(f.type)


def top_level_keys() -> dict[str, dataclasses.Field]:
    """LauncherConfig's own scalar fields (seed, precision, …), set as `key=value` beside the groups."""
    hints = typing.get_type_hints(schema.LauncherConfig)
    return {f.name: f for f in dataclasses.fields(schema.LauncherConfig) if not dataclasses.is_dataclass(hints[f.name])}


def group_text(group: str) -> str:
    """`launcher --info GROUP`: each field of the group, its type and default, and its doc; for a top-level key
    (`--info precision`), that key's."""
    known, keys = groups(), top_level_keys()
    if group in keys:
        f, hint = keys[group], typing.get_type_hints(schema.LauncherConfig)[group]
        doc = field_docs().get("LauncherConfig", {}).get(group, "(no doc)")
        lines = [
            f"{group} (a top-level key of LauncherConfig, set as {group}=value): its type = default, then what it does"
        ]
        lines.append(f"  {group}: {_kind(f, hint)} = {_default(f)}")
        return "\n".join([*lines, *(f"      {line}" for line in doc.splitlines())]) + "\n"
    if group not in known:
        raise ConfigError(
            f"--info {group!r} is no config group or top-level key; the groups are {', '.join(known)}, "
            f"the top-level keys {', '.join(keys)}"
        )
    cls = known[group]
    hints, docs = typing.get_type_hints(cls), field_docs().get(cls.__name__, {})
    lines = [f"{group} ({cls.__name__}): each field as `{group}.<field>: type = default`, then what it does"]
    for f in dataclasses.fields(cls):
        lines.append(f"  {group}.{f.name}: {_kind(f, hints[f.name])} = {_default(f)}")
        lines += [f"      {line}" for line in docs.get(f.name, "(no doc)").splitlines()]
    return "\n".join(lines) + "\n"
