"""Checks on a whole config that hold for every trial. Per-trial checks live in plan.py."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from launcher.config.checks import at_least, check_sizes, positive, short
from launcher.config.cluster_traits import cluster_traits
from launcher.config.errors import ConfigError
from launcher.config.schema import (
    BatchConfig,
    ClusterConfig,
    DataConfig,
    LauncherConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    SweepConfig,
)
from launcher.config.validate_byo import check_byo
from launcher.config.validate_heads import check_heads
from launcher.config.validate_job import check_job
from launcher.config.validate_layout import check_byo_layout, check_torch_release, set_degrees
from launcher.config.validate_moe import check_moe
from launcher.config.validate_network import check_network
from launcher.config.validate_precision import check_fp8_model
from launcher.config.validate_slurm import check_slurm
from launcher.layouts import layout_names, traits

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# Every pattern here is applied with fullmatch: `$` alone also matches before a trailing newline.

# Sizes beyond any cluster a sweep measures (larger ones: `launcher plan`); cluster=local starts
# each rank as a process on this machine.
_ITEMSIZE = {"uint16": 2, "int32": 4, "int64": 8}  # bytes per token of data.dtype
_MAX_PEAK = 1e17  # FLOP/s: ~40× the fastest dense peak in launcher/compute/peaks.py (B200 bf16, 2.25e15)


def validate(cfg: LauncherConfig) -> LauncherConfig:
    """Raise ConfigError on the first impossible value; return cfg unchanged otherwise. Types and
    choices were checked when the config was built (OmegaConf); these are the rules between and
    within values that a schema cannot state."""
    _check_model(cfg.model)
    check_byo(cfg.model, cfg.data)
    check_fp8_model(cfg.model, str(cfg.precision))
    _check_names(cfg)
    _check_batch(cfg.batch)
    _check_parallel(cfg)
    check_moe(cfg)
    _check_optim(cfg.optim)
    _check_data(cfg.data, cfg.model)
    _check_cluster(cfg.cluster)
    check_network(cfg.cluster)
    _check_sweep(cfg.sweep, cfg.cluster)
    check_slurm(cfg.cluster, command=cfg.job.kind == "command")
    _check_run(cfg.run, cfg)
    _check_compile(cfg)
    check_job(cfg)
    at_least("seed", cfg.seed, 0, 0)
    at_least("trainer.checkpoint_every_nth_block", cfg.trainer.checkpoint_every_nth_block, 0, 2)
    if cfg.trainer.grad_sync_16bit and not cfg.trainer.distributed_optimizer:
        raise ConfigError(
            "trainer.grad_sync_16bit=true describes the 16-bit gradient buffer of Megatron's distributed optimizer; "
            "add trainer.distributed_optimizer=true, or drop it"
        )
    return cfg


def _check_model(m: ModelConfig) -> None:
    at_least("model.vocab_size", m.vocab_size, 2, 256)
    for key, value, example in (
        ("model.seq_len", m.seq_len, 64),
        ("model.d_model", m.d_model, 128),
        ("model.n_layers", m.n_layers, 2),
        ("model.n_heads", m.n_heads, 4),
        ("model.ffn_mult", m.ffn_mult, 4),
    ):
        at_least(key, value, 1, example)
    for key, value in (("model.ffn_hidden", m.ffn_hidden), ("model.n_kv_heads", m.n_kv_heads)):
        if value is not None:
            at_least(key, value, 1, 8)
    check_heads(m)


def _check_names(cfg: LauncherConfig) -> None:
    """Names that become folder and job names."""
    for key, value in (("model.name", cfg.model.name), ("cluster.name", cfg.cluster.name)):
        if not _SAFE_NAME.fullmatch(value):
            raise ConfigError(
                f"{key}={value!r} names folders and jobs: use letters, digits, '.', '_' or '-' (≤100); "
                f"set e.g. {key}=mine"
            )
    name = cfg.sweep.name
    if name is not None and not _SAFE_NAME.fullmatch(name):
        raise ConfigError(
            f"sweep.name={name!r} must be letters, digits, '.', '_' or '-' (≤100, not starting with "
            "'.' or '-'); set e.g. sweep.name=gpt-ddp-1"
        )


def _check_batch(b: BatchConfig) -> None:
    at_least("batch.micro", b.micro, 1, 8)
    at_least("batch.accum", b.accum, 1, 1)
    if b.global_batch is not None:
        at_least("batch.global_batch", b.global_batch, 1, b.micro * b.accum)


def _check_parallel(cfg: LauncherConfig) -> None:
    """The layout's own degrees, once, before any world size is tried (per size: trials.layout)."""
    if cfg.model._target_ is not None:
        check_byo_layout(cfg.model._target_, cfg.parallel)
    set_degrees(cfg.parallel)
    check_torch_release(cfg.parallel)
    at_least("parallel.fsdp_min_params", cfg.parallel.fsdp_min_params, 1, 1000000)


