"""Composed recipes kept on disk per choice of recipes, so that a command whose overrides are group
choices and plain values (simple_override.py) reads its recipes' document back instead of composing
it (issue 30 item 11: composing was two thirds of a 256-trial `launcher sweep --detach`).

An entry is the document composed from the group choices alone (`cluster=devcluster`; by
plain_compose.py, or by Hydra where the recipes need it), every schema key present, before any value
is set or `${…}` resolved; compose.py sets the command's values on it and resolves it, as Hydra would
have. The key names everything that document depends on: the recipe folders and the
name, size and mtime of every file in them, the launcher's config code (the schema and its defaults),
and Hydra's and OmegaConf's versions. Editing a recipe, upgrading the launcher or switching folders
gives a new key; an entry that does not read back is composed again and replaced.

Where: $LAUNCHER_CACHE_DIR, else $XDG_CACHE_HOME/launcher, else ~/.cache/launcher (composed/ inside).
A cache that cannot be written (a read-only home) only costs the next command its composition.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from launcher import __version__

_CONFIG_CODE = Path(__file__).resolve().parent
_ALSO = ("layouts.py",)  # outside config/, imported by the schema (choices.py)


def cache_root() -> Path:
    if explicit := os.environ.get("LAUNCHER_CACHE_DIR"):
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "launcher"


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def _files(folder: Path, pattern: str) -> list[Path]:
    return sorted(p for p in folder.rglob(pattern) if p.is_file())


def cache_key(folders: Sequence[Path], choices: Sequence[str]) -> str:
    """sha256 of what the composed document of `choices` (group=option, in command order) depends on."""
    code = [*_files(_CONFIG_CODE, "*.py"), *(_CONFIG_CODE.parent / name for name in _ALSO)]
    libraries = [Path(spec.origin) for name in ("hydra", "omegaconf") if (spec := find_spec(name)) and spec.origin]
    parts = [
        __version__,
        sys.version,
        *(_stamp(p) for p in code),
        *(_stamp(p) for p in libraries),
        *(f"folder {f}" for f in folders),
        *(_stamp(p) for f in folders for p in _files(f, "*.yaml")),  # what Hydra reads of a folder
        *(f"choice {c}" for c in choices),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def recall(key: str) -> dict[str, Any] | None:
    """The entry under `key`, or None: absent, or not the JSON object an entry is (then composed again)."""
    try:
        doc = json.loads((cache_root() / "composed" / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def remember(key: str, document: dict[str, Any]) -> None:
    """Store an entry atomically (a reader sees the whole file or none); an unwritable cache is skipped:
    it only means the next command composes again."""
    folder = cache_root() / "composed"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
            json.dump(document, tmp)
        os.replace(tmp.name, folder / f"{key}.json")
    except OSError:
        return
