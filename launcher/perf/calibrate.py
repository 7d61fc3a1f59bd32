"""Measured trials ⇄ the performance model: observations from a sweep folder, the fit, and
predictions at sizes that were not measured (same recipe, other world sizes).

One model per parallel layout: the variants of a layout (accumulation, micro-batch, …) share
the compute rate and links, so an accumulation sweep calibrates them together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from launcher.config.cluster_traits import recorded_traits
from launcher.config.derived import BatchMath
from launcher.config.schema import ModelConfig
from launcher.layouts import DataParallel, Degree, traits
from launcher.perf.fit import fit
from launcher.perf.links import LINKS
from launcher.perf.shapes import LayoutSpec, layout_shape
from launcher.perf.step import Observation, PerfModel, Shape
from launcher.trials.folder import read_record, read_trial, trial_dirs
from launcher.trials.layout import pipeline_bubble


@dataclass(kw_only=True, frozen=True)
class Measured:
    """One completed trial as the model sees it."""

    trial: dict[str, Any]
    """The trial spec (trial.json's `trial`)."""
    metrics: dict[str, Any]
    """The payload record's metrics."""
    config: dict[str, Any]
    """The resolved config the trial ran."""
    wall_s: float
    """How long the trial held its devices, seconds."""

    @property
    def variant(self) -> str:
        return self.trial.get("variant") or ""

    @property
    def layout(self) -> str:
        return self.trial["layout"]

    @property
    def step_s(self) -> float:
        return self.metrics["step_time_median_s"]

    @property
    def tokens_per_sample(self) -> int:
        """Tokens one sample counted as in the trial's throughput: the record says (a `_target_`
        model's first integer input, or 1); records from before it said are model.seq_len."""
        return int(self.metrics.get("tokens_per_sample") or self.config["model"]["seq_len"])

    @property
    def local(self) -> bool:
        """Ran as local processes: one machine, however many ranks (never "multi-node")."""
        recorded = recorded_traits(self.config.get("cluster") or {})
        return recorded is not None and recorded.ranks_here

    @property
    def ranks_per_node(self) -> int:
        return -(-self.trial["world_size"] // max(1, self.trial["nodes"]))


UNDESCRIBED = (
    "ran job=command without job.model_describes_program, so its program's gradient size is unknown; sweep it "
    "with the program's model described (model=… or model.* overrides matching it, job.model_describes_program=true)"
)
NOTHING = "has no completed trial to calibrate on; run the sweep (or collect it) first"
UNREADABLE = "has no completed trial it can read to calibrate on"
METER = "report through launcher.meter (job.metrics=meter), which times each step"
TIME_STEPS = {"regex": f"add a step_s group (seconds a step) to job.pattern, or {METER}"}
"""How a source that recorded rates only can time its steps (any other: METER)."""


@dataclass(kw_only=True, frozen=True)
class Calibration:
    """What a sweep offers the performance model, by the one rule `plan --from` and the report share:
    the trials it can be fitted on, or why it cannot be fitted at all."""

    measured: list[Measured]
    """The trials to fit on (empty when `refusal` is set)."""
    refusal: str | None
    """Why the sweep cannot be calibrated, a predicate of the sweep ("has no completed trial …"); None: it can."""
    unreadable: list[str]
    """`<trial-id>: <reason>` of each completed trial left out for a damaged file (the caller names them)."""

    @property
    def refused_for_good(self) -> bool:
        """Refused for what the sweep is (its job, what it recorded), not for want of completed trials yet."""
        return self.refusal not in (None, NOTHING, UNREADABLE)


def calibration(sweep_dir: Path) -> Calibration:
    """Whether the sweep's completed trials can calibrate the model. Not when a completed trial ran a
    command whose model the recipe does not describe (its gradient, what the links carry per step, and its
    FLOPs are unknown, so the model group's would be a guess), nor when no completed trial recorded a step
    time (the model is fitted on step times: a source that logs rates alone gives none)."""
    unreadable: list[str] = []
    untimed: list[dict[str, Any]] = []
    measured = load_measured(sweep_dir, unreadable, untimed)
    configs = [m.config for m in measured] + [rec.get("config") or {} for rec in untimed]
    refusal = None
    if any(_undescribed(c) for c in configs):
        refusal = UNDESCRIBED
    elif not measured and untimed:
        sources = sorted({str((rec.get("metrics") or {}).get("metrics_source")) for rec in untimed})
        fix = TIME_STEPS.get(sources[0], METER)
        refusal = (
            f"recorded no step time in its {len(untimed)} completed trial(s) (job.metrics={', '.join(sources)} "
            f"reported rates only), and the model is fitted on step times; {fix}"
        )
    elif not measured:
        refusal = UNREADABLE if unreadable else NOTHING
    return Calibration(measured=[] if refusal else measured, refusal=refusal, unreadable=unreadable)


def _undescribed(config: dict[str, Any]) -> bool:
    job = config.get("job") or {}
    return job.get("kind") == "command" and not job.get("model_describes_program")


def load_measured(
    sweep_dir: Path, unreadable: list[str] | None = None, untimed: list[dict[str, Any]] | None = None
) -> list[Measured]:
    """Every trial of the sweep whose payload completed (record present, status completed) with a
    step time. A trial whose record.json or trial.json is damaged cannot be calibrated on: it is left
    out, and `<trial-id>: <reason>` is appended to `unreadable` (when given) so the caller can say so;
    a completed record without a step time is appended to `untimed` (when given)."""
    out = []
    for tdir in trial_dirs(sweep_dir):
        rec = read_record(tdir)
        m = (rec.doc or {}).get("metrics") or {}
        if rec.missing or (rec.ok and rec.doc["status"] != "completed"):
            continue  # not completed: nothing to calibrate on, and nothing wrong with the files
        if rec.ok and not m.get("step_time_median_s"):
            if untimed is not None:
                untimed.append(rec.doc)
            continue
        spec = read_trial(tdir)
        if rec.doc is None or spec.doc is None:
            if unreadable is not None:
                unreadable.append(f"{tdir.name}: {rec.reason if rec.doc is None else spec.reason}")
            continue
        out.append(
            Measured(
                trial=spec.doc["trial"],
                metrics=m,
                config=rec.doc.get("config") or {},
                wall_s=rec.doc.get("wall_s") or 0.0,
            )
        )
    return out


def shape_at(m: Measured, world_size: int | None = None, ranks_per_node: int | None = None) -> Shape | None:
    """The shape of trial `m`'s recipe at another world size (None: the layout cannot split it).
    The tp and pipeline layouts grow their one degree with the world; the others keep tp and pp."""
    t = m.trial
    n = world_size or t["world_size"]
    row = traits(m.layout)
    tp, pp = (n if row.tp == Degree.world else t["tp"]), (n if row.pp == Degree.world else t["pp"])
    par = m.config.get("parallel") or {}
    spec = layout_spec(m)
    cp = t.get("cp", 1)  # a set degree, kept as tp and pp are; hsdp keeps its shard group
    shard = (t.get("shard") or t["dp"]) if row.replicate != Degree.none else 0
    if n % (tp * pp * cp) or spec.model.n_layers % (pp * spec.virtual) or (pp > 1 and spec.microbatches < pp):
        return None
    if shard and (n // (tp * pp * cp)) % shard:
        return None
    return layout_shape(
        spec,
        world_size=n,
        ranks_per_node=ranks_per_node or (n if m.local else m.ranks_per_node),
        tp=tp,
        pp=pp,
        batch=_batch_at(t, n // (tp * pp * cp)),
        bubble=pipeline_bubble(pp, spec.microbatches, spec.virtual) if pp > 1 else 0.0,
        nics_per_node=(m.config.get("cluster") or {}).get("nics_per_node") or 1,
        tree=_nccl(m, par),
        contention=_contention(m, n),
        cp=cp,
        shard=shard,
    )


def layout_spec(m: Measured) -> LayoutSpec:
    """What the trial's traffic depends on, from its resolved config and record."""
    par = m.config.get("parallel") or {}
    known = {f.name for f in fields(ModelConfig)}
    model = ModelConfig(**{k: v for k, v in (m.config.get("model") or {}).items() if k in known})
    interleaved = par.get("schedule") == "interleaved_1f1b" and traits(m.layout).virtual_stages
    return LayoutSpec(
        layout=m.layout,
        model=model,
        # The precision the payload resolved (`auto` → bf16 on CUDA, fp32 on CPU); older records: fp32.
        precision=m.metrics.get("precision") or "fp32",
        reshard_after_forward=par.get("reshard_after_forward", True),
        sync_each_microstep=par.get("fsdp_sync_each_microstep", False),
        microbatches=par.get("microbatches", 1),
        virtual=par.get("virtual_stages", 1) if interleaved else 1,
        clip=bool((m.config.get("optim") or {}).get("clip_grad_norm")),  # older records: none clipped
        measured_numel=_measured_numel(m),
        ep=m.trial.get("ep", 1),  # older trials: no expert parallelism
    )


def _measured_numel(m: Measured) -> int | None:
    """The rank's parameter count its gradient all-reduce measured (`allreduce_bytes`, fp32), where
    that all-reduce is this rank's whole gradient: layouts without a pipeline (whose probe is one
    stage's, or an activation's) and with data parallelism. ValueError for a value that is no count."""
    nbytes = m.metrics.get("allreduce_bytes")
    row = traits(m.layout)
    if m.metrics.get("allreduce_of") == "link_probe":  # a command's probe: a stated size, not its gradient's
        return None
    if nbytes is None or row.data_parallel == DataParallel.none or row.splits("pp"):
        return None
    if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
        raise ValueError(f"trial at world_size={m.trial['world_size']}: allreduce_bytes={nbytes} is no byte count")
    return int(nbytes) // 4 or None


def _nccl(m: Measured, par: dict[str, Any]) -> bool:
    """Whether the trial's collectives ran on NCCL (which may take its tree across nodes)."""
    backend = par.get("backend", "auto")
    return backend == "nccl" or (backend == "auto" and bool(m.metrics.get("cuda_device_name")))


def _batch_at(t: dict[str, Any], dp: int) -> BatchMath:
    """The trial's batch recipe at data-parallel degree `dp`. Unlike config.derived.batch_math,
    strong scaling rounds the accumulation instead of refusing a size it does not divide: a
    prediction there is still worth showing."""
    if t["scaling"] == "strong":
        accum = max(1, round(t["global_batch"] / (t["micro"] * dp)))
        return BatchMath(micro=t["micro"], accum=accum, dp=dp, global_batch=t["global_batch"])
    return BatchMath(micro=t["micro"], accum=t["accum"], dp=dp, global_batch=t["micro"] * t["accum"] * dp)


def _contention(m: Measured, n: int) -> float:
    """As measured at the trial's own size; at another size, ranks that all ran on one machine
    (a dev cluster's nodes share its cores) keep sharing it, so its oversubscription follows n,
    counted as the payload counts it (train/measure.cpu_contention): ranks held to a CPU quota
    together (one node of the bed, or all of a local run) demand at most that quota."""
    measured = float(m.metrics.get("cpu_contention") or 1.0)
    if n == m.trial["world_size"] or m.metrics.get("machines") != 1 or not m.metrics.get("cpus_per_machine"):
        return max(1.0, measured)
    threads = m.metrics.get("threads_per_rank", 1)
    quotas = m.metrics.get("cpu_quota_per_rank") or [None]
    if None in quotas:
        return max(1.0, n * threads / m.metrics["cpus_per_machine"])
    together = n if m.local else m.ranks_per_node
    demand = -(-n // together) * min(together * threads, min(quotas))
    return max(1.0, demand / m.metrics["cpus_per_machine"])


def observation(m: Measured) -> Observation:
    shape = shape_at(m)
    assert shape is not None  # the trial ran at its own size
    probe = tuple((int(n), int(b), float(s)) for n, b, s in m.metrics.get("allreduce_probe") or () if s > 0)
    return Observation(
        shape=shape,
        step_s=m.step_s,
        allreduce=probe,
        probe_group="pp" if _probes_pipeline(m.layout) else "dp",
        gathers=_tp_collectives(m),
    )


def _probes_pipeline(layout: str) -> bool:
    """Whether the trial timed its all-reduce probe on the pipeline group: a pipeline with no dp
    group to probe (engines/pipeline.py's comm_group)."""
    row = traits(layout)
    return row.data_parallel == DataParallel.none and row.splits("pp")


def _tp_collectives(m: Measured) -> tuple[tuple[int, int, int, float], ...]:
    """The trial's tensor-parallel collectives per step, as the payload timed them (engines/tp.py):
    (tp, bytes, count, seconds) where it recorded their bytes; the slowest rank's time."""
    layout = m.metrics.get("layout") or {}
    tp, nbytes, count = m.trial["tp"], layout.get("tp_collective_bytes_per_step"), layout.get("tp_collectives_per_step")
    # The tp-only engine (engines/tp.py) records its tp collectives as its layout's collective_time_s.
    only_tp = traits(m.layout).tp == Degree.world
    seconds = layout.get("tp_collective_time_s", layout.get("collective_time_s") if only_tp else None)
    if tp < 2 or not (nbytes and count and seconds and seconds > 0):
        return ()
    return ((int(tp), int(nbytes), int(count), float(seconds)),)


def fit_layouts(measured: Sequence[Measured], intra: str, inter: str) -> dict[str, PerfModel]:
    """One calibrated model per layout from its completed trials."""
    models = {}
    for layout in sorted({m.layout for m in measured}):
        obs = [observation(m) for m in measured if m.layout == layout]
        models[layout] = fit(obs, intra=LINKS[intra], inter=LINKS[inter])
    return models


def predictions(measured: Sequence[Measured], models: dict[str, PerfModel], sizes: Sequence[int] = ()) -> pd.DataFrame:
    """Per variant and size (the measured sizes plus `sizes`): predicted tokens/s with its
    interval, the measurement where there is one, and the predicted efficiency against the
    variant's smallest measured size."""
    rows = []
    for variant in sorted({m.variant for m in measured}):
        mine = sorted((m for m in measured if m.variant == variant), key=lambda m: m.trial["world_size"])
        base = mine[0]
        seq = base.tokens_per_sample
        n0 = base.trial["world_size"]
        thr0 = _median([m.metrics["tokens_per_s"] for m in mine if m.trial["world_size"] == n0])
        measured_at = {}
        for m in mine:
            measured_at.setdefault(m.trial["world_size"], []).append(m.metrics["tokens_per_s"])
        template = mine[-1]  # the largest measured size: closest to what is extrapolated
        for n in sorted(set(measured_at) | set(sizes)):
            shape = shape_at(template, n)
            if shape is None:
                continue
            p = models[template.layout].predict(shape)
            thr = p.tokens_per_s(shape.global_batch, seq)
            low, high = p.tokens_per_s_interval(shape.global_batch, seq)
            rows.append(
                {
                    "variant": variant,
                    "world_size": n,
                    "predicted_tokens_per_s": thr,
                    "low_tokens_per_s": low,
                    "high_tokens_per_s": high,
                    "measured_tokens_per_s": _median(measured_at.get(n, [])),
                    "predicted_step_s": p.step_s,
                    "predicted_efficiency": thr * n0 / (thr0 * n),
                    "efficiency_high": high * n0 / (thr0 * n),
                    "compute_s": p.compute_s,
                    "comm_s": p.comm_s,
                    "bubble_s": p.bubble_s,
                    "overhead_s": p.overhead_s,
                    "trial_device_hours": n * (template.trial["steps"] * p.step_s + _startup_s(mine)) / 3600,
                }
            )
    return pd.DataFrame(rows)


def _startup_s(mine: Sequence[Measured]) -> float:
    """What a trial spends outside its steps (start-up, imports, teardown): median over trials."""
    return _median([max(0.0, m.wall_s - m.trial["steps"] * m.step_s) for m in mine if m.wall_s]) or 0.0


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def mape(pred: pd.DataFrame) -> float:
    """Mean absolute percentage error of predicted vs measured tokens/s where both exist."""
    both = pred.dropna(subset=["measured_tokens_per_s"])
    err = (both["predicted_tokens_per_s"] - both["measured_tokens_per_s"]).abs() / both["measured_tokens_per_s"]
    return float(err.mean() * 100) if len(both) else math.nan
