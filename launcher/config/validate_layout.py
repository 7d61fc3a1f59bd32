"""Checks on parallel.* that hold at every world size, read from the layout's row in
launcher/layouts.py: the degrees a recipe must set and what a `_target_` model may do under the
layout. Per-size checks
(degrees dividing the world, stages dividing the layers): launcher/trials/layout.py."""

from __future__ import annotations

from launcher import torch_compat
from launcher.config.errors import ConfigError
from launcher.config.schema import ParallelConfig
from launcher.layouts import Degree, layout_names, traits


def either(names: list[str], key: str = "parallel=") -> str:
    """`parallel=ddp or parallel=fsdp`: the layouts a message offers, as the user would write them."""
    return " or ".join(f"{key}{name}" for name in names)


def set_degrees(par: ParallelConfig) -> tuple[int, int]:
    """(tp, pp) of a layout whose degrees the config sets (fsdp_tp: tp; dp_pp, fsdp_pp: pp;
    fsdp_tp_pp: both), 1 for a dim the layout does not split or whose degree follows the world
    size; a ConfigError naming the ones missing. Size-independent, so config validation calls it too."""
    keys = traits(par.layout).set_dims
    missing = [k for k in keys if getattr(par, k) is None or getattr(par, k) < 1]
    if missing:
        needs = " and ".join(f"parallel.{k}=<degree ≥ 1>" for k in missing)
        example = " ".join(f"parallel.{k}=2" for k in missing)
        raise ConfigError(f"parallel.layout={par.layout} needs {needs}; set e.g. {example}")
    degree = {"tp": 1, "pp": 1} | {k: getattr(par, k) for k in keys}
    return degree["tp"], degree["pp"]


def check_torch_release(par: ParallelConfig) -> None:
    """A layout this torch cannot run, refused before any trial (the releases: launcher/torch_compat.py)."""
    row = traits(par.layout)
    if row.tp != Degree.none and row.cp != Degree.none and (refusal := torch_compat.tp_cp_refusal(par.layout)):
        raise ConfigError(refusal)


def check_byo_layout(target: str, par: ParallelConfig) -> None:
    """A `_target_` model runs where its row names a byo_engine: the whole-model layouts (ddp,
    fsdp) as it is; the launcher cannot cut an arbitrary module into pipeline stages or tensor-
    parallel pieces itself, so tp takes the recipe's plan (parallel.tp_plan), pipeline and dp_pp
    its split (parallel.pp_split), with gpipe or 1f1b."""
    _check_byo_split(target, par)
    row = traits(par.layout)
    if row.splits("tp") and not (row.byo_engine and par.tp_plan):
        takers = layout_names(lambda r: r.splits("tp") and r.byo_engine)
        why = (
            f"only layout {' or '.join(takers)} takes your plan"
            if par.tp_plan
            # Whole dotted names, as the module check (train/models/byo_check.py) accepts them.
            else "give a TP plan by whole dotted module names, * for any part, "
            "e.g. parallel.tp_plan={blocks.*.fc1: colwise, blocks.*.fc2: rowwise}"
        )
        raise ConfigError(
            f"parallel.layout={par.layout} cannot split model._target_={target!r} across tensor-parallel "
            f"ranks: {why}; or use {either(_whole())}"
        )
    bad = {name: style for name, style in par.tp_plan.items() if style not in ("colwise", "rowwise")}
    if bad:
        name, style = next(iter(bad.items()))
        raise ConfigError(
            f"parallel.tp_plan.{name}={style!r} must be colwise or rowwise (torch's ColwiseParallel, RowwiseParallel)"
        )


def _whole() -> list[str]:
    """The layouts that run a `_target_` model as it is, no split to give."""
    return layout_names(lambda r: r.whole_model and r.byo_engine)


def _check_byo_split(target: str, par: ParallelConfig) -> None:
    """parallel.pp_split: given exactly where a pipeline layout needs it, one stage per rank."""
    split, row = list(par.pp_split), traits(par.layout)
    splitters = either(layout_names(lambda r: r.splits("pp") and r.byo_engine))
    if row.splits("pp") and not row.byo_engine:
        raise ConfigError(
            f"parallel.layout={par.layout} cannot split model._target_={target!r}: a split by module name "
            f"(parallel.pp_split) runs under {splitters}; or use parallel=fsdp"
        )
    if row.splits("pp") and not split:
        raise ConfigError(
            f"parallel.layout={par.layout} cannot split model._target_={target!r} into pipeline stages by "
            "itself: give the module names where a stage begins, e.g. parallel.pp_split=[blocks.2]; "
            f"or use {either(_whole())}"
        )
    if split and not row.splits("pp"):
        raise ConfigError(
            f"parallel.pp_split={split} cuts pipeline stages, which parallel.layout={par.layout} has none "
            f"of; use {splitters}, or drop parallel.pp_split"
        )
    if not split:
        return
    if len(set(split)) != len(split):
        raise ConfigError(f"parallel.pp_split={split} names a module twice; list each stage boundary once")
    if par.schedule == "interleaved_1f1b":
        raise ConfigError(
            f"parallel.schedule=interleaved_1f1b runs {par.virtual_stages} stages per rank, but "
            f"parallel.pp_split={split} cuts one per rank; use parallel.schedule=1f1b or gpipe"
        )