def _check_optim(o: OptimConfig) -> None:
    positive("optim.lr", o.lr, 0.001)
    if not (math.isfinite(o.weight_decay) and o.weight_decay >= 0):
        raise ConfigError(f"optim.weight_decay={o.weight_decay} must be ≥ 0; set e.g. optim.weight_decay=0.1")
    for key, beta in (("optim.beta1", o.beta1), ("optim.beta2", o.beta2), ("optim.momentum", o.momentum)):
        if not 0 <= beta < 1:
            raise ConfigError(f"{key}={beta} must be in [0, 1); set e.g. {key}=0.9")
    at_least("optim.warmup_steps", o.warmup_steps, 0, 0)
    at_least("optim.base_global_batch", o.base_global_batch, 1, 8)
    clip = o.clip_grad_norm
    if clip is not None and not (math.isfinite(clip) and clip >= 0):
        raise ConfigError(
            f"optim.clip_grad_norm={clip} must be a finite norm ≥ 0 (0 or null: no clipping); set e.g. "
            "optim.clip_grad_norm=1.0"
        )


def _check_data(d: DataConfig, m: ModelConfig) -> None:
    if d.kind == "dataset" and not d._target_:
        raise ConfigError(
            "data=dataset needs data._target_, a callable returning a map-style Dataset; "
            "set e.g. data._target_=mypkg.data.make"
        )
    if d.kind != "dataset" and (d._target_ or d.kwargs):
        raise ConfigError(
            f"data._target_={d._target_} (or data.kwargs) is set but data={d.kind} ignores it; add data=dataset"
        )
    if d.kind != "file" and d.path:  # else ignored: the sweep would quietly train on synthetic tokens
        raise ConfigError(
            f"data.path is set but data={d.kind} ignores it; add data=file (data=file data.path={d.path})"
        )
    if d.kind != "file":
        return
    if not d.path:
        raise ConfigError("data.kind=file needs data.path; set data.path=/path/to/tokens.bin")
    try:
        size = Path(d.path).stat().st_size if Path(d.path).is_file() else None
    except OSError as exc:  # e.g. a name too long for the filesystem
        raise ConfigError(
            f"data.path={short(d.path)} is not a readable file ({exc.strerror}); point it at a token file"
        ) from None
    if size is None:
        raise ConfigError(f"data.path={d.path!r} is not a readable file; point it at a token file")
    tokens = size // _ITEMSIZE[d.dtype]
    if tokens < m.seq_len + 1:
        raise ConfigError(
            f"data.path={d.path!r} holds {tokens} tokens, fewer than model.seq_len+1={m.seq_len + 1}; "
            "use a larger file or a shorter model.seq_len"
        )


def _check_compile(cfg: LauncherConfig) -> None:
    """train.compile compiles in the first steps: warm-up must hold them (launcher/train/compiling.py)."""
    if not cfg.train.compile:
        return
    if not traits(cfg.parallel.layout).compile:
        can = " or ".join(layout_names(lambda t: t.compile))
        raise ConfigError(
            f"train.compile=true is supported with parallel.layout={can}, not "
            f"{cfg.parallel.layout}; use one of those, or set train.compile=false"
        )
    for group, warmup in (("sweep", cfg.sweep.warmup_steps), ("run", cfg.run.warmup_steps)):
        if warmup < 1:
            raise ConfigError(
                f"train.compile=true compiles during the first steps, but {group}.warmup_steps={warmup} "
                f"would time them; set {group}.warmup_steps=2 or more"
            )


