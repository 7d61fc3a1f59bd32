"""Hydra's side of composing: its session on the recipe folders, the composition itself, and the one
line each Hydra, OmegaConf or YAML error becomes. compose.py calls in here only where the composition
cache cannot serve (composed_cache.py), so a cached command never imports Hydra.

The schema is `OmegaConf.structured(LauncherConfig)` (load.schema), registered in Hydra's
ConfigStore; recipes/config.yaml lists it first in its defaults, so every recipe and override
is merged onto typed, closed nodes. Hydra and OmegaConf report bad input as multi-line
tracebacks aimed at config authors; here each failure becomes one ConfigError line for the
user: what, the value, the fix (messages.py words the OmegaConf ones). One node is open while
Hydra composes: `model` holds what the recipe and overrides set (`model.key=value` adds or sets),
so that a `_target_` model's keys become its callable's keyword arguments (load.fold_model_kwargs)
and a built-in model's are then checked against the closed schema.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from launcher.config.composed_document import finished
from launcher.config.errors import ConfigError
from launcher.config.load import onto_schema, schema
from launcher.config.messages import describe, override_for, parsed_override, unparsable
from launcher.config.recipe_folders import PACKAGED_RECIPES, SCHEMA_NAME
from launcher.config.schema import ModelConfig


class BundledRecipes(SearchPathPlugin):
    """Hydra search-path plugin: the bundled recipes after the primary config dir (Hydra takes the
    first folder holding a config, so the user's files win over bundled ones of the same name)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        url = f"file://{PACKAGED_RECIPES}"
        if all(element.path != url for element in search_path.get_path()):
            search_path.append(provider="launcher", path=url)


def register() -> None:
    """Register the schema in Hydra's ConfigStore and the bundled search path (both idempotent)."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=schema(open_model=True))
    Plugins.instance().register(BundledRecipes)


@contextlib.contextmanager
def hydra_session(folders: Sequence[Path], overrides: Sequence[str] = ()) -> Iterator[Any]:
    """Hydra initialised on recipe folders (recipe_folders; yields its config loader); any Hydra,
    OmegaConf or YAML error inside becomes one ConfigError line. Hydra's global state is cleared on exit."""
    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folders[0]), version_base="1.3"):
            yield GlobalHydra.instance().config_loader()
    except ConfigError:
        raise
    except Exception as exc:  # Hydra/OmegaConf/YAML errors: many types, one translation point
        if type(exc).__module__.split(".")[0] not in ("hydra", "omegaconf", "yaml"):
            raise
        raise ConfigError(explain(exc, overrides, folders)) from None
    finally:
        GlobalHydra.instance().clear()


def default_choices(loader: Any) -> dict[str, str]:
    """Group → the option the root config's defaults list picks (Hydra's own groups left out)."""
    return {
        d.override_key: d.config_path.split("/", 1)[1]
        for d in loader.compute_defaults_list("config", [], RunMode.RUN).defaults
        if d.override_key and not d.override_key.startswith("hydra")
    }


def hydra_compose_dict(overrides: Sequence[str], folders: Sequence[Path]) -> dict[str, Any]:
    """Hydra composition of every override → resolved plain dict (config keys; choices as strings)."""
    with hydra_session(folders, overrides) as loader:
        _check_group_values(loader, overrides)
        plain = _composed(loader, overrides)
        try:
            checked = onto_schema(plain)
        except OmegaConfBaseException as exc:
            raise ConfigError(_where_model_key(exc, loader, overrides) + describe(exc, overrides)) from None
        data = OmegaConf.to_container(checked, resolve=True, throw_on_missing=True, enum_to_str=True)
    return data  # type: ignore[return-value]


def composed_plain(choices: Sequence[str], folders: Sequence[Path]) -> dict[str, Any]:
    """The document Hydra composes from group choices alone, before the closed schema checks it and
    before `${…}` is resolved: what the composition cache keeps (compose.py sets values on it). Each choice is
    `group=word` (compose._split), so no group value needs checking (_check_group_values lists the groups: ~15 ms)."""
    with hydra_session(folders, choices) as loader:
        return _composed(loader, choices)


def _composed(loader: Any, overrides: Sequence[str]) -> dict[str, Any]:
    # `model` is an open node holding what the recipe sets (load.schema): `model.key=value`
    # adds or sets a key there, as on the closed node it was, where every key existed.
    cfg = compose(config_name="config", overrides=[_add_or_set(ov) for ov in overrides])
    # Hydra's `+key=value` adds a key past the schema; merged as plain data, the schema refuses
    # it (and a built-in model's unknown key, which the open model node let through).
    return finished(OmegaConf.to_container(cfg), _model_option(loader, overrides), _job_option(loader, overrides))


def _add_or_set(override: str) -> str:
    return f"++{override}" if override.startswith("model.") else override


def _model_option(loader: Any, overrides: Sequence[str]) -> str:
    """The model recipe composed: the last `model=` override, else the defaults list's."""
    return _option(loader, overrides, "model", ModelConfig.name)


def _job_option(loader: Any, overrides: Sequence[str]) -> str:
    """The job recipe composed: the last `job=` override, else the defaults list's."""
    return _option(loader, overrides, "job", "builtin")


def _option(loader: Any, overrides: Sequence[str], group: str, default: str) -> str:
    """The recipe of `group` composed: the last `group=` override, else the defaults list's, else `default`."""
    picked = [p.value() for p in map(parsed_override, overrides) if p.key_or_group == group]
    return str(picked[-1] if picked else default_choices(loader).get(group, default))


