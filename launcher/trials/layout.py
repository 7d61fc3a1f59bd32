"""The parallel layouts' per-size rules, read from each layout's row (launcher/layouts.py):
degrees per world size, virtual stages and the pipeline bubble, the checks that depend on the
size (what each layout communicates: launcher/perf/comm.py; size-independent checks:
launcher/config/validate_layout.py). Pure; no torch."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.compute.flops import ffn_width
from launcher.config.derived import derives_microbatches, pipeline_batch
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig, ParallelConfig
from launcher.config.validate_layout import check_byo_layout, set_degrees
from launcher.layouts import Degree, traits
from launcher.trials.cp_hsdp import check_cp, hsdp_shard


def virtual_stages(par: ParallelConfig) -> int:
    """Stages per pipeline rank (v): parallel.virtual_stages under interleaved_1f1b where the
    layout's virtual stages apply, else 1."""
    return par.virtual_stages if par.schedule == "interleaved_1f1b" and traits(par.layout).virtual_stages else 1


def pipeline_bubble(pp: int, microbatches: int, virtual: int = 1) -> float:
    """Theoretical bubble fraction b = (p−1) / (v·m + p−1) of a pipeline of `pp` ranks running
    `microbatches` per step (GPipe and 1F1B: v = 1; interleaving v chunks per rank divides the
    bubble by about v)."""
    if pp < 1 or microbatches < 1 or virtual < 1:
        raise ValueError(f"pipeline needs pp, microbatches, virtual_stages ≥ 1, got {pp}, {microbatches}, {virtual}")
    return (pp - 1) / (virtual * microbatches + pp - 1)


@dataclass(kw_only=True, frozen=True)
class Degrees:
    """A trial's degrees: world size = dp × cp × tp × pp."""

    dp: int
    """Data-parallel degree (replicas of the batch split)."""
    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline degree."""
    cp: int = 1
    """Context-parallel degree (ranks splitting each sequence)."""
    shard: int
    """FSDP shard group size: dp, or under hsdp parallel.shard (replicate = dp ÷ shard)."""

    @property
    def replicate(self) -> int:
        """HSDP replicas, all-reducing the shard across them: dp ÷ shard."""
        return self.dp // self.shard


def layout_degrees(cfg: LauncherConfig, world_size: int) -> tuple[int, int, int]:
    """(dp, tp, pp) of `cfg.parallel.layout` at `world_size` (trial_degrees has cp and shard too),
    with every impossibility as one ConfigError line carrying the numbers."""
    d = trial_degrees(cfg, world_size)
    return d.dp, d.tp, d.pp


def trial_degrees(cfg: LauncherConfig, world_size: int) -> Degrees:
    """The degrees of `cfg.parallel.layout` at `world_size`, with every impossibility as one
    ConfigError line carrying the numbers."""
    par = cfg.parallel
    layout, row = par.layout, traits(par.layout)
    tp, pp = set_degrees(par)
    cp = par.cp if row.cp == Degree.set else 1
    if world_size % (tp * pp * cp):
        raise ConfigError(
            f"world size {world_size} is not a multiple of {_product(par, tp, pp, cp)}; dp × "
            f"{'cp × ' if row.splits('cp') else ''}tp × pp must equal the world size: pick sizes that are "
            f"multiples of {tp * pp * cp}"
        )
    # One dimension (dp, or under no data parallelism tp or pp) takes what the set degrees leave.
    degree = {"dp": 1, "tp": tp, "pp": pp} | {row.follows_world: world_size // (tp * pp * cp)}
    dp, tp, pp = degree["dp"], degree["tp"], degree["pp"]
    if cfg.model._target_ is not None:
        check_byo_layout(cfg.model._target_, par)
        if row.byo_engine is None and not row.splits("cp"):  # cp's own message says why (check_cp)
            raise ConfigError(
                f"parallel.layout={layout} runs built-in models only; model._target_={cfg.model._target_!r} "
                "runs under parallel=fsdp or ddp"
            )
        if row.splits("pp"):
            _check_stage_count(par, world_size, pp)
    elif par.pp_split:
        raise ConfigError(
            f"parallel.pp_split={list(par.pp_split)} splits a `_target_` model; the built-in model "
            f"{cfg.model.name} splits its blocks evenly by itself: drop parallel.pp_split"
        )
    if pp > 1 or row.splits("pp"):
        _check_pipeline(pipeline_batch(cfg, dp), pp, _microbatches_source(cfg, dp))
    if (tp > 1 or row.splits("tp")) and cfg.model._target_ is None:
        _check_tp(cfg, tp)
    if row.splits("cp"):
        check_cp(cfg, cp, tp)
    return Degrees(dp=dp, tp=tp, pp=pp, cp=cp, shard=hsdp_shard(cfg, dp) if row.replicate != Degree.none else dp)


def _check_stage_count(par: ParallelConfig, world_size: int, pp: int) -> None:
    """One stage per pipeline rank: pp is the world size (pipeline) or parallel.pp (dp_pp)."""
    split, stages = list(par.pp_split), len(par.pp_split) + 1
    if pp == stages:
        return
    if traits(par.layout).pp == Degree.world:
        runs, other = f"the world size, {world_size}", f"measure world size {stages} (sweep.world_sizes=[{stages}])"
    else:
        runs, other = "parallel.pp", f"set parallel.pp={stages}"
    boundary = "boundary" if stages == 2 else "boundaries"
    names = f"list {pp - 1} module name{'s' if pp > 2 else ''} where a stage begins" if pp > 1 else "drop the split"
    raise ConfigError(
        f"parallel.pp_split={split} has {stages - 1} {boundary} = {stages} stages but parallel="
        f"{par.layout} runs pp={pp} ({runs}) pipeline ranks, one stage each; {names}, or {other}"
    )


def _product(par: ParallelConfig, tp: int, pp: int, cp: int = 1) -> str:
    """The degrees a world size must be a multiple of, as the user set them."""
    dims, value = traits(par.layout).set_dims, {"tp": tp, "pp": pp, "cp": cp}
    if len(dims) == 1:
        return f"parallel.{dims[0]}={value[dims[0]]}"
    product = " × ".join(str(value[d]) for d in dims)
    return f"{' × '.join(f'parallel.{d}' for d in dims)} = {product} = {tp * pp * cp}"


def _microbatches_source(cfg: LauncherConfig, dp: int) -> str:
    """Where a pipeline's micro-batch count comes from, for the messages of _check_pipeline."""
    if not derives_microbatches(cfg):
        return "parallel.microbatches"
    b = cfg.batch
    return f"batch.global_batch({b.global_batch}) ÷ (batch.micro({b.micro}) × batch.accum({b.accum}) × dp({dp}))"


