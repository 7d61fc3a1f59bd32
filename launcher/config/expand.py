"""Pure sweep expansion: command-line overrides with comma values → one override list per
combination (Hydra's sweep grammar: `parallel=ddp,fsdp batch.accum=1,4`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.config.errors import ConfigError
from launcher.config.messages import is_list_key, parsed_override, unparsable
from launcher.config.simple_override import all_simple

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override


@dataclass(kw_only=True, frozen=True)
class Variant:
    overrides: tuple[str, ...]
    """The full override list of this combination (fixed ones first, in the user's order)."""
    swept: tuple[tuple[str, str], ...]
    """(key, value) of each swept override in this combination; empty when nothing is swept."""

    @property
    def label(self) -> str:
        """Short, folder-safe name: the swept values joined, e.g. `fsdp-accum4`."""
        parts = []
        for key, value in self.swept:
            leaf = key.rsplit(".", 1)[-1]
            parts.append(value if key in ("parallel", "model", "optim", "data", "cluster") else f"{leaf}{value}")
        return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))[:60]


def expand(overrides: Sequence[str]) -> list[Variant]:
    """Cartesian product of the swept overrides, first key varying slowest."""
    if all_simple(overrides):  # none sweeps: one combination, without loading Hydra's grammar
        return [Variant(overrides=tuple(overrides), swept=())]
    from hydra.errors import OverrideParseException  # lazy, as parsed_override

    fixed: list[str] = []
    swept: list[tuple[str, list[str]]] = []
    for ov in overrides:
        try:
            parsed = parsed_override(ov)
        except OverrideParseException:
            raise ConfigError(unparsable(ov)) from None
        if parsed.is_sweep_override():
            _refuse_scalar_sweep_of_a_list(ov, parsed)
            values = list(parsed.sweep_string_iterator())
            if len(set(values)) != len(values):
                raise ConfigError(f"{ov!r} lists a value twice; list each value once")
            swept.append((parsed.get_key_element(), values))
        else:
            fixed.append(ov)
    if not swept:
        return [Variant(overrides=tuple(fixed), swept=())]
    keys = [k for k, _ in swept]
    return [
        Variant(
            overrides=(*fixed, *(f"{k}={v}" for k, v in zip(keys, combo, strict=True))),
            swept=tuple(zip(keys, combo, strict=True)),
        )
        for combo in itertools.product(*(values for _, values in swept))
    ]


def _refuse_scalar_sweep_of_a_list(ov: str, parsed: Override) -> None:
    """`sweep.world_sizes=1,2` (brackets forgotten) would quietly become one variant per value; a
    sweep over a list-typed key (found in the schema) must list lists: `key=[1,2],[4,8]`."""
    key = parsed.key_or_group
    choices = getattr(parsed.value(), "list", None)  # a range() sweep has none: always scalars
    if not is_list_key(key) or (choices is not None and all(isinstance(c, list) for c in choices)):
        return
    items = ",".join(parsed.sweep_string_iterator())
    raise ConfigError(
        f"{ov} sweeps {key} over single values, but {key} is a list; "
        f"write '{key}=[{items}]' (quoted: zsh rejects the bare form)"
    )
