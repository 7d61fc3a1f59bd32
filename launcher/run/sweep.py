"""A sweep: plan every trial (all validated first), run or submit them, build the table.

Folder layout, written as the sweep goes so nothing is lost if the launcher dies:
    results/<sweep-id>/sweep.json               spec: overrides, resolved config, trial list
    results/<sweep-id>/jobs/                    sbatch scripts, batch logs, one submission record per job (slurm)
    results/<sweep-id>/trials/<trial-id>/       trial.json, rank logs, submission.json (slurm),
                                                record.json (payload), outcome.json (executor)
    results/<sweep-id>/results.{csv,parquet}    the table, rebuilt from trials/
    results/<sweep-id>/report.md, scaling.png   what people read

Any later command (`status`, `collect`, `sweep --resume`) works from the folder alone.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from launcher import __version__
from launcher.config.builtin_support import builtin_lacks
from launcher.config.cluster_traits import cluster_traits
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.expand import expand
from launcher.config.job import job_label
from launcher.config.load import load_config
from launcher.config.plain import to_dict
from launcher.config.recipe_folders import user_recipes
from launcher.config.schema import LauncherConfig
from launcher.config.validate_job import refuse_missing_script
from launcher.io import json_text
from launcher.results.schema_version import TABLE_SCHEMA_VERSION
from launcher.run.executor import executor_for
from launcher.run.executor.base import Stalled
from launcher.run.predicted_oom import predict_oom, record_predicted_oom
from launcher.run.say import say
from launcher.run.stopped import detach_stalled, interrupted_line, signal_name, sigterm_stops_as_ctrl_c
from launcher.trials.folder import SWEEP_FILE, is_done, read_sweep_spec, write_trials
from launcher.trials.spec import Trial, repeat_plan, sweep_trials

if TYPE_CHECKING:
    from launcher.run.tabulate import SweepResult


def sweep_id(cfg: LauncherConfig, now: float, configs: Sequence[LauncherConfig] = ()) -> str:
    """sweep.name, else `<time>-<model>-<layout>` naming what is swept across `configs` (each
    combination's config): `...-tiny_gpt-ddp+fsdp`, or a count past three (`...-tiny_gpt-4layouts`).
    A `job=command` sweep is `<time>-<job>` (job_label): the model and layout are the built-in trainer's."""
    if cfg.sweep.name:
        return cfg.sweep.name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    configs = list(configs) or [cfg]
    if any(job.kind == "command" for job in (c.job for c in configs)):
        return f"{stamp}-{_swept([job_label(c.job) for c in configs], 'jobs')}"
    models = _swept([c.model.name for c in configs], "models")
    layouts = _swept([c.parallel.layout for c in configs], "layouts")
    return f"{stamp}-{models}-{layouts}"


def _swept(values: list[str], plural: str) -> str:
    """One value as itself; two or three joined by '+'; more (or a long join) as a count."""
    distinct = list(dict.fromkeys(values))
    joined = "+".join(distinct)
    return joined if len(distinct) <= 3 and len(joined) <= 64 else f"{len(distinct)}{plural}"


@dataclass(kw_only=True, frozen=True)
class PreparedSweep:
    cfg: LauncherConfig
    """The first combination's config: cluster and sweep settings shared by all."""
    items: list[tuple[Trial, LauncherConfig]]
    """Every trial with the config it runs."""
    skipped: list[str]
    """Impossible combinations, each with its reason (listed before anything runs)."""
    predicted_oom: dict[str, str] = field(default_factory=dict)
    """trial id → why its estimated memory per rank cannot fit (launcher/perf/memory.py):
    recorded as `oom` rows before anything runs, and never launched."""
    forced: dict[str, str] = field(default_factory=dict)
    """trial id → the predicted-oom reason of a trial `sweep.force_sizes` runs all the same."""
    recipes: str | None = None
    """The user's recipe folder the configs were composed from (--recipes, else $LAUNCHER_RECIPES),
    resolved; None when only the bundled recipes served. Kept in sweep.json for `plan --from`."""


def prepare_sweep(overrides: Sequence[str], recipes: str | None = None) -> PreparedSweep:
    """Expand swept overrides, compose and plan each combination. One combination: strict (any
    impossible size is an error). Several: impossible combinations are skipped with a reason;
    none possible is an error."""
    variants = expand(overrides)
    if len(variants) == 1:
        cfg = compose_config(variants[0].overrides, recipes)
        items = [(t, cfg) for t in sweep_trials(cfg)]
        refuse_unrunnable(cfg, items)
        skipped_oom, forced = predict_oom(items)
        return PreparedSweep(
            cfg=cfg, items=items, skipped=[], predicted_oom=skipped_oom, forced=forced, recipes=user_recipes(recipes)
        )
    return prepare_variants([(v.label, v.overrides) for v in variants], recipes)


def prepare_variants(labelled: Sequence[tuple[str, Sequence[str]]], recipes: str | None = None) -> PreparedSweep:
    """Several combinations, each (label, its full overrides), composed and planned; impossible ones
    skipped with a reason; none possible is an error (a comma sweep's, or plan --verify's candidates)."""
    items: list[tuple[Trial, LauncherConfig]] = []
    skipped: list[str] = []
    base: LauncherConfig | None = None
    for label, overrides in labelled:
        try:
            cfg = compose_config(overrides, recipes)
        except ConfigError as exc:
            skipped.append(f"{label}: {exc}")
            continue
        if base is not None and cfg.cluster != base.cluster:
            raise ConfigError(
                f"{label}: cluster settings differ between combinations; sweep cluster.* in separate sweeps"
            )
        base = base or cfg
        items += [(t, cfg) for t in sweep_trials(cfg, first_index=len(items), variant=label, skipped=skipped)]
    if not items:
        raise ConfigError(
            f"no combination can run: {skipped[0]}" + (f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else "")
        )
    assert base is not None
    refuse_unrunnable(base, items)
    skipped_oom, forced = predict_oom(items)
    return PreparedSweep(
        cfg=base, items=items, skipped=skipped, predicted_oom=skipped_oom, forced=forced, recipes=user_recipes(recipes)
    )


def refuse_unrunnable(cfg: LauncherConfig, items: Sequence[tuple[Trial, LauncherConfig]]) -> None:
    """What no trial can survive, refused whole before any folder exists: what the executor cannot
    hold (locally, more ranks than this machine's GPUs, or a command's script not on this host), and a
    `_target_` model that does not import, build or take its inputs, or settings that describe another trainer
    (config/schema_trainer.py)."""
    if lacks := sorted({k for _, c in items for k in builtin_lacks(c)}):
        raise ConfigError(
            f"{', '.join(lacks)} describe(s) a trainer other than the built-in one, whose engines do not implement "
            "it: use it with `launcher plan` for a recipe that trainer runs, or drop it to run the built-in trainer"
        )
    executor_for(cfg).check_trials([t for t, _ in items])
    if cluster_traits(cfg.cluster).ranks_here:  # runs here: a script after `python` that is not here cannot start
        for job in {id(c.job): c.job for _, c in items}.values():
            refuse_missing_script(job)
    if any(
        c.model._target_ or c.data._target_ for _, c in items
    ):  # lazy: torch and the user's package, for `_target_`s only
        from launcher.train.models.byo_check import check_targets  # (imports, builds, takes its inputs: one line)

        check_targets([c for _, c in items])


def create_sweep_dir(
    cfg: LauncherConfig,
    items: Sequence[tuple[Trial, LauncherConfig]],
    overrides: Sequence[str],
    skipped: Sequence[str] = (),
    recipes: str | None = None,
) -> Path:
    """Make the sweep folder and write its spec and every trial.json. Never reuses a folder.
    `recipes`: the user's recipe folder (PreparedSweep.recipes), which `plan --from` composes from again."""
    now = time.time()
    root = Path(cfg.sweep.results_dir)
    base = sweep_id(cfg, now, [c for _, c in items])
    sweep_dir = root / base
    if cfg.sweep.name and sweep_dir.exists():
        raise ConfigError(
            f"sweep.name={cfg.sweep.name!r}: {sweep_dir} already exists; choose another sweep.name "
            "(existing results are never overwritten)"
        )
    n = 2
    while sweep_dir.exists():
        sweep_dir, n = root / f"{base}-{n}", n + 1
    (sweep_dir / "trials").mkdir(parents=True)
    spec = json_text(
        {
            "sweep_id": sweep_dir.name,
            "created_at": now,
            "launcher_version": __version__,
            "table_schema_version": TABLE_SCHEMA_VERSION,
            "overrides": list(overrides),
            "config": to_dict(cfg),
            "trials": [t.to_dict() for t, _ in items],
            "skipped": list(skipped),
            "recipes": recipes,
        }
    )
    # sweep.json is made durable with the trials (one flush, not an fsync more) and renamed into place last:
    # a folder holding sweep.json holds every trial.json it plans.
    write_trials(sweep_dir, items, then=[(sweep_dir / SWEEP_FILE, spec)])
    return sweep_dir


def load_sweep(sweep_dir: str | Path) -> tuple[Path, LauncherConfig, list[Trial]]:
    """A sweep folder → (folder, config, trials); ConfigError (one line) if it is not one, or
    if its sweep.json cannot be read: without it the folder has no config to carry on with."""
    sweep_dir = Path(sweep_dir)
    spec = read_sweep_spec(sweep_dir)
    if spec.missing:
        raise ConfigError(f"{str(sweep_dir)!r} is not a sweep folder (no {SWEEP_FILE}); pass results/<sweep-id>")
    if spec.doc is None:
        raise ConfigError(
            f"{sweep_dir}: {spec.reason}; it holds the sweep's config and trial list, so the "
            "sweep cannot be read without it (each trials/*/trial.json keeps its own trial)"
        )
    try:
        trials = [Trial(**t) for t in spec.doc["trials"]]
    except TypeError as exc:  # not a mapping, or fields this launcher does not know
        raise ConfigError(f"{sweep_dir}: {SWEEP_FILE} is corrupt: a planned trial does not fit: {exc}") from None
    try:
        cfg = load_config(spec.doc["config"])
    except ConfigError as exc:  # say which file holds the config that does not load
        raise ConfigError(f"{sweep_dir}: {SWEEP_FILE} holds a config this launcher cannot load: {exc}") from None
    return sweep_dir, cfg, trials


def finish(sweep_dir: Path, cfg: LauncherConfig) -> SweepResult:
    """Rebuild table and report from the trial folders (run/tabulate.py)."""
    from launcher.run import tabulate  # lazy: pandas and the report stack, which a --detach submission never needs

    return tabulate.finish(sweep_dir, cfg)


def show(result: SweepResult) -> None:
    from launcher.run import tabulate  # lazy, as in finish

    tabulate.show(result)


def _run_batch(sweep_dir: Path, cfg: LauncherConfig, batch: list[Trial], progress_bars: bool) -> None:
    """Run a few trials and wait for them (a round of repeats, a step of an adaptive search)."""
    executor_for(cfg).run_batch(sweep_dir, batch, progress_bars=progress_bars)


def execute(
    sweep_dir: Path, cfg: LauncherConfig, trials: list[Trial], *, progress_bars: bool = True, detach: bool = False
) -> SweepResult | None:
    """Run the trials not yet done (the executor runs or submits and tracks them), round by round
    (run/repeats.py); then build the table. With detach (slurm), return None right after
    submission; also (detached) when the sweep stalled in the queue. An adaptive search or
    sweep.repeats=auto decides each step from the last, so it stays attached. Ctrl-C or SIGTERM: the
    executor stops what would go on running (a Slurm sweep's jobs, unless it was detached), the table is
    rebuilt, and the KeyboardInterrupt re-raised carries the line saying how to carry on (run/stopped.py)."""
    pending = [t for t in trials if not is_done(sweep_dir, t)]
    executor = executor_for(cfg)

    def run(batch: list[Trial]) -> None:
        # lazy: it reads tables (pandas), which a --detach submission skips
        from launcher.run.repeats import run_repeats

        # Every repeat of the batch's sizes, done or not: repeats=auto counts what already ran.
        sizes = {(t.variant, t.world_size) for t in batch}
        mine = [t for t in trials if (t.variant, t.world_size) in sizes]
        run_repeats(sweep_dir, cfg, mine, lambda round_: _run_batch(sweep_dir, cfg, round_, progress_bars))

    try:
        with sigterm_stops_as_ctrl_c():
            if cfg.sweep.search == "adaptive":
                from launcher.run.adaptive import run_adaptive  # lazy, as run_repeats

                run_adaptive(sweep_dir, cfg, trials, run)
            elif detach and not repeat_plan(cfg.sweep).auto:  # slurm only (the CLI refuses it locally)
                executor.submit_detached(sweep_dir, pending)
                follow = f"launcher status {sweep_dir}  —  table with: launcher collect {sweep_dir}"
                print(f"detached; follow with: {follow}")
                return None
            else:
                run(trials)
    except Stalled as stalled:
        detach_stalled(sweep_dir, cfg, stalled)
        return None
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        how = signal_name(exc)
        executor.interrupted(sweep_dir, detach=detach, how=how)
        table = finish(sweep_dir, cfg).table  # the table of what finished; the rest read cancelled or not started
        raise type(exc)(interrupted_line(sweep_dir, table, trials, how)) from None  # the CLI's one line
    return finish(sweep_dir, cfg)


def run_sweep(
    plan: PreparedSweep, overrides: Sequence[str], *, progress_bars: bool = True, detach: bool = False
) -> SweepResult | None:
    """Every trial is planned and checked (prepare_sweep) before this runs; create the folder, then execute."""
    cfg, trials = plan.cfg, [t for t, _ in plan.items]
    for line in plan.skipped:
        say(f"skipped (impossible): {line}")
    # What the executor writes per trial (Slurm: job scripts) is rendered before the folder exists: a
    # bad value stops here, not mid-submission.
    planned = Path(cfg.sweep.results_dir) / sweep_id(cfg, time.time(), [c for _, c in plan.items])
    executor_for(cfg).check_scripts(planned, trials)
    sweep_dir = create_sweep_dir(cfg, plan.items, overrides, plan.skipped, recipes=plan.recipes)
    say(f"sweep {sweep_dir.name}: {len(trials)} trials → {sweep_dir}", bold=sweep_dir.name)
    record_predicted_oom(sweep_dir, plan.predicted_oom)
    for trial_id, reason in plan.predicted_oom.items():
        say(f"{trial_id}: not launched: {reason} (run it anyway: sweep.force_sizes)")
    for trial_id, reason in plan.forced.items():
        say(f"{trial_id}: launched as sweep.force_sizes asks, though {reason}")
    return execute(sweep_dir, cfg, trials, progress_bars=progress_bars, detach=detach)


def resume_sweep(sweep_dir: str | Path, *, progress_bars: bool = True, detach: bool = False) -> SweepResult | None:
    """Carry on a sweep from its folder: finished trials are kept, the rest run (or are tracked)."""
    path, cfg, trials = load_sweep(sweep_dir)
    return execute(path, cfg, trials, progress_bars=progress_bars, detach=detach)


def show_and_exit_code(result: SweepResult | None) -> int:
    """Print the table; exit 0 when something completed (or the sweep detached), else 1."""
    if result is None:
        return 0
    show(result)
    return 0 if (result.table["status"] == "completed").any() else 1


def main(args: argparse.Namespace) -> int:
    """`launcher sweep`: plan and check every trial, then run (local) or submit and track (Slurm)."""
    if args.resume:
        if args.overrides:
            raise ConfigError(
                f"--resume takes no overrides (got {' '.join(args.overrides)}); the sweep folder holds its config"
            )
        return show_and_exit_code(resume_sweep(args.resume, progress_bars=not args.quiet, detach=args.detach))
    prepared = prepare_sweep(args.overrides, args.recipes)
    if args.detach:
        executor_for(prepared.cfg).check_detach()
    if args.detach and prepared.cfg.sweep.search == "adaptive":
        raise ConfigError(
            "--detach with sweep.search=adaptive: the search picks each size from the last result, "
            "so it must stay attached; use sweep.search=grid to detach"
        )
    if args.detach and repeat_plan(prepared.cfg.sweep).auto:
        raise ConfigError(
            "--detach with sweep.repeats=auto: each round of repeats is decided from the last, so it "
            "must stay attached; set a number of repeats (e.g. sweep.repeats=3) to detach"
        )
    return show_and_exit_code(run_sweep(prepared, args.overrides, progress_bars=not args.quiet, detach=args.detach))


def collect(sweep_dir: str | Path, *, ask_scheduler: bool = True) -> SweepResult:
    """Ask the scheduler once (Slurm), then rebuild the table and report from the folder."""
    path, cfg, _ = load_sweep(sweep_dir)
    if ask_scheduler:
        executor_for(cfg).refresh(path)
    return finish(path, cfg)