def _check_pipeline(cfg: LauncherConfig, pp: int, source: str = "parallel.microbatches") -> None:
    """Stages split the layers evenly; every rank gets a microbatch; micro-batches split evenly.
    `cfg` is the trial's (pipeline_batch); `source` names where its micro-batch count came from."""
    par, model = cfg.parallel, cfg.model
    v = virtual_stages(par)
    stages = pp * v
    if v < 1:
        raise ConfigError(f"parallel.virtual_stages={v} must be a positive integer; set e.g. parallel.virtual_stages=2")
    if model._target_ is None and model.n_layers % stages:  # a `_target_` model's stages: its parallel.pp_split
        # pp is the world size under `pipeline`; a layout that sets it (dp_pp, fsdp_pp, …) takes parallel.pp.
        pp_from = "the world size" if traits(par.layout).pp == Degree.world else "parallel.pp"
        raise ConfigError(
            f"model.n_layers={model.n_layers} is not divisible by pipeline stages pp({pp}) × v({v}) = {stages}; "
            f"change model.n_layers, {pp_from} or parallel.virtual_stages"
        )
    plain = source == "parallel.microbatches"
    what = f"{source}={par.microbatches}" if plain else f"{source} = {par.microbatches} micro-batches"
    if par.microbatches < pp:
        fix = f"set parallel.microbatches={pp} or more" if plain else "lower batch.micro"
        raise ConfigError(f"{what} < pp={pp} pipeline ranks: a schedule needs at least one microbatch per rank; {fix}")
    rounds = max(1, par.microbatches // pp)  # torch's interleaved schedules run m in rounds of ~pp
    if par.schedule == "interleaved_1f1b" and par.microbatches % rounds:
        raise ConfigError(
            f"{what} is not a multiple of its {rounds} rounds of pp={pp} that "
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


def expert_degree(cfg: LauncherConfig, dp: int) -> int:
    """ep of `cfg.parallel.layout` (1 where it splits no experts) at data-parallel degree `dp`:
    borrowed from the dp ranks, so it must divide dp, and split the experts evenly."""
    par, m = cfg.parallel, cfg.model
    if not traits(par.layout).splits("ep"):
        return 1
    ep = par.ep or 1
    if dp % ep:
        raise ConfigError(
            f"parallel.ep={ep} does not divide dp={dp}: the expert-parallel groups are made of dp ranks; "
            f"pick sizes whose dp is a multiple of {ep}, or a parallel.ep dividing {dp}"
        )
    if m.n_experts % ep:
        raise ConfigError(
            f"model.n_experts={m.n_experts} is not divisible by parallel.ep={ep}: each rank of a group holds "
            f"n_experts ÷ ep experts; choose a parallel.ep dividing {m.n_experts}"
        )
    return ep
