"""Compose recipes + command-line overrides with Hydra, into a validated LauncherConfig.

Hydra and OmegaConf report bad input as multi-line tracebacks aimed at config authors.
Here each failure becomes one ConfigError line for the user: what, the value, the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Sequence

from launcher.config.errors import ConfigError
from launcher.config.load import load_config
from launcher.config.schema import LauncherConfig
from launcher.config.store import config_key, fields_of, register
from launcher.config.validate import validate

PACKAGED_RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def recipes_dir(explicit: str | os.PathLike | None = None) -> Path:
    """--recipes flag > $LAUNCHER_RECIPES > the recipes/ folder beside the package."""
    chosen = Path(explicit or os.environ.get("LAUNCHER_RECIPES") or PACKAGED_RECIPES)
    if not (chosen / "config.yaml").is_file():
        raise ConfigError(
            f"recipes folder {str(chosen)!r} has no config.yaml; pass --recipes DIR or set LAUNCHER_RECIPES"
        )
    return chosen.resolve()


def compose_dict(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> dict[str, Any]:
    """Hydra composition → plain dict (config keys), errors translated to ConfigError."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    folder = recipes_dir(recipes)
    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except MissingMandatoryValue as exc:
        key = getattr(exc, "full_key", "?")
        raise ConfigError(f"{key} is required by the chosen recipe but unset; add {key}=<value>") from None
    except ConfigError:
        raise
    except Exception as exc:  # Hydra/OmegaConf/YAML errors: many types, one translation point
        if type(exc).__module__.split(".")[0] not in ("hydra", "omegaconf", "yaml"):
            raise
        raise ConfigError(explain(exc, overrides, folder)) from None
    finally:
        GlobalHydra.instance().clear()


def compose_config(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> LauncherConfig:
    """The one entry point: recipes + overrides → typed, validated config."""
    return validate(load_config(compose_dict(overrides, recipes)))


# --- error translation -------------------------------------------------------------------

_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def field_at(path: str) -> tuple[Any, Any] | None:
    """(field, type) of the schema field at dotted config key `path`, or None."""
    cls: Any = LauncherConfig
    found = None
    for part in re.sub(r"\[\d+\]$", "", path).split("."):
        if cls is None or not hasattr(cls, "__dataclass_fields__"):
            return None
        match = [(f, tp) for f, tp, _ in fields_of(cls) if config_key(f) == part]
        if not match:
            return None
        found = match[0]
        cls = found[1]
    return found


def keys_under(path: str) -> list[str]:
    """Config keys of the group at dotted `path` ('' for the root)."""
    cls: Any = LauncherConfig
    if path:
        hit = field_at(path)
        cls = hit[1] if hit else None
    if cls is None or not hasattr(cls, "__dataclass_fields__"):
        return []
    return sorted(config_key(f) for f, _, _ in fields_of(cls))


def _override_for(key: str, overrides: Sequence[str]) -> str | None:
    for ov in overrides:
        if re.sub(r"^[+~]{1,2}", "", ov).split("=", 1)[0] == key:
            return ov
    return None


def _example(key: str) -> str:
    hit = field_at(key)
    if hit is None:
        return f"{key}=<value>"
    f, tp = hit
    if typing_origin_is_list(tp):
        return f"{key}=[1,2]" if tp.__args__[0] is int else f"{key}=['a','b']"
    default = None if f.default is dataclasses.MISSING else f.default
    if default is None:
        default = {int: 1, float: 1.0, str: "name", bool: True}.get(tp, "<value>")
    if isinstance(default, bool):
        default = str(default).lower()
    return f"{key}={default}"


def typing_origin_is_list(tp: Any) -> bool:
    import typing

    return typing.get_origin(tp) in (list, typing.List)


def _type_words(key: str) -> str:
    hit = field_at(key)
    if hit is None:
        return "of another type"
    tp = hit[1]
    if typing_origin_is_list(tp):
        return "a list of integers" if tp.__args__[0] is int else "a list of strings"
    return _TYPE_WORDS.get(tp, f"of type {getattr(tp, '__name__', tp)}")


def explain(exc: BaseException, overrides: Sequence[str], recipes: Path) -> str:
    """One line for a Hydra/OmegaConf composition error."""
    cause = exc.__cause__
    msg = str(exc)
    name = type(exc).__name__

    if type(exc).__module__.startswith("yaml"):
        # A recipe file that is not YAML the loader accepts (syntax, duplicate key, a tag).
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)  # where it began
        where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a recipe"
        problem = getattr(exc, "problem", None) or msg.splitlines()[0]
        return f"{where}: not valid recipe YAML ({problem}); fix the file"

    if "Interpolation key" in msg and getattr(exc, "full_key", None):
        key = re.sub(r"\[\d+\]$", "", exc.full_key)  # type: ignore[attr-defined]
        return (
            f"{key}: {msg.splitlines()[0]}; a literal ${{...}} in a value must be escaped as \\${{...}}"
        )

    if name == "OverrideParseException":
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import OverrideParseException

        parser = OverridesParser.create()
        for ov in overrides:
            try:
                parser.parse_overrides([ov])
            except OverrideParseException:
                return (
                    f"cannot parse override {ov!r}; write key=value, lists as key=[a,b], "
                    "and quote values with special characters"
                )
        return f"cannot parse the overrides: {msg.splitlines()[0]}"

    missing = re.search(r"Could not find '([^/']+)/([^']+)'", msg)
    if name == "MissingConfigException" and missing:
        group, option = missing.groups()
        available = sorted(p.stem for p in (recipes / group).glob("*.yaml"))
        return (
            f"{group}={option} is not a recipe in {recipes / group}; "
            f"available: {', '.join(available) or 'none'}"
        )
    if name == "MissingConfigException":
        return msg.splitlines()[0]

    if msg.startswith("Ambiguous value for argument"):
        ov = msg.split("'")[1]
        return f"{ov!r}: comma-separated values are not a single value; write a list as key=[a,b]"

    if cause is None and name == "ConfigCompositionException" and exc.__context__ is not None:
        cause = exc.__context__  # Hydra sometimes chains the real error only as context
    if cause is not None:
        key = getattr(cause, "full_key", None) or ""
        cause_name = type(cause).__name__
        if cause_name in ("ConfigAttributeError", "ConfigKeyError") and "not in struct" in str(cause):
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            where = parent or "the top level"
            ov = _override_for(key, overrides) or key
            return f"unknown config key '{key}' (from {ov!r}); {where} has: {', '.join(keys_under(parent))}"
        if cause_name == "ValidationError":
            base = re.sub(r"\[\d+\]$", "", key)
            ov = _override_for(base, overrides)
            value = ov.split("=", 1)[1] if ov else "?"
            return f"{base}={value} must be {_type_words(base)}; e.g. {_example(base)}"
    first = msg.splitlines()[0] if msg else name
    return f"bad configuration: {first}"
