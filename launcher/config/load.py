"""The OmegaConf schema of LauncherConfig, and stored documents (plain dicts) ↔ typed configs.

`schema()` is `OmegaConf.structured(LauncherConfig)`: compose.py registers it in Hydra's
ConfigStore, and `load_config` merges a stored document onto it, so both paths check keys,
types and choices the same way; `OmegaConf.to_object` gives the frozen dataclasses back.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from launcher.config.errors import ConfigError
from launcher.config.messages import bad_value, describe
from launcher.config.plain import upgraded, with_input_specs
from launcher.config.schema import DataConfig, LauncherConfig, ModelConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

# OmegaConf is imported where a function needs it: a command whose config comes from the composition cache
# (compose.py) builds it without OmegaConf, and its import was a sixth of such a command's time.


def schema(*, open_model: bool = False) -> DictConfig:
    """LauncherConfig as a structured OmegaConf node that recipes and overrides merge onto.

    OmegaConf marks the nodes of frozen dataclasses read-only; the flag is cleared (on every
    node: a child's own flag wins over its parent's) so merging works. Frozen still holds for
    the objects `to_object` returns. `open_model` (the node Hydra composes onto): `model` is an open
    mapping (_open_recipe_class) and `data` and `parallel.tp_plan` take keys the schema does not
    know: a `_target_` recipe writes its callable's keyword arguments beside `_target_`;
    `fold_model_kwargs` moves them into `kwargs` and the closed schema then refuses any unknown
    key left (a typo in a built-in model's recipe).
    """
    return copy.deepcopy(_schema(open_model))  # a copy: callers merge onto it and Hydra stores it


def onto_schema(document: Any) -> DictConfig:
    """`document` merged onto the closed schema. OmegaConf.merge deep-copies its first config, so the
    process's one schema node is passed as it is (a copy of our own first cost ~15 ms a merge)."""
    from omegaconf import OmegaConf  # lazy (see the imports)

    return OmegaConf.merge(_schema(False), document)  # type: ignore[return-value]


@functools.cache
def _schema(open_model: bool) -> DictConfig:
    # Built once per process: OmegaConf.structured walks every dataclass (~35-95 ms), a copy ~15 ms, and
    # composing one config asks for it three times.
    from omegaconf import OmegaConf  # lazy (see the imports)

    node = OmegaConf.structured(_open_recipe_class() if open_model else LauncherConfig)
    _writable(node)
    if open_model:
        OmegaConf.set_struct(node.data, False)
        OmegaConf.set_struct(node.parallel.tp_plan, False)  # a mapping of your module names, not schema keys
        OmegaConf.set_struct(node.job.env, False)  # your variables' names
    return node


def _open_recipe_class() -> type:
    """LauncherConfig with `model` an open mapping with no defaults: what a recipe sets is then
    told apart from ModelConfig's defaults (a `_target_` model's `vocab_size` is its callable's
    argument, never the default 256); hydra_compose checks it against ModelConfig afterwards."""
    hints = typing.get_type_hints(LauncherConfig)
    fields = [
        (f.name, dict[str, Any], dataclasses.field(default_factory=dict))
        if f.name == "model"
        else (
            f.name,
            hints[f.name],
            dataclasses.field(default_factory=f.default_factory)
            if f.default_factory is not dataclasses.MISSING
            else dataclasses.field(default=f.default),
        )
        for f in dataclasses.fields(LauncherConfig)
    ]
    return dataclasses.make_dataclass("LauncherRecipe", fields, kw_only=True, frozen=True)


def _writable(node: DictConfig) -> None:
    from omegaconf import DictConfig, OmegaConf  # lazy (see the imports)

    OmegaConf.set_readonly(node, None)
    for child in node.values():
        if isinstance(child, DictConfig):
            _writable(child)


TARGET_GROUPS = {"model": ModelConfig, "data": DataConfig}
"""Groups that take your own code by `_target_` (a model, a dataset), its keyword arguments beside it."""
BYO_MODEL_KEYS = frozenset({"name", "_target_", "kwargs", "inputs", "target", "loss", "activation_checkpointing"})
"""The ModelConfig keys a `_target_` model uses; its recipe's other keys (vocab_size too) are its callable's."""


def fold_model_kwargs(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`data` with the keyword arguments of a `_target_` model (every key but BYO_MODEL_KEYS) or
    dataset (every key DataConfig does not know) moved into its `kwargs`; a built-in model's keys
    stay, so that the schema refuses an unknown one."""
    out = dict(data)
    for group, schema_cls in TARGET_GROUPS.items():
        section = data.get(group)
        if not isinstance(section, Mapping) or section.get("_target_") is None:
            continue
        known = BYO_MODEL_KEYS if group == "model" else {f.name for f in dataclasses.fields(schema_cls)}
        kept = {k: v for k, v in section.items() if k in known}
        kept["kwargs"] = {**(section.get("kwargs") or {}), **{k: v for k, v in section.items() if k not in known}}
        out[group] = kept
    return out


def load_config(data: Mapping[str, Any]) -> LauncherConfig:
    """A resolved document (config keys → values) → typed config; ConfigError names a bad key or value.

    The document is resolved already: `${` in its strings is text, never an interpolation.
    """
    from omegaconf import OmegaConf  # lazy (see the imports)
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.to_object(onto_schema(escaped(upgraded(data))))
    except OmegaConfBaseException as exc:
        raise ConfigError(describe(exc)) from None
    return checked(cfg)  # type: ignore[arg-type]


def checked(cfg: LauncherConfig) -> LauncherConfig:
    """What every typed config passes once built (here, or by compose.py's cache road): list items
    that OmegaConf lets through refused, model inputs as InputSpecs."""
    _check_list_items(cfg)
    return with_input_specs(cfg)


def _check_list_items(obj: Any, prefix: str = "") -> None:
    """OmegaConf checks the scalars in a typed list but lets a nested list or mapping through."""
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            _check_list_items(value, key + ".")
        elif isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
            raise ConfigError(bad_value(key, value))


def escaped(value: Any) -> Any:
    """Strings with `${` escaped, so OmegaConf keeps them as text (exact round trip)."""
    if isinstance(value, str):
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    if isinstance(value, Mapping):
        return {k: escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(v) for v in value]
    return value
