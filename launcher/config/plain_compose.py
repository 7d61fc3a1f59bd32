"""Recipes composed without Hydra, where they use only what the bundled tree uses: a root config.yaml
whose defaults list is `launcher_schema`, one `group: option` per group and `_self_` last; group
files of plain YAML (no defaults list of their own, no `# @package` header). Each group's file is
read from the first recipe folder holding it, as Hydra's search path does, merged at the group's
key in the defaults list's order, then the root's own keys, onto the schema's defaults.

Hydra's import and composition were most of a first `launcher sweep` (issue 30 item 11); this reads
the same files to the same document (tests/unit/test_compose_cache.py holds the configs equal for
every bundled option). Anything else returns None and Hydra composes (hydra_compose.py); a document
the schema refuses goes there too (compose.py), so Hydra's error, naming the file, is what the user sees.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.config.composed_document import finished
from launcher.config.errors import ConfigError
from launcher.config.plain import to_dict
from launcher.config.recipe_folders import SCHEMA_NAME
from launcher.config.schema import LauncherConfig, ModelConfig

_NAME = re.compile(r"[A-Za-z_][\w\-]*")  # a group or option: no `/` (nested groups), no `@` (packages)


def composed_plainly(choices: Sequence[str], folders: Sequence[Path]) -> dict[str, Any] | None:
    """The document for `choices` (`group=option`, in command order), every schema key present and
    nothing resolved; None where Hydra must compose."""
    root = _first(folders, "config.yaml")
    top = _read(root) if root else None
    picked = _picked(top, choices)
    if top is None or picked is None:
        return None
    doc = _defaults()
    for group, option in picked.items():
        path = _first(folders, f"{group}/{option}.yaml")
        body = _read(path) if path else None
        if body is None or "defaults" in body:
            return None
        doc = merged(doc, {group: body})
    doc = merged(doc, {k: v for k, v in top.items() if k != "defaults"})
    try:
        done = finished(doc, picked.get("model", ModelConfig.name), picked.get("job", "builtin"))
    except ConfigError:
        return None
    return merged({**_defaults(), "model": to_dict(ModelConfig())}, done)  # the closed model's defaults beneath


def _picked(top: dict[str, Any] | None, choices: Sequence[str]) -> dict[str, str] | None:
    """Group → option: the root's defaults list, each command choice replacing its group's once."""
    defaults = (top or {}).get("defaults")
    if "hydra" in (top or {}) or not isinstance(defaults, list) or defaults[:1] != [SCHEMA_NAME]:
        return None
    if defaults[-1:] != ["_self_"]:
        return None
    picked: dict[str, str] = {}
    for entry in defaults[1:-1]:
        if not (isinstance(entry, dict) and len(entry) == 1):
            return None
        ((group, option),) = entry.items()
        if not (isinstance(group, str) and _NAME.fullmatch(group) and isinstance(option, str)):
            return None
        if group in picked or not _NAME.fullmatch(option):
            return None
        picked[group] = option
    chosen = [c.split("=", 1) for c in choices]
    if len({g for g, _ in chosen}) != len(chosen) or any(g not in picked or not _NAME.fullmatch(o) for g, o in chosen):
        return None  # a group chosen twice, one the defaults list lacks, a nested option: Hydra's word
    return picked | dict(chosen)


def _first(folders: Sequence[Path], name: str) -> Path | None:
    return next((f / name for f in folders if (f / name).is_file()), None)


def _read(path: Path) -> dict[str, Any] | None:
    """A recipe file as Hydra reads it (OmegaConf's YAML loader), unresolved; None if not a plain mapping."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if any(line.lstrip().startswith("# @package") for line in text.splitlines()):
        return None
    from omegaconf import DictConfig, OmegaConf  # lazy: a miss only; a cached command never loads OmegaConf

    try:
        node = OmegaConf.load(path)
    except Exception as exc:  # bad YAML (yaml's or OmegaConf's error types): Hydra's road words it
        if type(exc).__module__.split(".")[0] not in ("yaml", "omegaconf") and not isinstance(exc, ValueError):
            raise
        return None
    if not isinstance(node, DictConfig):
        return None
    return OmegaConf.to_container(node, resolve=False)  # type: ignore[return-value]


@functools.cache
def _defaults_cached() -> dict[str, Any]:
    return {**to_dict(LauncherConfig()), "model": {}}  # Hydra composes onto an open model node: no defaults


def _defaults() -> dict[str, Any]:
    return copy.deepcopy(_defaults_cached())


def merged(base: Any, top: Any) -> Any:
    """OmegaConf's merge of plain data: mappings key by key, anything else (lists too) replaced."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for key, value in top.items():
            out[key] = merged(base.get(key, {}), value) if isinstance(value, dict) else value
        return out
    return top
