"""What `launcher plan` predicts, one row per size, and the file `--output` writes.

Two sources for the model:
- a measured sweep (`from_sweep_forecast`): the performance model calibrated on its trials
  predicts the same recipe on the same hardware at other sizes;
- topology presets (`from_presets_forecast`, nothing measured): compute from the hardware FLOPs
  per token (recompute counted) ÷ (peak × MFU), the MFU and the interval fitted on published runs
  (launcher/perf/preset_fit.json), the links from `cluster.*_link`.
A size the recipe cannot run is `impossible` with the reason, by the rule the sweep applies.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from launcher.compute.flops import executed_flops_per_token, flops_per_token, hardware_flops_per_token, param_counts
from launcher.compute.fp8 import precision_peak
from launcher.compute.peaks import PeakChoice, math_dtype, resolve_precision
from launcher.compute.power import clock_share
from launcher.config.derived import ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_text
from launcher.layouts import layout_names, traits
from launcher.perf import preset_fit, site_profile
from launcher.perf.calibrate import calibration, fit_layouts, shape_at
from launcher.perf.compute_term import shaped_mfu
from launcher.perf.links import LINKS
from launcher.perf.memory import GIB
from launcher.perf.memory_limit import Limit, limit_of, planned_bytes
from launcher.perf.notes import plan_words, tight
from launcher.perf.presets import from_presets
from launcher.perf.shapes import planned_device, shape_for
from launcher.perf.step import PerfModel, Shape
from launcher.perf.summary import interval_phrase, no_dof_line, residual_phrase
from launcher.perf.terms import term_shares
from launcher.results.cost import add_cost, pricing_of
from launcher.results.policy import Recommendation, policy_of, recommend
from launcher.results.scaling import add_scaling
from launcher.trials.spec import make_trial

OUTPUT_FIRST = (
    "gpus",
    "nodes",
    "status",
    "tokens_per_s",
    "tokens_per_s_lo",
    "tokens_per_s_hi",
    "tokens_per_s_per_device",
    "efficiency",
    "mfu",
    "hfu",
    "reason",
)
"""The columns `--output` writes first, in this order (the rest of the table follows)."""
OUTPUT_SUFFIXES = (".csv", ".parquet")
OOM = "oom (predicted)"
"""The status of a size whose memory estimate exceeds the device's (memory_limit.py)."""


@dataclass(kw_only=True, frozen=True)
class Forecast:
    """What `launcher plan` prints: the predicted table, the pick, and where the model came from."""

    table: pd.DataFrame
    """Per size: predicted tokens/s with its interval, efficiency, MFU, cost; impossible sizes with the reason."""
    recommendation: Recommendation
    """The pick under the config's policy, on predicted figures."""
    source: str
    """Where the model came from, one line."""
    notes: tuple[str, ...] = ()
    """What the model's figures need said beside them: a fit nothing tested, trials left out of it."""


@dataclass(kw_only=True, frozen=True)
class Work:
    """FLOPs per token of the recipe, and the peak they are measured against."""

    model_flops: float
    """Training FLOPs per token (6N + attention): what MFU counts."""
    hardware_flops: float
    """The same plus what activation checkpointing recomputes: what HFU counts."""
    executed_flops: float
    """The hardware FLOPs with the causal attention core at what its kernel runs: what the step
    time is priced at (compute/flops.py's executed_flops_per_token)."""
    peak: PeakChoice
    """Peak FLOP/s of one device at the recipe's math precision (explicit, else the peak table)."""
    dtype: str
    """The math precision the peak is for."""
    tokens_per_sample: int
    """Tokens one sample counts (model.seq_len; a `_target_` model's first integer input, or 1)."""
    numel: int | None = None
    """Parameters of a `_target_` model, counted on the built module (None: from the config)."""


