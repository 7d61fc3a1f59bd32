"""What `--cfg` and `--info` print, as Hydra users expect them: pure functions returning text.

`resolved_yaml(cfg)`: the composed, resolved config of a command as YAML (Hydra's `--cfg job`).
`groups_text(recipes_dir)`: each config group, its options and the defaults (Hydra's `--info`),
the user's own options (--recipes) marked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from launcher.config.compose import compose_config
from launcher.config.expand import expand
from launcher.config.load import escaped
from launcher.config.plain import to_dict
from launcher.config.recipe_folders import recipe_folders
from launcher.config.schema import LauncherConfig


def resolved_yaml(cfg: LauncherConfig) -> str:
    """The config as YAML, keys in schema order. Read back as a recipe (OmegaConf/Hydra) it gives
    the same config: a literal `${` in a value is written escaped (`\\${`)."""
    from omegaconf import OmegaConf  # lazy: --cfg only

    return OmegaConf.to_yaml(escaped(to_dict(cfg)))


def resolved_yamls(overrides: Sequence[str], recipes: str | os.PathLike | None = None) -> str:
    """`--cfg`: the resolved config of a command; a sweep over comma values has one config per
    combination, each headed by its label as a YAML comment."""
    variants = expand(overrides)
    if len(variants) == 1:
        return resolved_yaml(compose_config(variants[0].overrides, recipes))
    return "".join(f"# --- {v.label}\n{resolved_yaml(compose_config(v.overrides, recipes))}" for v in variants)


def groups_text(recipes_dir: str | os.PathLike | None = None) -> str:
    """Each config group with its options (`*` marks the default, `+` an option from the user's
    folder, which wins over a bundled one of the same name), then the defaults as overrides.

    `recipes_dir` as `--recipes` takes it (None: $LAUNCHER_RECIPES, else only the bundled recipes).
    Groups come in the order the root config's defaults list composes them; groups it does not
    name follow, sorted.
    """
    from launcher.config.hydra_compose import default_choices, hydra_session  # lazy: Hydra, for --info only

    folders = recipe_folders(recipes_dir)
    with hydra_session(folders) as loader:
        chosen = default_choices(loader)
        groups = [*chosen, *sorted(g for g in loader.list_groups("") if g != "hydra" and g not in chosen)]
        options = {g: loader.get_group_options(g) for g in groups}
    yours = {(p.parent.name, p.stem) for p in folders[0].glob("*/*.yaml")} if len(folders) > 1 else set()
    width = max((len(g) for g in groups), default=0) + 1
    where = f"{folders[0]} (marked +) and the bundled {folders[1]}" if len(folders) > 1 else f"{folders[0]}"
    lines = [f"Config groups in {where} (choose with group=option; * marks the default):"]
    for group in groups:
        names = [o + "*" * (chosen.get(group) == o) + "+" * ((group, o) in yours) for o in options[group]]
        lines.append(f"  {group + ':':<{width}} {', '.join(names)}")
    lines.append("Defaults: " + " ".join(f"{g}={o}" for g, o in chosen.items()))
    return "\n".join(lines) + "\n"