def _check_cluster(c: ClusterConfig) -> None:
    """Prices, threads and timeouts (every executor)."""
    if c.peak_flops_per_device is not None:
        positive("cluster.peak_flops_per_device", c.peak_flops_per_device, 3.12e14)
        _check_peak(c.peak_flops_per_device)
    if c.usd_per_device_hour is not None and not (math.isfinite(c.usd_per_device_hour) and c.usd_per_device_hour >= 0):
        raise ConfigError(
            f"cluster.usd_per_device_hour={c.usd_per_device_hour} must be ≥ 0; set e.g. cluster.usd_per_device_hour=2.5"
        )
    if not (math.isfinite(c.spot_discount) and 0 <= c.spot_discount < 1):
        raise ConfigError(
            f"cluster.spot_discount={c.spot_discount} must be in [0, 1); set e.g. cluster.spot_discount=0.6"
        )
    at_least("cluster.threads_per_rank", c.threads_per_rank, 1, 1)
    positive("cluster.trial_timeout_s", c.trial_timeout_s, 600)
    positive("cluster.pg_timeout_s", c.pg_timeout_s, 120)
    if c.device_memory_gb is not None:
        positive("cluster.device_memory_gb", c.device_memory_gb, 80)
    if c.host_memory_gb is not None:
        positive("cluster.host_memory_gb", c.host_memory_gb, 256)


def _check_peak(peak: float) -> None:
    """One device's peak: a figure beyond any device's is an exponent typo or a node's total,
    and would make every MFU tiny without a word."""
    if peak > _MAX_PEAK:
        raise ConfigError(
            f"cluster.peak_flops_per_device={peak:.3g} is more than any one device's dense peak (B200 bf16: 2.25e15); "
            "give one device's figure, e.g. cluster.peak_flops_per_device=9.894e14 (H100 SXM bf16), or null to "
            "take it from the peak table for cluster.device_name"
        )


def _check_sweep(s: SweepConfig, c: ClusterConfig) -> None:
    check_sizes("sweep.world_sizes", s.world_sizes, local=cluster_traits(c).ranks_here)
    _check_steps("sweep", s.steps, s.warmup_steps)
    if not 0 < s.threshold <= 1:
        raise ConfigError(f"sweep.threshold={s.threshold} must be in (0, 1]; set e.g. sweep.threshold=0.8")
    _check_policy(s, c)
    if s.nodes is not None:
        check_sizes("sweep.nodes", s.nodes)
        if cluster_traits(c).ranks_here:
            raise ConfigError(
                f"sweep.nodes={list(s.nodes)} needs a Slurm cluster; use cluster=slurm (or sweep.world_sizes)"
            )
    _check_repeats(s)
    at_least("sweep.array_throttle", s.array_throttle, 0, 4)
    sizes = list(s.nodes if s.nodes is not None else s.world_sizes)
    if stray := [n for n in s.force_sizes if n not in sizes]:
        key = "sweep.nodes" if s.nodes is not None else "sweep.world_sizes"
        raise ConfigError(f"sweep.force_sizes={list(s.force_sizes)} holds {stray}, not among {key}={sizes}")
    if not s.pending_timeout_s >= 0:  # `not >=` also refuses NaN
        raise ConfigError(
            f"sweep.pending_timeout_s={s.pending_timeout_s} must be 0 (wait forever) or more; set e.g. "
            "sweep.pending_timeout_s=600"
        )
    _check_results_dir(s.results_dir, on_sbatch_lines=cluster_traits(c).batch_jobs)
    if s.pack and s.search == "adaptive":
        raise ConfigError(
            "sweep.pack=true runs every size in one allocation, but sweep.search=adaptive picks each size from the "
            "last one's result; use one of them"
        )
    if s.pack and not cluster_traits(c).batch_jobs:
        raise ConfigError("sweep.pack=true runs trials as steps of one Slurm allocation; use cluster=slurm")


AUTO = "auto"
AUTO_FIRST_REPEATS = 3
"""repeats=auto runs this many rounds before judging a size: fewer give no honest interval."""
MAX_REPEATS = 1000


