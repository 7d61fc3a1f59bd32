"""The parallel layouts' rules, one home each: degrees per world size, virtual stages,
the pipeline bubble and FSDP's communication volume. Pure; no torch."""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ParallelConfig

PIPELINE_LAYOUTS = ("pipeline", "dp_pp", "fsdp_pp")
TP_LAYOUTS = ("tp", "fsdp_tp")
FSDP_LAYOUTS = ("fsdp", "fsdp_tp", "fsdp_pp")


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


def fsdp_comm_factor(reshard_after_forward: bool) -> float:
    """Bytes FSDP moves per step relative to one all-reduce of the gradients: all-gather in
    forward + reduce-scatter (= one all-reduce), plus a second all-gather in backward when
    parameters were freed after forward (ZeRO-3)."""
    return 1.5 if reshard_after_forward else 1.0


def comm_factor(layout: str, reshard_after_forward: bool) -> float:
    """Data-parallel communication per step of `layout` in all-reduces of the gradients: FSDP's
    factor for the FSDP layouts, 1 for the rest."""
    return fsdp_comm_factor(reshard_after_forward) if layout in FSDP_LAYOUTS else 1.0


PIPELINE_LAYOUTS = ("pipeline", "dp_pp", "fsdp_pp")
TP_LAYOUTS = ("tp", "fsdp_tp")
FSDP_LAYOUTS = ("fsdp", "fsdp_tp", "fsdp_pp")


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
        key, degree = ("parallel.tp", par.tp) if layout == "fsdp_tp" else ("parallel.pp", par.pp)
        if degree is None or degree < 1:
            raise ConfigError(f"parallel.layout={layout} needs {key}=<degree ≥ 1>; set e.g. {key}=2")
        if world_size % degree:
            raise ConfigError(
                f"world size {world_size} is not a multiple of {key}={degree}; dp × tp × pp must equal the "
                f"world size: pick sizes that are multiples of {degree}"
            )
        dp = world_size // degree
        tp, pp = (degree, 1) if layout == "fsdp_tp" else (1, degree)
    if pp > 1 or layout in PIPELINE_LAYOUTS:
        _check_pipeline(cfg, pp)
    if tp > 1 or layout in TP_LAYOUTS:
        _check_tp(cfg, tp)
    return dp, tp, pp


def _check_pipeline(cfg: LauncherConfig, pp: int) -> None:
    """Stages split the layers evenly; every rank gets a microbatch; micro-batches split evenly."""
    par, model = cfg.parallel, cfg.model
    v = virtual_stages(par)
    stages = pp * v
    if v < 1:
        raise ConfigError(f"parallel.virtual_stages={v} must be a positive integer; set e.g. parallel.virtual_stages=2")
    if model.n_layers % stages:
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
    """Tensor parallel splits heads, sequence (sequence parallel) and vocabulary across ranks."""
    model = cfg.model
    for key, value in (("model.n_heads", model.n_heads), ("model.seq_len", model.seq_len),
                       ("model.vocab_size", model.vocab_size)):  # fmt: skip
        if model.arch == "mlp" and key == "model.n_heads":
            continue
        if value % tp:
            raise ConfigError(
                f"{key}={value} is not divisible by tp={tp}; tensor parallel splits it across ranks: "
                f"choose a tp that divides {value}"
            )
