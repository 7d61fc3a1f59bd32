"""Compose recipes + command-line overrides into a validated LauncherConfig: the one entry point.

Hydra composes (hydra_compose.py: its session, the composition, each error as one line). A command
whose overrides are group choices and plain values (`cluster=devcluster sweep.repeats=64
sweep.results_dir=/scratch/x`; simple_override.py) takes a shorter road to the same document: the
document Hydra composed from its group choices is read from the composition cache
(composed_cache.py; Hydra composes it on a miss), its values are set on it, and it is merged onto
the closed schema and resolved as Hydra's road does. Anything else, and any value that does not fit,
goes Hydra's road, whose error is the one the user sees.

Recipes are looked up on Hydra's search path: your folder first (--recipes DIR or
$LAUNCHER_RECIPES, Hydra's primary config dir), then the bundled tree (a search-path plugin
appends it). So your folder holds only what it adds or replaces: `model/my_gpt.yaml` alone is
`model=my_gpt` beside every bundled group, and a file named like a bundled one wins over it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from launcher.config.composed_cache import cache_key, recall, remember
from launcher.config.errors import ConfigError
from launcher.config.load import load_config, onto_schema
from launcher.config.recipe_folders import PACKAGED_RECIPES, bundled, recipe_folders, user_recipes
from launcher.config.schema import LauncherConfig
from launcher.config.simple_override import simple_override
from launcher.config.validate import validate

__all__ = ["PACKAGED_RECIPES", "bundled", "compose_config", "compose_dict", "recipe_folders", "user_recipes"]

# Values on these keys take Hydra's road: `model.key=value` may add a key (compose's `++`) that a
# `_target_` model's recipe folds into kwargs, and job.argv/env are kept as text (hydra_compose._job_as_text).
_HYDRA_ONLY = ("model", "job")


def compose_dict(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> dict[str, Any]:
    """Recipes + overrides → resolved plain dict (config keys; choices as strings)."""
    folders = recipe_folders(recipes)
    if (data := _from_cache(overrides, folders)) is not None:
        return data
    from launcher.config.hydra_compose import hydra_compose_dict  # lazy: Hydra, which a cached command skips

    return hydra_compose_dict(overrides, folders)


def compose_config(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> LauncherConfig:
    """The one entry point: recipes + overrides → typed, validated config."""
    return validate(load_config(compose_dict(overrides, recipes)))


def _from_cache(overrides: Sequence[str], folders: Sequence[Path]) -> dict[str, Any] | None:
    """The resolved document by the cache's road, or None where Hydra's must take the command."""
    split = _split(overrides, folders)
    if split is None:
        return None
    choices, values = split
    key = cache_key(folders, choices)
    plain = recall(key)
    if plain is None:
        from launcher.config.hydra_compose import composed_plain  # lazy: Hydra, on a miss only

        try:
            plain = composed_plain(choices, folders)
        except ConfigError:
            return None  # Hydra's road, with every override, says what is wrong
        remember(key, plain)
    return _with_values(plain, values)


def _split(overrides: Sequence[str], folders: Sequence[Path]) -> tuple[list[str], list[tuple[str, Any]]] | None:
    """(group choices, (key, value) of the rest), or None if any override is outside the subset."""
    groups = {p.name for f in folders for p in f.iterdir() if p.is_dir()}
    choices: list[str] = []
    values: list[tuple[str, Any]] = []
    for ov in overrides:
        parsed = simple_override(ov)
        if parsed is None:
            return None
        key, value = parsed
        if "." in key and key.split(".")[0] in _HYDRA_ONLY:
            return None
        if key in groups:
            if not isinstance(value, str):
                return None  # `batch=[1]`: hydra_compose words the error
            choices.append(ov)
        else:
            values.append((key, value))
    return choices, values


def _with_values(plain: dict[str, Any], values: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """`plain` with each value set, as Hydra sets an override on a key the recipes hold, then merged onto
    the closed schema and resolved; None where a key is not there or a value does not fit."""
    doc = copy.deepcopy(plain)  # the entry stays as read: a miss sets values on what it stores
    for key, value in values:
        *path, leaf = key.split(".")
        node: Any = doc
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            return None
        node[leaf] = value
    try:
        checked = onto_schema(doc)
        data = OmegaConf.to_container(checked, resolve=True, throw_on_missing=True, enum_to_str=True)
    except OmegaConfBaseException:
        return None
    return data  # type: ignore[return-value]
