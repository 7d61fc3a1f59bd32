"""`launcher plan --search`: at each GPU count, every candidate (candidates.py) the sweep's rules
accept is estimated for memory and, where it fits (memory_limit.py), predicted by the preset
model; the fastest is the size's pick. Within one size tokens/s, $ per token and the time to a
token budget order candidates alike (same GPUs, same price), so ranking by tokens/s serves every
sweep.policy; the policy then picks the size among the sizes' best. Pure; no torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.perf import preset_fit
from launcher.perf.candidates import Candidate, candidates, checkpointing_choices
from launcher.perf.memory import GIB
from launcher.perf.memory_limit import Limit, limit_of, planned_bytes
from launcher.perf.plan_table import Work, _assumed_mfu, preset_model, work_of
from launcher.perf.shapes import shape_for
from launcher.perf.step import PerfModel, Prediction
from launcher.trials.spec import make_trial

TOP = 3
"""Candidates shown per size: the best and its runners-up."""


@dataclass(kw_only=True, frozen=True)
class Scored:
    """One candidate, estimated and (where it fits) predicted."""

    candidate: Candidate
    """The configuration."""
    memory_bytes: float
    """Estimated peak bytes of its neediest rank."""
    prediction: Prediction | None = None
    """Its predicted step (None: it does not fit, so it was not predicted)."""
    tokens_per_s: float = math.nan
    """Predicted tokens/s (nan where not predicted)."""

    @property
    def fits(self) -> bool:
        return self.prediction is not None


@dataclass(kw_only=True, frozen=True)
class SizeResult:
    """What the search found at one size."""

    world_size: int
    """GPUs."""
    ranked: list[Scored] = field(default_factory=list)
    """The candidates that fit, fastest first."""
    dropped: list[Scored] = field(default_factory=list)
    """Those whose memory estimate exceeds the limit."""
    refused: list[str] = field(default_factory=list)
    """Why candidates were refused by the sweep's rules (first reason per layout)."""


@dataclass(kw_only=True, frozen=True)
class Search:
    """The search over every size, and what it was measured with."""

    sizes: list[SizeResult]
    """Per size, in the order asked."""
    limit: Limit | None
    """The memory limit (None: the device's memory is unknown; nothing is dropped)."""
    work: Work
    """The recipe's FLOPs per token (model FLOPs: what MFU counts) and peak."""
    mfu: float
    """The MFU the preset model assumes."""
    mfu_source: str
    """Where that MFU comes from."""
    interval_log: float
    """The preset interval, ×/÷ exp(interval_log)."""


def _models(cfg: LauncherConfig, mfu: float, fit: preset_fit.PresetFit) -> dict[str, PerfModel]:
    """The preset model per checkpointing mode (recompute changes the executed FLOPs per token)."""
    out = {}
    for ckpt in checkpointing_choices(cfg):
        c = _with_checkpointing(cfg, ckpt)
        out[ckpt] = preset_model(c, work_of(c), mfu, fit)
    return out


def _with_checkpointing(cfg: LauncherConfig, ckpt: str) -> LauncherConfig:
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, activation_checkpointing=ckpt))


def score_size(cfg: LauncherConfig, n: int, models: dict[str, PerfModel], limit: Limit | None, seq: int) -> SizeResult:
    """Every candidate at `n` GPUs: refused, dropped for memory, or predicted and ranked. Within one
    layout, degrees and checkpointing, memory grows with the micro-batch where nothing accumulates
    (a pipeline's micro-batches are its steps): once one does not fit, the larger ones are not
    estimated (a lower bound already fails)."""
    ranked, dropped, refused = [], [], {}
    too_big: set[tuple] = set()
    for cand in candidates(cfg, n):
        group = (
            cand.layout,
            cand.tp,
            cand.pp,
            cand.ep,
            cand.virtual_stages,
            cand.checkpointing,
            cand.reshard_after_forward,
        )
        if group in too_big:
            continue
        c = cand.config(cfg)
        try:
            trial = make_trial(c, index=0, world_size=n, steps=1, warmup_steps=0)  # the sweep's own rules
        except ConfigError as exc:
            refused.setdefault(cand.layout, str(exc))
            continue
        need = planned_bytes(c, trial) or 0.0
        if limit is not None and not limit.fits(need):
            dropped.append(Scored(candidate=cand, memory_bytes=need))
            if cand.accum == 1:  # with accumulation FSDP's unsharded gradients could shrink as micro-batches grow
                too_big.add(group)
            continue
        shape = shape_for(c, n)
        p = models[cand.checkpointing].predict(shape)
        thr = p.tokens_per_s(shape.global_batch, seq)
        ranked.append(Scored(candidate=cand, memory_bytes=need, prediction=p, tokens_per_s=thr))
    # Where the model cannot tell candidates apart (accumulation changes no predicted term), the larger
    # micro-batch goes first: fewer, larger kernels, which measure faster on every device we ran.
    ranked.sort(key=lambda s: (-s.tokens_per_s, -s.candidate.micro_batch))
    return SizeResult(world_size=n, ranked=ranked, dropped=dropped, refused=list(refused.values()))


def search(cfg: LauncherConfig, sizes: Sequence[int], *, assume_mfu: float | None) -> Search:
    """Search every size; ConfigError (one line) where the recipe cannot be searched or nothing fits."""
    if cfg.model._target_ is not None:
        raise ConfigError(
            "launcher plan --search models the built-in models only (a `_target_` model's memory and "
            "splits are not described by its config); measure it with a sweep and plan --from that"
        )
    work = work_of(cfg)
    if work.peak.flops is None:
        raise ConfigError(
            f"launcher plan --search needs the device's peak: cluster.device_name={cfg.cluster.device_name!r} is "
            "not in the peak table, so set cluster.peak_flops_per_device (e.g. cluster=example_gpu_site)"
        )
    fit = preset_fit.load()
    mfu, said = _assumed_mfu(cfg, work, fit, assume_mfu)
    models, limit = _models(cfg, mfu, fit), limit_of(cfg)
    found = [score_size(cfg, n, models, limit, work.tokens_per_sample) for n in sizes]
    _check_found(cfg, found, limit)
    return Search(sizes=found, limit=limit, work=work, mfu=mfu, mfu_source=said, interval_log=fit.interval_log)


def _check_found(cfg: LauncherConfig, found: list[SizeResult], limit: Limit | None) -> None:
    """Bad input, one line: no size any layout can split, or nothing that fits at any size."""
    if any(r.ranked for r in found):
        return
    dropped = [s for r in found for s in r.dropped]
    if not dropped:
        why = "; ".join(dict.fromkeys(w for r in found for w in r.refused)) or "no layout's degrees divide it"
        sizes = ", ".join(str(r.world_size) for r in found)
        raise ConfigError(f"--gpus {sizes}: no layout can split these sizes: {why}")
    least = min(dropped, key=lambda s: s.memory_bytes)
    assert limit is not None  # something was dropped for memory, so there is a limit
    raise ConfigError(
        f"{cfg.model.name} fits no candidate at any size: the smallest estimate is {least.memory_bytes / GIB:.1f} GiB "
        f"per rank ({least.candidate.label} at {least.candidate.world_size} GPUs) > {limit.describe()}; every "
        "size is predicted out of memory under every layout, recompute and micro-batch: try more GPUs (--gpus) or a "
        "device with more memory (cluster.device_name, cluster.device_memory_gb)"
    )
