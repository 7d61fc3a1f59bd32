"""The OmegaConf schema of LauncherConfig, and stored documents (plain dicts) ↔ typed configs.

`schema()` is `OmegaConf.structured(LauncherConfig)`: compose.py registers it in Hydra's
ConfigStore, and `load_config` merges a stored document onto it, so both paths check keys,
types and choices the same way; `OmegaConf.to_object` gives the frozen dataclasses back.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from launcher.config.errors import ConfigError
from launcher.config.messages import RENAMED, bad_value, describe
from launcher.config.schema import LauncherConfig


def schema() -> DictConfig:
    """LauncherConfig as a structured OmegaConf node that recipes and overrides merge onto.

    OmegaConf marks the nodes of frozen dataclasses read-only; the flag is cleared (on every
    node: a child's own flag wins over its parent's) so merging works. Frozen still holds for
    the objects `to_object` returns.
    """
    node = OmegaConf.structured(LauncherConfig)
    _writable(node)
    return node


def _writable(node: DictConfig) -> None:
    OmegaConf.set_readonly(node, None)
    for child in node.values():
        if isinstance(child, DictConfig):
            _writable(child)


def load_config(data: Mapping[str, Any]) -> LauncherConfig:
    """A resolved document (config keys → values) → typed config; ConfigError names a bad key or value.

    The document is resolved already: `${` in its strings is text, never an interpolation.
    """
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(schema(), escaped(_upgraded(data))))
    except OmegaConfBaseException as exc:
        raise ConfigError(describe(exc)) from None
    _check_list_items(cfg)
    return cfg  # type: ignore[return-value]


def to_dict(cfg: LauncherConfig) -> dict[str, Any]:
    """Typed config → plain dict (choices as their strings): what trial.json and sweep.json store."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)  # type: ignore[return-value]


def _check_list_items(obj: Any, prefix: str = "") -> None:
    """OmegaConf checks the scalars in a typed list but lets a nested list or mapping through."""
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            _check_list_items(value, key + ".")
        elif isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
            raise ConfigError(bad_value(key, value))


def _upgraded(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A document written before a key was renamed (RENAMED), with the key's new name."""
    out = dict(data)
    for old, new in RENAMED.items():
        group, old_leaf = old.rsplit(".", 1)
        new_leaf = new.rsplit(".", 1)[1]
        section = out.get(group)
        if isinstance(section, Mapping) and old_leaf in section and new_leaf not in section:
            out[group] = {new_leaf if k == old_leaf else k: v for k, v in section.items()}
    return out


def escaped(value: Any) -> Any:
    """Strings with `${` escaped, so OmegaConf keeps them as text (exact round trip)."""
    if isinstance(value, str):
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, Mapping):
        return {k: escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value