def work_of(cfg: LauncherConfig) -> Work:
    """The recipe's FLOPs per token and the peak of its device at its precision."""
    _, non_emb = param_counts(cfg.model)
    device = planned_device(cfg)
    dtype = math_dtype(resolve_precision(cfg.precision, device), tf32=device == "cuda")
    c = cfg.cluster
    peak = precision_peak(device_name=c.device_name, dtype=dtype, explicit=c.peak_flops_per_device, model=cfg.model)
    if cfg.model._target_ is not None:
        return _target_work(cfg, peak, dtype)
    return Work(
        model_flops=flops_per_token(cfg.model, non_emb),
        hardware_flops=hardware_flops_per_token(cfg.model, non_emb),
        executed_flops=executed_flops_per_token(cfg.model, non_emb),
        peak=peak,
        dtype=dtype,
        tokens_per_sample=cfg.model.seq_len,
    )


def _target_work(cfg: LauncherConfig, peak: PeakChoice, dtype: str) -> Work:
    """A `_target_` model has no formula: checked as a sweep checks it, its FLOPs counted by
    torch's counter and its parameters on the module, both on the meta device."""
    import torch  # lazy: torch and the user's package are needed for `_target_` models only

    from launcher.train.models.byo import build_target, counted_flops_per_token, tokens_per_sample  # lazy: as torch
    from launcher.train.models.byo_check import check_targets  # lazy: as torch

    check_targets([cfg])
    flops = counted_flops_per_token(cfg.model, cfg.batch.micro)
    with torch.device("meta"):
        numel = sum(p.numel() for p in build_target(cfg.model).parameters())
    return Work(
        model_flops=flops,
        hardware_flops=flops,
        executed_flops=flops,  # torch's counter does not say whether the model masks: the whole count runs
        peak=peak,
        dtype=dtype,
        tokens_per_sample=tokens_per_sample(cfg.model),
        numel=numel,
    )


def check_output(path: str | None) -> None:
    """Before anything is computed: an --output the table cannot be written as is refused."""
    if path is not None and Path(path).suffix.lower() not in OUTPUT_SUFFIXES:
        raise ConfigError(
            f"--output {path!r} must end in .csv or .parquet (the format follows the suffix); e.g. --output plan.csv"
        )


def write_output(table: pd.DataFrame, path: str) -> None:
    """The table as CSV or parquet by suffix, `world_size` named `gpus`, OUTPUT_FIRST first."""
    df = table.rename(columns={"world_size": "gpus"})
    for col in OUTPUT_FIRST:
        if col not in df:
            df[col] = math.nan
    df = df[[*OUTPUT_FIRST, *(c for c in df.columns if c not in OUTPUT_FIRST)]]
    p = Path(path)
    if p.suffix.lower() == ".csv":
        atomic_write_text(p, df.to_csv(index=False))
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(p)


def _row(
    n: int,
    nodes: int | None,
    shape: Shape | None,
    model: PerfModel | None,
    seq: int,
    reason: str | None,
    interval_log: float | None = None,
    memory: float | None = None,
    limit: Limit | None = None,
) -> dict:
    """One size's predicted figures; the interval × / ÷ exp(interval_log) where given (presets),
    else the model's own (calibrated on a sweep). `memory`: the neediest rank's estimated bytes;
    over `limit` the size is a predicted oom, with the estimate and no throughput."""
    if shape is None or model is None:
        return {"world_size": n, "nodes": nodes, "status": "impossible", "reason": reason}
    gib = None if memory is None else memory / GIB
    if memory is not None and limit is not None and not limit.fits(memory):
        why = f"predicted: needs ~{gib:.1f} GiB per rank > {limit.usable_bytes / GIB:.1f} GiB usable (see memory:)"
        return {"world_size": n, "nodes": nodes, "dp": shape.dp, "status": "oom", "memory_gib": gib, "reason": why}
    p = model.predict(shape)
    thr = p.tokens_per_s(shape.global_batch, seq)
    low, high = p.tokens_per_s_interval(shape.global_batch, seq)
    if interval_log is not None:
        low, high = thr * math.exp(-interval_log), thr * math.exp(interval_log)
    return {
        "world_size": n,
        "nodes": nodes,
        "dp": shape.dp,
        "global_batch": shape.global_batch,
        "status": "completed",
        "tokens_per_s": thr,
        "model_lo": low,
        "model_hi": high,
        "tokens_per_s_per_device": thr / n,
        "step_time_median_s": p.step_s,
        "comm_share": p.comm_s / p.step_s if p.step_s else None,
        "memory_gib": gib,
        **term_shares(p),
        "reason": None,
    }


