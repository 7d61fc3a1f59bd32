"""`launcher plan`: predicted throughput, efficiency, $ and time per size, running nothing.

Two sources for the model:
- a measured sweep (`--from results/<sweep>`): the performance model calibrated on its trials
  predicts the same recipe on the same hardware at other sizes;
- topology presets (nothing measured): compute from FLOPs/token ÷ (peak × assumed MFU), links
  from `cluster.intra_link` / `cluster.inter_link`, the all-reduce fully exposed (no overlap
  assumed: a conservative step time).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from launcher.results.cost import add_cost, pricing_of
from launcher.results.policy import Recommendation, policy_of, recommend
from launcher.results.scaling import add_scaling
from launcher.config.compose import compose_config
from launcher.report.terminal import print_table
from launcher.config.derived import batch_math, ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.messages import RENAMED
from launcher.config.schema import LauncherConfig
from launcher.trials.folder import read_sweep_spec
from launcher.model.calibrate import fit_layouts, load_measured, shape_at
from launcher.model.flops import flops_per_token, param_counts
from launcher.model.links import LINKS
from launcher.model.presets import from_presets
from launcher.model.shapes import build_shape
from launcher.model.step import PerfModel, Shape
from launcher.model.summary import interval_phrase, residual_phrase
from launcher.trials.expand import expand
from launcher.trials.layout import layout_degrees, pipeline_bubble, virtual_stages

MAX_SIZES = 64


def parse_gpus(spec: str) -> list[int]:
    """`8..16384` (doubling), `8,16,24` (a list) or `64`."""
    try:
        if ".." in spec:
            lo_s, hi_s = spec.split("..", 1)
            lo, hi = int(lo_s), int(hi_s)
            if lo < 1 or hi < lo:
                raise ValueError
            sizes = []
            n = lo
            while n <= hi:
                sizes.append(n)
                n *= 2
        else:
            sizes = sorted({int(x) for x in spec.split(",")})
            if not sizes or sizes[0] < 1:
                raise ValueError
    except ValueError:
        raise ConfigError(f"--gpus {spec!r} is not a size range; write e.g. --gpus 8..16384 (doubling) or --gpus 8,16,24")
    if len(sizes) > MAX_SIZES:
        raise ConfigError(f"--gpus {spec!r} names {len(sizes)} sizes; at most {MAX_SIZES}, e.g. a doubling range 8..16384")
    return sizes


@dataclass(kw_only=True, frozen=True)
class Forecast:
    """What `launcher plan` prints: the predicted table, the pick, and where the model came from."""

    table: pd.DataFrame
    """Per size: predicted tokens/s with its interval, efficiency, cost; impossible sizes with the reason."""
    recommendation: Recommendation
    """The pick under the config's policy, on predicted figures."""
    source: str
    """Where the model came from, one line."""


def _shape_presets(cfg: LauncherConfig, n: int) -> tuple[Shape, int]:
    """The config's shape at `n` ranks and the nodes it takes; ConfigError when the layout cannot split n."""
    dp, tp, pp = layout_degrees(cfg, n)
    par = cfg.parallel
    rpn = ranks_per_node(cfg.cluster)
    total, _ = param_counts(cfg.model)
    shape = build_shape(
        world_size=n,
        ranks_per_node=rpn,
        tp=tp,
        pp=pp,
        batch=batch_math(cfg.batch, dp),
        # fp32 gradients; tp and pp leave each rank only its share of the parameters to all-reduce.
        grad_bytes=4 * total // (tp * pp),
        bubble=pipeline_bubble(pp, par.microbatches, virtual_stages(par)) if pp > 1 else 0.0,
        layout=par.layout,
        reshard_after_forward=par.reshard_after_forward,
    )
    return shape, math.ceil(n / rpn)


def _row(n: int, nodes: int | None, shape: Shape | None, model: PerfModel | None, seq: int, reason: str | None) -> dict:
    if shape is None or model is None:
        return {"world_size": n, "nodes": nodes, "status": "impossible", "reason": reason}
    p = model.predict(shape)
    thr = p.tokens_per_s(shape.global_batch, seq)
    low, high = p.tokens_per_s_interval(shape.global_batch, seq)
    return {
        "world_size": n, "nodes": nodes, "dp": shape.dp, "global_batch": shape.global_batch, "status": "completed",
        "tokens_per_s": thr, "tokens_per_s_interval": f"{low:,.0f}–{high:,.0f}", "tokens_per_s_per_device": thr / n,
        "step_time_median_s": p.step_s, "comm_share": p.comm_s / p.step_s if p.step_s else None, "reason": None,
    }  # fmt: skip


def from_presets_forecast(cfg: LauncherConfig, sizes: Sequence[int], *, assume_mfu: float) -> Forecast:
    """Every size predicted by the model built from presets: FLOPs ÷ (peak × assumed MFU), nominal links."""
    peak = cfg.cluster.peak_flops_per_device
    if peak is None:
        raise ConfigError(
            "launcher plan without a measured sweep needs the device's peak: set cluster.peak_flops_per_device "
            "(e.g. cluster=example_gpu_site), or pass --from results/<sweep-id>"
        )
    if not 0 < assume_mfu <= 1:
        raise ConfigError(f"--assume-mfu {assume_mfu} must be in (0, 1]; e.g. --assume-mfu 0.4")
    _, non_emb = param_counts(cfg.model)
    per_sample = flops_per_token(cfg.model, non_emb) * cfg.model.seq_len
    c = cfg.cluster
    model = from_presets(compute_s_per_sample=per_sample / (peak * assume_mfu), intra=LINKS[c.intra_link],
                         inter=LINKS[c.inter_link])  # fmt: skip
    rows = []
    for n in sizes:
        try:
            shape, nodes = _shape_presets(cfg, n)
            rows.append(_row(n, nodes, shape, model, cfg.model.seq_len, None))
        except ConfigError as exc:
            rows.append(_row(n, None, None, None, cfg.model.seq_len, str(exc)))
    source = (
        f"presets: {cfg.model.name} ({per_sample / cfg.model.seq_len:.3g} FLOPs/token), {c.device_name} at "
        f"{peak:.3g} FLOP/s × assumed MFU {assume_mfu:.2f}; {c.intra_link} in-node, {c.inter_link} between nodes, "
        f"{ranks_per_node(c)} devices per node; all-reduce not overlapped; interval ±{model.rel_sigma:.0%}"
    )
    return _finish(rows, cfg, source)


