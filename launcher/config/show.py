"""What `--cfg` and `--info` print, as Hydra users expect them: pure functions returning text.

`resolved_yaml(cfg)`: the composed, resolved config of a command as YAML (Hydra's `--cfg job`).
`groups_text(recipes_dir)`: each config group, its options and the defaults (Hydra's `--info`).
"""

from __future__ import annotations

import os
from typing import Sequence

from hydra.types import RunMode
from omegaconf import OmegaConf

from launcher.config.compose import compose_config, hydra_session, recipes_dir as find_recipes
from launcher.config.load import escaped, to_dict
from launcher.config.schema import LauncherConfig
from launcher.trials.expand import expand


def resolved_yaml(cfg: LauncherConfig) -> str:
    """The config as YAML, keys in schema order. Read back as a recipe (OmegaConf/Hydra) it gives
    the same config: a literal `${` in a value is written escaped (`\\${`)."""
    return OmegaConf.to_yaml(escaped(to_dict(cfg)))


def resolved_yamls(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> str:
    """`--cfg`: the resolved config of a command; a sweep over comma values has one config per
    combination, each headed by its label as a YAML comment."""
    variants = expand(overrides)
    if len(variants) == 1:
        return resolved_yaml(compose_config(variants[0].overrides, recipes))
    return "".join(f"# --- {v.label}\n{resolved_yaml(compose_config(v.overrides, recipes))}" for v in variants)


def groups_text(recipes_dir: str | os.PathLike | None = None) -> str:
    """Each config group with its options (`*` marks the default), then the defaults as overrides.

    `recipes_dir` as `--recipes` takes it (None: $LAUNCHER_RECIPES, else the packaged recipes).
    Groups come in the order config.yaml's defaults list composes them; groups it does not
    name follow, sorted.
    """
    folder = find_recipes(recipes_dir)
    with hydra_session(folder) as loader:
        chosen = {
            d.override_key: d.config_path.split("/", 1)[1]
            for d in loader.compute_defaults_list("config", [], RunMode.RUN).defaults
            if d.override_key and not d.override_key.startswith("hydra")
        }
        groups = [*chosen, *sorted(g for g in loader.list_groups("") if g != "hydra" and g not in chosen)]
        options = {g: loader.get_group_options(g) for g in groups}
    width = max((len(g) for g in groups), default=0) + 1
    lines = [f"Config groups in {folder} (choose with group=option; * marks the default):"]
    for group in groups:
        names = [f"{o}*" if chosen.get(group) == o else o for o in options[group]]
        lines.append(f"  {group + ':':<{width}} {', '.join(names)}")
    lines.append("Defaults: " + " ".join(f"{g}={o}" for g, o in chosen.items()))
    return "\n".join(lines) + "\n"
