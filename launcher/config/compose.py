"""Compose recipes + command-line overrides into a validated LauncherConfig: the one entry point.

Hydra composes (hydra_compose.py: its session, the composition, each error as one line). A command
whose overrides are group choices and plain values (`cluster=devcluster sweep.repeats=64
sweep.results_dir=/scratch/x`; simple_override.py) takes a shorter road to the same config: the
document of its group choices is read from the composition cache (composed_cache.py; on a miss,
plain_compose.py reads the recipe files where they are plain YAML, else Hydra composes), its values
are set on it, `${…}` is resolved, and typed_document.py builds the dataclasses from it without
OmegaConf's structured schema. Anything else, and any value or recipe that does not fit, goes
Hydra's road, whose error is the one the user sees.

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

from launcher.config.composed_cache import cache_key, recall, remember
from launcher.config.errors import ConfigError
from launcher.config.load import checked, load_config, onto_schema
from launcher.config.plain_compose import composed_plainly
from launcher.config.recipe_folders import PACKAGED_RECIPES, bundled, recipe_folders, user_recipes
from launcher.config.resolved import resolved
from launcher.config.schema import LauncherConfig
from launcher.config.simple_override import simple_override
from launcher.config.typed_document import Unfit, typed
from launcher.config.validate import validate

__all__ = ["PACKAGED_RECIPES", "bundled", "compose_config", "compose_dict", "recipe_folders", "user_recipes"]

# Values on these keys take Hydra's road: `model.key=value` may add a key (compose's `++`) that a
# `_target_` model's recipe folds into kwargs, and job.argv/env are kept as text (hydra_compose._job_as_text).
_HYDRA_ONLY = ("model", "job")


def compose_config(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> LauncherConfig:
    """The one entry point: recipes + overrides → typed, validated config."""
    cfg = _from_cache(overrides, recipe_folders(recipes))
    return validate(cfg if cfg is not None else load_config(compose_dict(overrides, recipes)))


def compose_dict(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> dict[str, Any]:
    """Hydra's road: recipes + every override → resolved plain dict (config keys; choices as strings)."""
    from launcher.config.hydra_compose import hydra_compose_dict  # lazy: Hydra, which a cached command skips

    return hydra_compose_dict(overrides, recipe_folders(recipes))


def _from_cache(overrides: Sequence[str], folders: Sequence[Path]) -> LauncherConfig | None:
    """The config by the cache's road, or None where Hydra's must take the command."""
    split = _split(overrides, folders)
    if split is None:
        return None
    choices, values = split
    key = cache_key(folders, choices)
    document = recall(key)
    if document is None:
        document = _composed(choices, folders)
        if document is None:
            return None
        remember(key, document)
    try:
        return checked(typed(LauncherConfig, resolved(_with_values(document, values))))
    except Unfit:
        return None


def _composed(choices: Sequence[str], folders: Sequence[Path]) -> dict[str, Any] | None:
    """What the cache keeps: the document composed from the group choices (plain_compose.py where the recipes
    allow, else Hydra), every schema key present, unresolved. None where it does not compose: Hydra's road, with
    every override, says why."""
    if (plain := composed_plainly(choices, folders)) is not None:
        return plain
    from omegaconf import OmegaConf  # lazy: OmegaConf and Hydra, where the recipes need them
    from omegaconf.errors import OmegaConfBaseException

    from launcher.config.hydra_compose import composed_plain

    try:
        merged = onto_schema(composed_plain(choices, folders))
    except (ConfigError, OmegaConfBaseException):
        return None
    return OmegaConf.to_container(merged, resolve=False, enum_to_str=True)  # type: ignore[return-value]


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


def _with_values(document: dict[str, Any], values: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """`document` with each value set where the key is; Unfit where it is not (Hydra's road then refuses it)."""
    doc = copy.deepcopy(document)  # the entry stays as read: a miss sets values on what it stores
    for key, value in values:
        *path, leaf = key.split(".")
        node: Any = doc
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            raise Unfit(f"{key}: not in the composed document")
        node[leaf] = value
    return doc