def _assumed_mfu(cfg: LauncherConfig, work: Work, fit: preset_fit.PresetFit, given: float | None) -> tuple[float, str]:
    """The MFU the presets assume and where it comes from: the user's, else the replay's fit."""
    if given is None and not work.peak.fits_device:
        # A peak other than the named device's own (a typo, a tuned clock, another GPU) says the name may
        # not be the device: that device's fitted MFU is no longer known to apply, so no family is assumed.
        given = fit.mfu_any_device
        said = (
            f"fitted on {fit.rows} published runs of every device; cluster.peak_flops_per_device is not "
            f"{cfg.cluster.device_name}'s, so no device's own fit applies"
        )
    elif given is None:  # the recipe's ops where a curve applies; else the one constant of the device
        shaped = shaped_mfu(
            cfg, executed_flops=work.executed_flops, peak_flops=work.peak.flops, dtype=work.dtype, fit=fit
        )
        given, said = shaped or fit.mfu_for(cfg.cluster.device_name, work.dtype)
    else:
        said = "--assume-mfu"
    if not 0 < given <= 1:
        raise ConfigError(f"--assume-mfu {given} must be in (0, 1]; e.g. --assume-mfu 0.4")
    return given, said


def fp8_mfu_ratio(cfg: LauncherConfig, assume_mfu: float | None) -> tuple[float, str] | None:
    """An fp8 recipe's presets MFU ÷ what the same recipe at bf16 is assumed (None unless fp8), and why:
    below 1 where published fp8 runs of the device were fitted, 1 where one MFU serves both."""
    if cfg.precision != "fp8":
        return None
    fit = preset_fit.load()
    bf16 = dataclasses.replace(cfg, precision="bf16")
    mine, said = _assumed_mfu(cfg, work_of(cfg), fit, assume_mfu)
    theirs, _ = _assumed_mfu(bf16, work_of(bf16), fit, assume_mfu)
    return mine / theirs, said


def preset_model(cfg: LauncherConfig, work: Work, mfu: float, fit: preset_fit.PresetFit) -> PerfModel:
    """The step-time model nothing was measured for: compute from the executed FLOPs per sample at
    `mfu` of the peak, the config's links, the replay's interval."""
    c = cfg.cluster
    per_sample = work.executed_flops * work.tokens_per_sample
    profile = site_profile.for_plan(cfg)  # cluster.profile: measured compute and links in place of presets
    share = clock_share(c.device_name, c.power_limit_w)  # a power limit's clock (a profile ran at the site's own)
    rate = work.peak.flops * mfu * share if profile is None else site_profile.compute_rate(cfg, profile, work.dtype)
    intra, inter = site_profile.links(profile, LINKS[c.intra_link], LINKS[c.inter_link])
    return from_presets(
        compute_s_per_sample=per_sample / rate, intra=intra, inter=inter, rel_uncertainty=fit.rel_half_width
    )