def parse_repeats(value: object) -> int | None:
    """sweep.repeats → its count, or None for `auto`; ConfigError (one line) for anything else."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"sweep.repeats={value!r} must be a whole number of trials per size (≥ 1) or auto; "
            "set e.g. sweep.repeats=3 or sweep.repeats=auto"
        )
    if value > MAX_REPEATS:
        raise ConfigError(f"sweep.repeats={value} is over {MAX_REPEATS} trials per size; set e.g. sweep.repeats=3")
    return value


def _check_repeats(s: SweepConfig) -> None:
    auto = parse_repeats(s.repeats) is None
    if not (isinstance(s.target_ci, (int, float)) and 0 < s.target_ci < 1):
        raise ConfigError(
            f"sweep.target_ci={s.target_ci} must be a fraction in (0, 1) (the interval's half-width "
            "÷ the median); set e.g. sweep.target_ci=0.05"
        )
    if not AUTO_FIRST_REPEATS <= s.max_repeats <= MAX_REPEATS:
        raise ConfigError(
            f"sweep.max_repeats={s.max_repeats} must be {AUTO_FIRST_REPEATS} to {MAX_REPEATS} "
            f"(repeats=auto starts with {AUTO_FIRST_REPEATS}); set e.g. sweep.max_repeats=5"
        )
    if auto and s.pack:
        raise ConfigError(
            "sweep.repeats=auto decides each round from the last, but sweep.pack=true runs every trial "
            "in one allocation planned up front; use a number of repeats, e.g. sweep.repeats=3"
        )


def _check_run(r: RunConfig, cfg: LauncherConfig) -> None:
    c = cfg.cluster
    at_least("run.world_size", r.world_size, 1, 1)
    check_sizes("run.world_size", [r.world_size], local=cluster_traits(c).ranks_here)
    _check_steps("run", r.steps, r.warmup_steps)
    at_least("run.checkpoint_every", r.checkpoint_every, 0, 100)
    if (r.checkpoint_every or r.requeue) and not traits(cfg.parallel.layout).checkpoint:
        can = ", ".join(layout_names(lambda t: t.checkpoint))
        raise ConfigError(
            f"parallel.layout={cfg.parallel.layout} cannot be checkpointed yet (run.checkpoint_every / --requeue); "
            f"use one of {can} for a checkpointed run"
        )
    if r.requeue and not cluster_traits(c).batch_jobs:
        raise ConfigError("--requeue (run.requeue=true) needs a Slurm cluster; use cluster=slurm or cluster=devcluster")


def _check_policy(s: SweepConfig, c: ClusterConfig) -> None:
    for key, value, example in (
        ("sweep.token_budget", s.token_budget, "2e11"),
        ("sweep.budget_device_hours", s.budget_device_hours, 10000),
        ("sweep.budget_usd", s.budget_usd, 50000),
    ):
        if value is not None:
            positive(key, value, example)
    if s.budget_usd is not None and c.usd_per_device_hour is None:
        raise ConfigError(
            f"sweep.budget_usd={s.budget_usd:g} needs a price; set e.g. cluster.usd_per_device_hour=2.5 "
            "(or budget in sweep.budget_device_hours)"
        )
    if s.policy != "fastest_within_budget":
        return
    if s.token_budget is None:
        raise ConfigError(
            "sweep.policy=fastest_within_budget needs the tokens the run will train on; set e.g. "
            "sweep.token_budget=2e11"
        )
    if s.budget_device_hours is None and s.budget_usd is None:
        raise ConfigError(
            "sweep.policy=fastest_within_budget needs a budget; set sweep.budget_device_hours=10000 and/or "
            "sweep.budget_usd=50000"
        )


# sweep.results_dir is part of the batch log path on an #SBATCH line; sbatch expands %-patterns in
# it, so '%' is refused here too (render.py's check_sbatch_path allows the launcher's own %j, %A, %a).
_RESULTS_DIR = re.compile(r"^[A-Za-z0-9_./+=,@-]+$")


def _check_results_dir(path: str, *, on_sbatch_lines: bool) -> None:
    """A folder path mkdir can make (no NUL, not too long); on Slurm (`on_sbatch_lines`) also one an
    #SBATCH line carries."""
    if "\x00" in path or len(path.encode()) > 3000 or any(len(part.encode()) > 255 for part in Path(path).parts):
        raise ConfigError(
            f"sweep.results_dir={short(path)} is not a usable folder path (a NUL character, over 3000 bytes, "
            "or a folder name over 255 bytes); choose e.g. sweep.results_dir=results"
        )
    full = os.path.abspath(path)
    if on_sbatch_lines and not _RESULTS_DIR.fullmatch(full):
        where = "" if full == path else f" (here {full!r})"
        raise ConfigError(
            f"sweep.results_dir={path!r}{where} has characters an #SBATCH line cannot carry (spaces, quotes, '%', "
            "shell or non-ASCII characters); choose a folder of letters, digits and _ . / + = , @ -"
        )


def _check_steps(group: str, steps: int, warmup: int) -> None:
    at_least(f"{group}.steps", steps, 1, 30)
    at_least(f"{group}.warmup_steps", warmup, 0, 5)
    if warmup >= steps:
        raise ConfigError(
            f"{group}.warmup_steps={warmup} leaves no measured step of {group}.steps={steps}; "
            f"set {group}.steps above {warmup}, e.g. {group}.steps={warmup + 20}"
        )
