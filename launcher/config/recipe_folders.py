"""Where recipes are read from: the user's folder (--recipes DIR or $LAUNCHER_RECIPES), then the
bundled tree. Hydra's search path (hydra_compose.py) and the composition cache (composed_cache.py)
both take the folders from here."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from launcher.config.errors import ConfigError

SCHEMA_NAME = "launcher_schema"  # the structured schema's entry, first in recipes/config.yaml's defaults list


def bundled(name: str) -> Path:
    """A folder that ships with the package (`recipes`, `sbatch_templates`). A wheel or `pip install .`
    puts it inside the package (pyproject.toml maps the top-level folder there); an editable install
    or a source checkout has only the top-level folder, beside the package, which is then the one read."""
    inside = Path(str(files("launcher") / name))
    return (inside if inside.is_dir() else Path(__file__).resolve().parents[2] / name).resolve()


PACKAGED_RECIPES = bundled("recipes")


def recipe_folders(explicit: str | os.PathLike | None = None) -> tuple[Path, ...]:
    """The recipe folders, first match wins: the user's (--recipes > $LAUNCHER_RECIPES), if any,
    then the bundled tree."""
    given = explicit or os.environ.get("LAUNCHER_RECIPES")
    if not given:
        return (PACKAGED_RECIPES,)
    folder = Path(given).expanduser()
    if not folder.is_dir():
        source = "--recipes" if explicit else "LAUNCHER_RECIPES"
        raise ConfigError(
            f"{source} {str(given)!r} is not a folder; point it at a folder of recipes such as "
            "model/my_gpt.yaml (it adds to the bundled ones)"
        )
    folder = folder.resolve()
    return (folder,) if folder == PACKAGED_RECIPES else (folder, PACKAGED_RECIPES)


def user_recipes(recipes: str | os.PathLike | None) -> str | None:
    """The user's recipe folder among those a config is composed from, resolved (None: bundled only)."""
    folders = recipe_folders(recipes)
    return str(folders[0]) if len(folders) > 1 else None