def from_presets_forecast(
    cfg: LauncherConfig, sizes: Sequence[int], *, assume_mfu: float | None, check_memory: bool = True
) -> Forecast:
    """Every size predicted by the model built from presets: executed FLOPs ÷ (peak × MFU), the
    MFU fitted on published runs unless `assume_mfu` says otherwise, nominal links. A size whose
    memory estimate exceeds the device is `oom (predicted)`, unless `check_memory` is False (a
    replay of runs that did run: their throughput is what is compared)."""
    # A `_target_` model's parameters are counted on its whole module; --from a sweep models any layout.
    if cfg.model._target_ is not None and not traits(cfg.parallel.layout).whole_model:
        whole = " or ".join(layout_names(lambda row: row.whole_model))
        raise ConfigError(
            f"launcher plan on presets models a `_target_` model under {whole} only, not "
            f"parallel.layout={cfg.parallel.layout}; measure it with a sweep and plan --from that"
        )
    work = work_of(cfg)
    if work.peak.flops is None and not cfg.cluster.profile:  # a profile prices compute itself
        raise ConfigError(
            "launcher plan without a measured sweep needs the device's peak: "
            f"cluster.device_name={cfg.cluster.device_name!r} "
            "is not in the peak table, so set cluster.peak_flops_per_device (e.g. cluster=example_gpu_site), "
            "or pass --from results/<sweep-id>"
        )
    fit = preset_fit.load()
    mfu, said = _assumed_mfu(cfg, work, fit, assume_mfu)
    model = preset_model(cfg, work, mfu, fit)
    c, rpn = cfg.cluster, ranks_per_node(cfg.cluster)
    rows = []
    limit = limit_of(cfg) if check_memory else None
    for n in sizes:
        try:
            shape = shape_for(cfg, n, numel=work.numel)
            need = planned_bytes(cfg, make_trial(cfg, index=0, world_size=n, steps=1, warmup_steps=0))
            rows.append(
                _row(n, math.ceil(n / rpn), shape, model, work.tokens_per_sample, None, fit.interval_log, need, limit)
            )
        except ConfigError as exc:
            rows.append(_row(n, None, None, None, work.tokens_per_sample, str(exc)))
    source = (
        f"presets: {cfg.model.name} ({work.model_flops:.3g} FLOPs/token{' counted' if work.numel else ''}, "
        f"{work.hardware_flops:.3g} with recompute, {work.executed_flops:.3g} executed: causal attention halved), "
        + (
            f"{c.device_name} at {work.peak.flops:.3g} FLOP/s ({work.dtype}{_fp8_split(work)}) × MFU {mfu:.2f} "
            f"({said}); {c.intra_link} in-node, {c.inter_link}"
            if not c.profile
            else site_profile.phrase(cfg, work.dtype)
        )
        + f" × {c.nics_per_node or 1} NIC(s) between nodes, {rpn} devices per node"
        f"{f', NVLink domains of {c.nvlink_domain} GPUs' if (c.nvlink_domain or 0) > rpn else ''}; "
        f"interval ×/÷ {math.exp(fit.interval_log):.2f}: the "
        f"{fit.quantile:.0%} quantile of the published-runs replay's leave-one-source-out errors ({fit.rows} runs, "
        f"{fit.sources} sources), not a constant"
    )
    return _finish(rows, cfg, source, work)


def _fp8_split(work: Work) -> str:
    """fp8: which FLOPs run at the fp8 peak and which at bf16 (compute/fp8.py's source line)."""
    if work.dtype != "fp8" or not work.peak.source or work.peak.source == "cluster.peak_flops_per_device":
        return ""
    return f": {work.peak.source.split(':')[0]}"


