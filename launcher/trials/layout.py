"""The parallel layouts' rules, one home each: degrees per world size, virtual stages and
the pipeline bubble (what each layout communicates: launcher/perf/comm.py). Pure; no torch."""

from __future__ import annotations

from launcher.compute.flops import ffn_width
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ParallelConfig

PIPELINE_LAYOUTS = ("pipeline", "dp_pp", "fsdp_pp", "fsdp_tp_pp")
TP_LAYOUTS = ("tp", "fsdp_tp", "fsdp_tp_pp")
FSDP_LAYOUTS = ("fsdp", "fsdp_tp", "fsdp_pp", "fsdp_tp_pp")
SET_DEGREE_LAYOUTS = ("dp_pp", "fsdp_tp", "fsdp_pp", "fsdp_tp_pp")  # the others' degrees follow the world size


def virtual_stages(par: ParallelConfig) -> int:
    """Stages per pipeline rank (v): parallel.virtual_stages under interleaved_1f1b, else 1."""
    return par.virtual_stages if par.schedule == "interleaved_1f1b" else 1


def pipeline_bubble(pp: int, microbatches: int, virtual: int = 1) -> float:
    """Theoretical bubble fraction b = (p−1) / (v·m + p−1) of a pipeline of `pp` ranks running
    `microbatches` per step (GPipe and 1F1B: v = 1; interleaving v chunks per rank divides the
    bubble by about v)."""
    if pp < 1 or microbatches < 1 or virtual < 1:
        raise ValueError(f"pipeline needs pp, microbatches, virtual_stages ≥ 1, got {pp}, {microbatches}, {virtual}")
    return (pp - 1) / (virtual * microbatches + pp - 1)


def layout_degrees(cfg: LauncherConfig, world_size: int) -> tuple[int, int, int]:
    """(dp, tp, pp) of `cfg.parallel.layout` at `world_size`, with every impossibility as one
    ConfigError line carrying the numbers."""
    par = cfg.parallel
    layout = par.layout
    if layout in ("ddp", "fsdp"):
        dp, tp, pp = world_size, 1, 1
    elif layout == "pipeline":
        dp, tp, pp = 1, 1, world_size
    elif layout == "tp":
        dp, tp, pp = 1, world_size, 1
    else:
        tp, pp = set_degrees(par)
        if world_size % (tp * pp):
            raise ConfigError(
                f"world size {world_size} is not a multiple of {_product(layout, tp, pp)}; dp × tp × pp must "
                f"equal the world size: pick sizes that are multiples of {tp * pp}"
            )
        dp = world_size // (tp * pp)
    if cfg.model._target_ is not None:
        check_byo_layout(cfg.model._target_, par)
        if layout in PIPELINE_LAYOUTS:
            _check_stage_count(par, world_size, pp)
    elif par.pp_split:
        raise ConfigError(
            f"parallel.pp_split={list(par.pp_split)} splits a `_target_` model; the built-in model "
            f"{cfg.model.name} splits its blocks evenly by itself: drop parallel.pp_split"
        )
    if pp > 1 or layout in PIPELINE_LAYOUTS:
        _check_pipeline(cfg, pp)
    if (tp > 1 or layout in TP_LAYOUTS) and cfg.model._target_ is None:
        _check_tp(cfg, tp)
    return dp, tp, pp


def set_degrees(par: ParallelConfig) -> tuple[int, int]:
    """(tp, pp) of a layout whose degrees the config sets (fsdp_tp: tp; dp_pp, fsdp_pp: pp;
    fsdp_tp_pp: both), 1 for a dim the layout does not split (and (1, 1) for the layouts whose
    degrees follow the world size); a ConfigError naming the ones missing. Size-independent,
    so config validation calls it too."""
    if par.layout not in SET_DEGREE_LAYOUTS:
        return 1, 1
    keys = [k for k, layouts in (("tp", TP_LAYOUTS), ("pp", PIPELINE_LAYOUTS)) if par.layout in layouts]
    missing = [k for k in keys if getattr(par, k) is None or getattr(par, k) < 1]
    if missing:
        needs = " and ".join(f"parallel.{k}=<degree ≥ 1>" for k in missing)
        example = " ".join(f"parallel.{k}=2" for k in missing)
        raise ConfigError(f"parallel.layout={par.layout} needs {needs}; set e.g. {example}")
    return (par.tp if "tp" in keys else 1), (par.pp if "pp" in keys else 1)


def check_byo_layout(target: str, par: ParallelConfig) -> None:
    """A `_target_` model runs under ddp and fsdp: the launcher cannot cut an arbitrary module
    into pipeline stages or tensor-parallel pieces itself: tp takes the recipe's plan
    (parallel.tp_plan), pipeline and dp_pp its split (parallel.pp_split), with gpipe or 1f1b."""
    _check_byo_split(target, par)
    if par.layout in TP_LAYOUTS and not (par.layout == "tp" and par.tp_plan):
        why = (
            "only layout tp takes your plan"
            if par.tp_plan
            else "give a TP plan, parallel.tp_plan={fc1: colwise, fc2: rowwise}"
        )
        raise ConfigError(
            f"parallel.layout={par.layout} cannot split model._target_={target!r} across tensor-parallel "
            f"ranks: {why}; or use parallel=ddp or parallel=fsdp"
        )
    bad = {name: style for name, style in par.tp_plan.items() if style not in ("colwise", "rowwise")}
    if bad:
        name, style = next(iter(bad.items()))
        raise ConfigError(
            f"parallel.tp_plan.{name}={style!r} must be colwise or rowwise (torch's ColwiseParallel, RowwiseParallel)"
        )


