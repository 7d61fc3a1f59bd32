"""Compose recipes + command-line overrides with Hydra, into a validated LauncherConfig.

The schema is `OmegaConf.structured(LauncherConfig)` (load.schema), registered in Hydra's
ConfigStore; recipes/config.yaml lists it first in its defaults, so every recipe and override
is merged onto typed, closed nodes. Hydra and OmegaConf report bad input as multi-line
tracebacks aimed at config authors; here each failure becomes one ConfigError line for the
user: what, the value, the fix (messages.py words the OmegaConf ones).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from launcher.config.errors import ConfigError
from launcher.config.load import load_config, schema
from launcher.config.messages import describe
from launcher.config.schema import LauncherConfig
from launcher.config.validate import validate

PACKAGED_RECIPES = Path(__file__).resolve().parents[2] / "recipes"
SCHEMA_NAME = "launcher_schema"  # recipes/config.yaml names it first in its defaults


def register() -> None:
    """Register the schema in Hydra's ConfigStore (idempotent)."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=schema())


def recipes_dir(explicit: str | os.PathLike | None = None) -> Path:
    """--recipes flag > $LAUNCHER_RECIPES > the recipes/ folder beside the package."""
    chosen = Path(explicit or os.environ.get("LAUNCHER_RECIPES") or PACKAGED_RECIPES)
    if not (chosen / "config.yaml").is_file():
        raise ConfigError(
            f"recipes folder {str(chosen)!r} has no config.yaml; pass --recipes DIR or set LAUNCHER_RECIPES"
        )
    return chosen.resolve()


@contextlib.contextmanager
def hydra_session(folder: Path, overrides: Sequence[str] = ()) -> Iterator[Any]:
    """Hydra initialised on a recipes folder (yields its config loader); any Hydra, OmegaConf or
    YAML error inside becomes one ConfigError line. Hydra's global state is cleared on exit."""
    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
            yield GlobalHydra.instance().config_loader()
    except ConfigError:
        raise
    except Exception as exc:  # Hydra/OmegaConf/YAML errors: many types, one translation point
        if type(exc).__module__.split(".")[0] not in ("hydra", "omegaconf", "yaml"):
            raise
        raise ConfigError(explain(exc, overrides, folder)) from None
    finally:
        GlobalHydra.instance().clear()


def compose_dict(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> dict[str, Any]:
    """Hydra composition → resolved plain dict (config keys; choices as strings)."""
    folder = recipes_dir(recipes)
    with hydra_session(folder, overrides):
        cfg = compose(config_name="config", overrides=list(overrides))
        # Hydra's `+key=value` adds a key past the schema; merged as plain data, the schema refuses it.
        checked = OmegaConf.merge(schema(), OmegaConf.to_container(cfg))
        data = OmegaConf.to_container(checked, resolve=True, throw_on_missing=True, enum_to_str=True)
    return data  # type: ignore[return-value]


def compose_config(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> LauncherConfig:
    """The one entry point: recipes + overrides → typed, validated config."""
    return validate(load_config(compose_dict(overrides, recipes)))


# --- error translation -------------------------------------------------------------------


def explain(exc: BaseException, overrides: Sequence[str], recipes: Path) -> str:
    """One line for a Hydra/OmegaConf/YAML composition error."""
    msg = str(exc)
    if type(exc).__module__.startswith("yaml"):
        return _bad_yaml(exc)
    if isinstance(exc, OmegaConfBaseException):  # raised outside Hydra (resolving, MISSING)
        return describe(exc, overrides)
    if isinstance(exc, OverrideParseException):
        return _unparsable(overrides, msg)
    if isinstance(exc, MissingConfigException):
        return _missing_recipe(msg, recipes)
    if msg.startswith("Ambiguous value for argument"):
        ov = msg.split("'")[1]
        return f"{ov!r}: comma-separated values are not a single value; write a list as key=[a,b]"
    cause = exc.__cause__
    if cause is None and isinstance(exc, ConfigCompositionException):
        cause = exc.__context__  # Hydra sometimes chains the real error only as context
    if isinstance(cause, OmegaConfBaseException):
        recipe = re.match(r"In '([^']+)'", msg)
        return describe(cause, overrides, recipe=recipe.group(1) if recipe else None)
    first = msg.splitlines()[0] if msg else type(exc).__name__
    return f"bad configuration: {first}"


def _bad_yaml(exc: BaseException) -> str:
    """A recipe file that is not YAML the loader accepts (syntax, duplicate key, a tag)."""
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)  # where it began
    where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a recipe"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: not valid recipe YAML ({problem}); fix the file"


def _unparsable(overrides: Sequence[str], msg: str) -> str:
    """Name the first override Hydra's grammar cannot parse."""
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


def _missing_recipe(msg: str, recipes: Path) -> str:
    """`group=option` naming no recipe file: list the group's options."""
    missing = re.search(r"Could not find '([^/']+)/([^']+)'", msg)
    if not missing:
        return msg.splitlines()[0]
    group, option = missing.groups()
    available = sorted(p.stem for p in (recipes / group).glob("*.yaml"))
    return f"{group}={option} is not a recipe in {recipes / group}; available: {', '.join(available) or 'none'}"