def from_sweep_forecast(sweep_dir: Path, cfg: LauncherConfig, sizes: Sequence[int]) -> Forecast:
    """Every size the sweep's recipe can run predicted by the model calibrated on the sweep's
    trials of its first variant's layout; a size the sweep itself would refuse is impossible."""
    found = calibration(sweep_dir)
    damaged = f"left out of the fit (damaged files): {'; '.join(found.unreadable)}" if found.unreadable else None
    if found.refusal:
        raise ConfigError(f"--from {str(sweep_dir)!r} {found.refusal}" + (f"; {damaged}" if damaged else ""))
    measured = found.measured
    variant = sorted({m.variant for m in measured})[0]
    mine = sorted((m for m in measured if m.variant == variant), key=lambda m: m.trial["world_size"])
    template = mine[-1]
    models = fit_layouts(
        [m for m in measured if m.layout == template.layout], cfg.cluster.intra_link, cfg.cluster.inter_link
    )
    model = models[template.layout]
    seq = template.tokens_per_sample
    rows = []
    limit = limit_of(cfg)
    for n in sizes:
        nodes = 1 if template.local else math.ceil(n / template.ranks_per_node)
        try:
            trial = make_trial(cfg, index=0, world_size=n, steps=1, warmup_steps=0)  # the sweep's own rule
        except ConfigError as exc:
            rows.append(_row(n, None, None, None, seq, str(exc)))
            continue
        shape = shape_at(template, n)
        reason = (
            None
            if shape
            else f"{template.layout} with tp×pp={template.trial['tp'] * template.trial['pp']} cannot split {n}"
        )
        need = planned_bytes(cfg, trial)
        rows.append(_row(n, nodes, shape, model if shape else None, seq, reason, None, need, limit))
    inter = model.inter
    source = (
        f"calibrated on {model.n_observations} trials of {sweep_dir.name}"
        + (f" ({variant})" if variant else "")
        + f": {model.compute_s_per_sample * 1e3:.3g} ms/sample, inter-node {inter.bandwidth_gbps:.3g} GB/s "
        f"α {inter.latency_s * 1e6:.3g} µs ({model.source('inter')}), {model.exposed_comm:.0%} of the all-reduce "
        f"exposed, {residual_phrase(model)}; {interval_phrase(model)}; "
        + (
            "all ranks on this machine, as measured"
            if template.local
            else f"{template.ranks_per_node} ranks per node as measured"
        )
    )
    notes = tuple(line for line in (no_dof_line(model), damaged) if line)
    return _finish(rows, cfg, source, work_of(cfg), notes)


def _finish(rows: list[dict], cfg: LauncherConfig, source: str, work: Work, notes: tuple[str, ...] = ()) -> Forecast:
    df = pd.DataFrame(rows)
    df["scaling"] = "weak" if cfg.batch.global_batch is None else "strong"
    for col in ("tokens_per_s", "tokens_per_s_per_device", "model_lo", "model_hi"):
        if col not in df:
            df[col] = math.nan
    df = add_cost(add_scaling(df), pricing_of(cfg))
    # The interval is the model's, not a bootstrap over repeats (a prediction has none).
    df["tokens_per_s_lo"], df["tokens_per_s_hi"] = df.pop("model_lo"), df.pop("model_hi")
    peak = work.peak.flops
    df["mfu"] = df["tokens_per_s_per_device"] * work.model_flops / peak if peak else math.nan
    df["hfu"] = df["tokens_per_s_per_device"] * work.hardware_flops / peak if peak else math.nan
    df["memory_tight"] = tight(df, limit_of(cfg))
    rec = plan_words(recommend(df, policy_of(cfg), unit="GPU"), df, cfg)
    # Judged like measured rows, shown as what they are.
    df["status"] = df["status"].replace({"completed": "predicted", "oom": OOM})
    return Forecast(table=df, recommendation=rec, source=source, notes=notes)


def joined(planned: Sequence[tuple[str, tuple[LauncherConfig, Forecast]]], cfg: LauncherConfig) -> Forecast:
    """Several combinations' forecasts (comma overrides) as one table with a `variant` column,
    the pick made over all of them by `cfg`'s policy, as a sweep's table is judged."""
    df = pd.concat([fc.table.assign(variant=v) for v, (_, fc) in planned], ignore_index=True)
    judged = df.assign(status=df["status"].replace({"predicted": "completed", OOM: "oom"}))
    rec = plan_words(recommend(judged, policy_of(cfg), unit="GPU"), judged, cfg)
    return Forecast(table=df, recommendation=rec, source="; ".join(fc.source for _, (_, fc) in planned))