def from_sweep_forecast(sweep_dir: Path, cfg: LauncherConfig, sizes: Sequence[int]) -> Forecast:
    """Every size predicted by the model calibrated on the sweep's trials of its first variant's layout."""
    measured = load_measured(sweep_dir)
    if not measured:
        raise ConfigError(f"{str(sweep_dir)!r} has no completed trial to calibrate on; run the sweep (or collect it) first")
    variant = sorted({m.variant for m in measured})[0]
    mine = sorted((m for m in measured if m.variant == variant), key=lambda m: m.trial["world_size"])
    template = mine[-1]
    models = fit_layouts([m for m in measured if m.layout == template.layout], cfg.cluster.intra_link,
                         cfg.cluster.inter_link)  # fmt: skip
    model = models[template.layout]
    seq = template.config["model"]["seq_len"]
    rows = []
    for n in sizes:
        shape = shape_at(template, n)
        reason = None if shape else f"{template.layout} with tp×pp={template.trial['tp'] * template.trial['pp']} cannot split {n}"
        nodes = 1 if template.local else math.ceil(n / template.ranks_per_node)
        rows.append(_row(n, nodes, shape, model if shape else None, seq, reason))
    inter = model.inter
    source = (
        f"calibrated on {model.n_observations} trials of {sweep_dir.name}"
        + (f" ({variant})" if variant else "")
        + f": {model.compute_s_per_sample * 1e3:.3g} ms/sample, inter-node {inter.bandwidth_gbps:.3g} GB/s "
        f"α {inter.latency_s * 1e6:.3g} µs ({model.source('inter')}), {model.exposed_comm:.0%} of the all-reduce "
        f"exposed, {residual_phrase(model)}; {interval_phrase(model)}; "
        + ("all ranks on this machine, as measured" if template.local else f"{template.ranks_per_node} ranks per node as measured")
    )
    return _finish(rows, cfg, source)


def _finish(rows: list[dict], cfg: LauncherConfig, source: str) -> Forecast:
    df = pd.DataFrame(rows)
    df["scaling"] = "weak" if cfg.batch.global_batch is None else "strong"
    if "tokens_per_s" not in df:
        df["tokens_per_s"] = math.nan
    df = add_cost(add_scaling(df), pricing_of(cfg))
    rec = recommend(df, policy_of(cfg), unit="GPU")
    df["status"] = df["status"].replace("completed", "predicted")  # judged like measured rows, shown as what they are
    return Forecast(table=df, recommendation=rec, source=source)


def sweep_overrides(sweep_dir: Path, user: Sequence[str]) -> list[str]:
    """The measured sweep's own overrides (its first combination) with the user's pricing and
    policy overrides after them; anything else would not be the recipe that was measured."""
    for o in user:
        key = o.split("=", 1)[0].lstrip("+~")
        if not (key.startswith("sweep.") or key in ("cluster.usd_per_device_hour", "cluster.spot_discount")):
            raise ConfigError(
                f"--from plans the measured recipe on the measured hardware, so {o!r} cannot apply; only sweep.* "
                "(policy, threshold, budgets) and cluster.usd_per_device_hour / cluster.spot_discount can"
            )
    spec = read_sweep_spec(sweep_dir)
    if spec.missing:
        raise ConfigError(f"--from {str(sweep_dir)!r} is not a sweep folder (no sweep.json); pass results/<sweep-id>")
    if not spec.ok:
        raise ConfigError(f"--from {str(sweep_dir)!r}: {spec.reason}; its overrides cannot be read, so nothing can be planned")
    return [*map(_current_spelling, expand(spec.doc["overrides"])[0].overrides), *user]


def _current_spelling(override: str) -> str:
    """A sweep measured before a key was renamed still plans: its stored override is respelled."""
    key, sep, value = override.partition("=")
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    new = RENAMED.get(key.lstrip("+~"))
    return f"{prefix}{new}{sep}{value}" if new else override


def main(args: argparse.Namespace) -> int:
    """`launcher plan`: predict sizes from presets or a measured sweep; nothing runs."""
    sizes = parse_gpus(args.gpus)
    if args.from_sweep:
        sweep_dir = Path(args.from_sweep)
        cfg = compose_config(sweep_overrides(sweep_dir, args.overrides), args.recipes)
        result = from_sweep_forecast(sweep_dir, cfg, sizes)
    else:
        cfg = compose_config(args.overrides, args.recipes)
        result = from_presets_forecast(cfg, sizes, assume_mfu=args.assume_mfu)
    print_table(result.table.dropna(axis=1, how="all"), result.recommendation, unit="GPU", everything=None,
                title=f"plan: {cfg.model.name}, {cfg.parallel.layout}, {cfg.cluster.name} (predicted; nothing ran)",
                footer=f"model: {result.source}")  # fmt: skip
    return 0 if result.recommendation.world_size is not None else 1