def _where_model_key(exc: OmegaConfBaseException, loader: Any, overrides: Sequence[str]) -> str:
    """`FILE, line N: ` for a bad model key a recipe set: the open model node let it through
    composition, where Hydra would have named the recipe; an override's key needs no file."""
    key = getattr(exc, "full_key", None) or ""
    if not key.startswith("model.") or any(ov.lstrip("+~").startswith(key + "=") for ov in overrides):
        return ""
    return _in_recipe(f"model/{_model_option(loader, overrides)}", key, recipe_folders_of(loader))


def recipe_folders_of(loader: Any) -> list[Path]:
    """The search path's folders, as the loader sees them (file:// entries only)."""
    return [
        Path(p.path)
        for p in loader.get_search_path().config_search_path
        if p.path and p.provider != "hydra" and not p.path.startswith("pkg://")
    ]


def _check_group_values(loader: Any, overrides: Sequence[str]) -> None:
    """A group given a list or mapping (`batch=[1]`) makes Hydra fail deep inside with a TypeError."""
    groups = set(loader.list_groups(""))
    for ov in overrides:
        parsed = parsed_override(ov)  # unparsable: Hydra's error, worded by explain()
        group = parsed.key_or_group
        if group in groups and isinstance(parsed.value(), (list, dict)):
            options = loader.get_group_options(group)
            pick = default_choices(loader).get(group) or next(iter(options), "name")
            raise ConfigError(
                f"{ov}: a config group takes one option name, e.g. {group}={pick}; options: {', '.join(options)}"
            )


# --- error translation -------------------------------------------------------------------


def explain(exc: BaseException, overrides: Sequence[str], folders: Sequence[Path]) -> str:
    """One line for a Hydra/OmegaConf/YAML composition error."""
    msg = str(exc)
    if type(exc).__module__.startswith("yaml"):
        return _bad_yaml(exc)
    if isinstance(exc, OmegaConfBaseException):  # raised outside Hydra (resolving, MISSING)
        return describe(exc, overrides)
    if isinstance(exc, OverrideParseException):
        return _unparsable(overrides, msg)
    if isinstance(exc, MissingConfigException):
        return _missing_recipe(msg, folders)
    if unlisted := re.match(r"Could not override '([^']+)'\. No match in the defaults list", msg):
        return _not_in_defaults(unlisted.group(1), overrides, folders)
    if msg.startswith("Ambiguous value for argument"):
        ov = msg.split("'")[1]
        return f"{ov!r}: comma-separated values are not a single value; write a list as key=[a,b]"
    cause = exc.__cause__
    if cause is None and isinstance(exc, ConfigCompositionException):
        cause = exc.__context__  # Hydra sometimes chains the real error only as context
    if isinstance(cause, OmegaConfBaseException):
        recipe = re.match(r"In '([^']+)'", msg)
        if recipe is None:
            return describe(cause, overrides)
        return _in_recipe(recipe.group(1), getattr(cause, "full_key", None) or "", folders) + describe(cause, overrides)
    first = msg.splitlines()[0] if msg else type(exc).__name__
    return f"bad configuration: {first}"


def _not_in_defaults(group: str, overrides: Sequence[str], folders: Sequence[Path]) -> str:
    """`group=option` for a group that a user's config.yaml leaves out of its defaults list."""
    root = next((f / "config.yaml" for f in folders if (f / "config.yaml").is_file()), folders[-1] / "config.yaml")
    ov = override_for(group, overrides) or f"{group}=<option>"
    option = ov.split("=", 1)[1]
    return f"{ov}: the defaults list of {root} has no {group}; add `- {group}: {option}` to it, or write +{ov}"


def _in_recipe(recipe: str, key: str, folders: Sequence[Path]) -> str:
    """`FILE, line N: ` for an error Hydra found while merging recipe `group/name`: the file the search
    path took it from, and the first line that sets the key's last part (if one does)."""
    path = next((f / f"{recipe}.yaml" for f in folders if (f / f"{recipe}.yaml").is_file()), None)
    if path is None:
        return f"recipe {recipe}: "
    leaf = re.sub(r"\[\d+\]$", "", key).rsplit(".", 1)[-1]
    setting = re.compile(rf"^\s*(- )?['\"]?{re.escape(leaf)}['\"]?\s*:")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    number = next((n for n, line in enumerate(lines, 1) if leaf and setting.match(line)), None)
    return f"{path}, line {number}: " if number else f"{path}: "


def _bad_yaml(exc: BaseException) -> str:
    """A recipe file that is not YAML the loader accepts (syntax, duplicate key, a tag)."""
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)  # where it began
    where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a recipe"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: not valid recipe YAML ({problem}); fix the file"


def _unparsable(overrides: Sequence[str], msg: str) -> str:
    """Name the first override Hydra's grammar cannot parse."""
    for ov in overrides:
        try:
            parsed_override(ov)
        except OverrideParseException:
            return unparsable(ov)
    return f"cannot parse the overrides: {msg.splitlines()[0]}"


def _missing_recipe(msg: str, folders: Sequence[Path]) -> str:
    """`group=option` naming no recipe file: list the group's options in every recipe folder."""
    missing = re.search(r"Could not find '([^/']+)/([^']+)'", msg)
    if not missing:
        return msg.splitlines()[0]
    group, option = missing.groups()
    available = sorted({p.stem for folder in folders for p in (folder / group).glob("*.yaml")})
    where = " or ".join(str(folder / group) for folder in folders)
    return f"{group}={option} is not a recipe in {where}; available: {', '.join(available) or 'none'}"