BYO_PIPELINE_LAYOUTS = ("pipeline", "dp_pp")
"""The pipeline layouts a `_target_` model's split runs under (engines/byo_pipeline.py)."""


def _check_byo_split(target: str, par: ParallelConfig) -> None:
    """parallel.pp_split: given exactly where a pipeline layout needs it, one stage per rank."""
    split = list(par.pp_split)
    if par.layout in PIPELINE_LAYOUTS and par.layout not in BYO_PIPELINE_LAYOUTS:
        raise ConfigError(
            f"parallel.layout={par.layout} cannot split model._target_={target!r}: a split by module name "
            "(parallel.pp_split) runs under parallel=pipeline or parallel=dp_pp; or use parallel=fsdp"
        )
    if par.layout in PIPELINE_LAYOUTS and not split:
        raise ConfigError(
            f"parallel.layout={par.layout} cannot split model._target_={target!r} into pipeline stages by "
            "itself: give the module names where a stage begins, e.g. parallel.pp_split=[blocks.2]; "
            "or use parallel=ddp or parallel=fsdp"
        )
    if split and par.layout not in PIPELINE_LAYOUTS:
        raise ConfigError(
            f"parallel.pp_split={split} cuts pipeline stages, which parallel.layout={par.layout} has none "
            "of; use parallel=pipeline or parallel=dp_pp, or drop parallel.pp_split"
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


def _check_stage_count(par: ParallelConfig, world_size: int, pp: int) -> None:
    """One stage per pipeline rank: pipeline's pp is the world size, dp_pp's parallel.pp."""
    split, stages = list(par.pp_split), len(par.pp_split) + 1
    if pp == stages:
        return
    if par.layout == "pipeline":
        runs, other = f"the world size, {world_size}", f"measure world size {stages} (sweep.world_sizes=[{stages}])"
    else:
        runs, other = "parallel.pp", f"set parallel.pp={stages}"
    boundary = "boundary" if stages == 2 else "boundaries"
    names = f"list {pp - 1} module name{'s' if pp > 2 else ''} where a stage begins" if pp > 1 else "drop the split"
    raise ConfigError(
        f"parallel.pp_split={split} has {stages - 1} {boundary} = {stages} stages but parallel="
        f"{par.layout} runs pp={pp} ({runs}) pipeline ranks, one stage each; {names}, or {other}"
    )


def _product(layout: str, tp: int, pp: int) -> str:
    """The degrees a world size must be a multiple of, as the user set them."""
    if layout in TP_LAYOUTS and layout in PIPELINE_LAYOUTS:
        return f"parallel.tp × parallel.pp = {tp} × {pp} = {tp * pp}"
    return f"parallel.tp={tp}" if layout in TP_LAYOUTS else f"parallel.pp={pp}"


def _check_pipeline(cfg: LauncherConfig, pp: int) -> None:
    """Stages split the layers evenly; every rank gets a microbatch; micro-batches split evenly."""
    par, model = cfg.parallel, cfg.model
    v = virtual_stages(par)
    stages = pp * v
    if v < 1:
        raise ConfigError(f"parallel.virtual_stages={v} must be a positive integer; set e.g. parallel.virtual_stages=2")
    if model._target_ is None and model.n_layers % stages:  # a `_target_` model's stages: its parallel.pp_split
        raise ConfigError(
            f"model.n_layers={model.n_layers} is not divisible by pipeline stages pp({pp}) × v({v}) = {stages}; "
            "change model.n_layers, the world size or parallel.virtual_stages"
        )
    if par.microbatches < pp:
        raise ConfigError(
            f"parallel.microbatches={par.microbatches} < pp={pp} pipeline ranks: a schedule needs at least one "
            f"microbatch per rank; set parallel.microbatches={pp} or more"
        )
    rounds = max(1, par.microbatches // pp)  # torch's interleaved schedules run m in rounds of ~pp
    if par.schedule == "interleaved_1f1b" and par.microbatches % rounds:
        raise ConfigError(
            f"parallel.microbatches={par.microbatches} is not a multiple of its {rounds} rounds of pp={pp} that "
            f"interleaved_1f1b runs; use a multiple of pp, e.g. parallel.microbatches={rounds * pp}"
        )
    if cfg.batch.micro % par.microbatches:
        raise ConfigError(
            f"batch.micro={cfg.batch.micro} is not divisible by parallel.microbatches={par.microbatches}; each "
            "micro-batch is split into that many pipeline microbatches"
        )


def _check_tp(cfg: LauncherConfig, tp: int) -> None:
    """Tensor parallel splits heads (query and, under grouped-query attention, key/value heads),
    the feed-forward's hidden units, the sequence (sequence parallel) and the vocabulary."""
    model = cfg.model
    split = [("model.seq_len", model.seq_len), ("model.vocab_size", model.vocab_size)]
    if model.arch != "mlp":
        split.insert(0, ("model.n_heads", model.n_heads))
    if model.arch == "llama" and model.n_kv_heads is not None:  # gpt ignores n_kv_heads
        split.insert(1, ("model.n_kv_heads", model.n_kv_heads))
    ffn_key = (
        "model.ffn_hidden"
        if model.ffn_hidden
        else (f"the ffn width model.ffn_mult({model.ffn_mult}) × model.d_model({model.d_model})")
    )
    split.append((ffn_key, ffn_width(model)))
    for key, value in split:
        if value % tp:
            raise ConfigError(
                f"{key}={value} is not divisible by tp={tp}; tensor parallel splits it across ranks: "
                f"choose a tp that divides {value}"
            )
