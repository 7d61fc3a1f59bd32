"""One line for an OmegaConf error about a config key: what is wrong, the value, the fix.

OmegaConf reports a bad key or value as a multi-line message aimed at config authors. Both
paths that build a LauncherConfig meet these errors (Hydra composition in compose.py, stored
documents in load.py); `describe` turns each into the line the user sees.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from launcher.config.plain import RENAMED
from launcher.config.schema import LauncherConfig

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override
    from omegaconf.errors import OmegaConfBaseException

_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


# --- the schema, by dotted config key -------------------------------------------------------------


def _unwrap_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner
    return tp


def field_at(path: str) -> tuple[dataclasses.Field, Any] | None:
    """(field, type without Optional) of the schema field at dotted config key `path`, or None."""
    cls: Any = LauncherConfig
    hit = None
    for part in re.sub(r"\[\d+\]$", "", path).split("."):
        if not dataclasses.is_dataclass(cls):
            return None
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            return None
        hit = fields[part], _unwrap_optional(typing.get_type_hints(cls)[part])
        cls = hit[1]
    return hit


def keys_under(path: str) -> list[str]:
    """Config keys of the group at dotted `path` ('' for the top level)."""
    cls: Any = LauncherConfig
    if path:
        hit = field_at(path)
        cls = hit[1] if hit else None
    return sorted(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []


def _is_list(tp: Any) -> bool:
    return typing.get_origin(tp) in (list, list)


def _is_choice(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def is_list_key(key: str) -> bool:
    """Whether the schema field at dotted config key `key` holds a list (sweep.world_sizes, cluster.env)."""
    hit = field_at(key)
    return hit is not None and _is_list(hit[1])


def type_words(key: str) -> str:
    """What a value of `key` must be, in words: 'an integer', 'one of gpt, mlp', ..."""
    hit = field_at(key)
    if hit is None:
        return "of another type"
    tp = hit[1]
    if _is_list(tp):
        return "a list of integers" if typing.get_args(tp)[0] is int else "a list of strings"
    if _is_choice(tp):
        return f"one of {', '.join(tp)}"
    return _TYPE_WORDS.get(tp, f"of type {getattr(tp, '__name__', tp)}")


def example(key: str) -> str:
    """`key=value` with a value of the right type: the first choice, else the default."""
    hit = field_at(key)
    if hit is None:
        return f"{key}=<value>"
    f, tp = hit
    if _is_list(tp):
        return f"{key}=[1,2]" if typing.get_args(tp)[0] is int else f"{key}=['a','b']"
    if _is_choice(tp):
        return f"{key}={next(iter(tp))}"
    value = None if f.default is dataclasses.MISSING else f.default
    if value is None:
        value = {int: 1, float: 1.0, str: "name", bool: True}.get(tp, "<value>")
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


# --- messages ---------------------------------------------------------------------------------


def override_for(key: str, overrides: Sequence[str]) -> str | None:
    """The command-line override that sets `key`, if any."""
    for ov in overrides:
        if re.sub(r"^[+~]{1,2}", "", ov).split("=", 1)[0] == key:
            return ov
    return None


def unknown_key(key: str, overrides: Sequence[str] = ()) -> str:
    """A key the schema does not have (or no longer has: RENAMED names its new spelling)."""
    ov = override_for(key, overrides)
    if key in RENAMED:
        new = RENAMED[key]
        if ov and "=" in ov:
            return f"{key} was renamed {new}; use {new}={ov.split('=', 1)[1]}"
        old_leaf, new_leaf = key.rsplit(".", 1)[-1], new.rsplit(".", 1)[-1]
        # From a recipe: compose.py puts the file and line first.
        return f"{key} was renamed {new}; write `{new_leaf}:` for `{old_leaf}:`"
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    source = f" (from {ov!r})" if ov and "=" in ov else ""
    return f"unknown config key '{key}'{source}; {parent or 'the top level'} has: {', '.join(keys_under(parent))}"


def bad_value(key: str, value: Any, overrides: Sequence[str] = ()) -> str:
    """A value of the wrong type or outside a choice; `value` as OmegaConf saw it."""
    base = re.sub(r"\[\d+\]$", "", key)
    hit = field_at(base)
    if hit and _is_choice(hit[1]) and isinstance(value, (str, int)) and not isinstance(value, bool):
        choice = str(value)
        return f"{base}={choice!r} is not one of {', '.join(hit[1])}; set e.g. {example(base)}"
    ov = override_for(base, overrides)
    if ov and "=" in ov:
        return f"{base}={ov.split('=', 1)[1]} must be {type_words(base)}; e.g. {example(base)}"
    if base != key:  # one element of a list, in a recipe or stored document
        return f"{base} holds {value!r}; it must be {type_words(base)}; e.g. {example(base)}"
    shown = "null" if value is None else repr(value)
    return f"{base}={shown} must be {type_words(base)}; e.g. {example(base)}"


def describe(exc: OmegaConfBaseException, overrides: Sequence[str] = ()) -> str:
    """One line for an OmegaConf error (composition or a stored document)."""
    from omegaconf.errors import (  # lazy: OmegaConf, which a cached command's config never loads (compose.py)
        ConfigAttributeError,
        ConfigKeyError,
        ConfigTypeError,
        InterpolationKeyError,
        InterpolationResolutionError,
        MissingMandatoryValue,
        ValidationError,
    )

    key = getattr(exc, "full_key", None) or ""
    base = re.sub(r"\[\d+\]$", "", key)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, MissingMandatoryValue) and key:
        return f"{key} is required by the chosen recipe but unset; add {key}=<value>"
    if isinstance(exc, InterpolationKeyError) and key:
        return f"{base}: {first}; a literal ${{...}} in a value must be escaped as \\${{...}}"
    if isinstance(exc, InterpolationResolutionError) and key:
        return f"{base}: {first}"
    if isinstance(exc, (ConfigAttributeError, ConfigKeyError)) and key and " not in " in first:
        return unknown_key(key, overrides)
    if isinstance(exc, ConfigTypeError) and key and "deletion" in first:
        return f"{key} cannot be deleted (the schema has it); set a value instead, e.g. {example(key)}"
    if isinstance(exc, (ValidationError, ConfigTypeError)) and key:  # type: a mapping for a list, ...
        return bad_value(key, getattr(exc, "value", None), overrides)
    return f"bad configuration: {first}"


def unparsable(override: str) -> str:
    """The one line for an override Hydra's grammar cannot parse, with the user's own override quoted as it
    parses, where quoting mends it: `"job.pattern='tok/s: (?P<tokens_per_s>[0-9.]+)'"` (the shell's quotes
    outside, Hydra's inside; in a list, each word that needs them)."""
    line = (
        f"cannot parse override {override!r}; write key=value, lists as key=[a,b], "
        "and quote values with special characters"
    )
    fixed = _quoted(override)
    return f"{line}, e.g. {fixed}" if fixed else line


@functools.lru_cache(maxsize=1024)
def parsed_override(override: str) -> Override:
    """One override parsed by Hydra's grammar (OverrideParseException if it does not parse). Cached: a
    sweep's overrides were parsed by Hydra's ANTLR parser once to expand them, again to check group values,
    and for the model's recipe (issue 30 item 11); the result is read, never changed."""
    # lazy: Hydra's grammar (ANTLR), which a command of plain overrides never needs (compose.py)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (parsed,) = OverridesParser.create().parse_overrides([override])
    return parsed


def _parses(override: str) -> bool:
    from hydra.errors import OverrideParseException  # lazy, as in parsed_override

    try:
        parsed_override(override)
    except OverrideParseException:
        return False
    return True


def _hydra_quoted(value: str, quote: str = "'") -> str:
    """`value` in Hydra's quotes: the quote escaped, and the backslashes before one (or at the end) doubled;
    other backslashes (a regex's `\\d`) are kept as they are by Hydra's grammar."""
    value = re.sub(rf"(\\+)(?={quote}|$)", lambda m: m.group(1) * 2, value)
    return quote + value.replace(quote, "\\" + quote) + quote


_SHELL_SPECIAL_IN_DOUBLE = '"$`\\!'
"""What a shell's double quotes do not keep as it is."""


def _quoted(override: str) -> str | None:
    """`override` with its value (or each list word that needs it) in Hydra's quotes, inside the shell's: Hydra's
    single quotes in the shell's double ones, or (where the value holds `$`, a backtick, … and no single quote)
    Hydra's double quotes in the shell's single ones. None where quoting cannot mend it (`key=[` is a typo)."""
    key, sep, value = override.partition("=")
    if not sep or not re.fullmatch(r"[+~]{0,2}[A-Za-z_][\w.]*(@[\w.]+)?", key):
        return None
    inner = "'" if not any(c in value for c in _SHELL_SPECIAL_IN_DOUBLE) else '"'
    if inner == '"' and "'" in value:
        return None
    if value[:1] in "[{":
        words = value[1:-1].split(",")
        plain = re.sub(r"\$\{[^{}]*\}", "", value[1:-1])  # a `${trial.KEY}` in a word is no nested node
        if not (value.startswith("[") and value.endswith("]")) or any(c in plain for c in "[]{}'\""):
            return None
        text = "[" + ",".join(w if _parses(f"k={w}") else _hydra_quoted(w, inner) for w in words) + "]"
    else:
        text = _hydra_quoted(value, inner)
    fixed = f"{key}={text}"
    if not _parses(fixed):
        return None
    return f'"{fixed}"' if inner == "'" else f"'{fixed}'"
