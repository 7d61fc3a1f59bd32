"""`launcher run --from results/<sweep-id>` (or `--from plan.json`): the long run at the size and layout
the sweep (or a saved plan) recommends.

The sweep's table is rebuilt from its folder (nothing in it is written) and judged by the sweep's
own policy, as `launcher collect` would; the recommended combination's overrides, as the sweep
stored them, are composed again with the recommended size, `run.requeue=true` where the cluster
requeues jobs and the trainer can resume, and the user's own overrides last, so theirs win.
A plan saved by `launcher plan … --output FILE` (perf/saved_plan.py) is run the same way: its
overrides, then its recommended candidate's (a `plan --search` pick's layout, degrees and batch
split), then its size.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.config.cluster_traits import cluster_traits
from launcher.config.compose import compose_config
from launcher.config.derived import ranks_per_node
from launcher.config.errors import ConfigError
from launcher.config.expand import expand
from launcher.config.plain import current_spelling
from launcher.config.schema import LauncherConfig
from launcher.layouts import traits
from launcher.perf.plan import sweep_recipes
from launcher.perf.saved_plan import SavedPlan, is_saved_plan_path, read_saved
from launcher.results.confidence import UNKNOWN_SWEEP
from launcher.results.cost import pricing_of
from launcher.results.policy import Recommendation, policy_of, recommend
from launcher.results.table import build_table
from launcher.run.sweep import load_sweep
from launcher.trials.folder import read_sweep_spec
from launcher.trials.spec import Trial

KEPT_SWEEP_KEYS = ("sweep.results_dir",)
"""The sweep.* overrides a run keeps: where results go. The others (sizes, steps, policy, sweep.name)
describe the sweep, not the run; sweep.name would even name the sweep's own, existing folder."""


@dataclass(kw_only=True, frozen=True)
class Choice:
    overrides: list[str]
    """Everything the run composes: the sweep's, the recommended size, requeue, then the user's."""
    recipes: str | None
    """The recipe folder to compose from (--recipes, else the sweep's own)."""
    lines: list[str]
    """What was chosen and why, and each override with where it came from."""


def choose(source: Path, user: Sequence[str], recipes: str | None) -> Choice:
    """The run a sweep folder, or a saved plan (a file), recommends; ConfigError (one line) for a
    folder that is not a sweep, a file that is not a saved plan, or either recommending nothing to run."""
    if is_saved_plan_path(source):
        return _choose_plan(read_saved(source), user, recipes)
    return _choose_sweep(source, user, recipes)


def _choose_sweep(sweep_dir: Path, user: Sequence[str], recipes: str | None) -> Choice:
    try:
        path, cfg, trials = load_sweep(sweep_dir)
    except ConfigError as exc:
        raise ConfigError(f"--from: {exc}") from None
    rec = recommend(build_table(path, pricing_of(cfg)), policy_of(cfg), unknown_spread=UNKNOWN_SWEEP)
    if rec.world_size is None:
        raise ConfigError(
            f"--from {str(sweep_dir)!r}: the sweep recommends no size ({rec.reason}); finish or rerun it "
            "(launcher sweep --resume, launcher collect), or give the size: "
            "launcher run run.world_size=N / cluster.nodes=N"
        )
    trial = _recommended_trial(trials, rec, sweep_dir)
    recipes = sweep_recipes(path, recipes)
    sweeps = _combination(path, rec)
    size = [
        f"run.world_size={trial.world_size}"
        if cluster_traits(cfg.cluster).ranks_here
        else f"cluster.nodes={trial.nodes}"
    ]
    requeue, why_not = _requeue(compose_config([*sweeps, *size, *user], recipes), user)
    lines = [
        f"from {path}: the sweep recommends {rec.reason}",
        *([f"  confidence: {rec.confidence}"] if rec.confidence else []),
    ]
    said = [(sweeps, "the sweep's"), (size, "the recommended size"), (requeue, REQUEUE), (list(user), YOURS)]
    return Choice(overrides=[*sweeps, *size, *requeue, *user], recipes=recipes, lines=lines + _said(said, why_not))


REQUEUE = "requeue and resume on Slurm's warning"
YOURS = "yours, last: they win"


def _said(said: Sequence[tuple[Sequence[str], str]], why_not: str) -> list[str]:
    """Each group of overrides with where it came from, then why a run is not requeued."""
    return [f"  {shlex.join(over)}   ({why})" for over, why in said if over] + ([f"  {why_not}"] if why_not else [])


def _choose_plan(plan: SavedPlan, user: Sequence[str], recipes: str | None) -> Choice:
    """The run a saved plan recommends: its overrides (less its sweep.* settings but where results go),
    its candidate's, the candidate's size, requeue where it applies, then the user's."""
    src = f"--from {str(plan.path)!r}"
    if not recipes and plan.recipes and not Path(plan.recipes).is_dir():
        raise ConfigError(
            f"{src} was planned from the recipe folder {plan.recipes!r}, which is gone; pass --recipes DIR "
            "with the recipes it used"
        )
    recipes = recipes or plan.recipes
    c = plan.recommended
    base = [o for o in map(current_spelling, plan.overrides) if _kept(o)]
    cand = [current_spelling(o) for o in c["overrides"]]
    cfg = compose_config([*base, *cand], recipes)
    size = _plan_size(cfg, c["gpus"], user, src)
    requeue, why_not = _requeue(compose_config([*base, *cand, *size, *user], recipes), user)
    tokens = c.get("tokens_per_s")
    figures = f", {tokens:,.0f} tokens/s predicted" if isinstance(tokens, (int, float)) else ""
    lines = [
        f"from {plan.path}: the plan recommends {plan.reason} ({plan.saved_by}: predicted, nothing measured)",
        f"  candidate: {c.get('candidate', c.get('layout', '?'))}{figures}",
    ]
    said = [
        (base, "the plan's"),
        (cand, "the recommended candidate"),
        (size, "the recommended size"),
        (requeue, REQUEUE),
        (list(user), YOURS),
    ]
    return Choice(overrides=[*base, *cand, *size, *requeue, *user], recipes=recipes, lines=lines + _said(said, why_not))


def _plan_size(cfg: LauncherConfig, gpus: int, user: Sequence[str], src: str) -> list[str]:
    """`run.world_size=N` where ranks run here, else the nodes holding N GPUs; a size that is not whole
    nodes is refused unless the user gives the size."""
    if cluster_traits(cfg.cluster).ranks_here:
        return [f"run.world_size={gpus}"]
    rpn = ranks_per_node(cfg.cluster)
    if gpus % rpn and not any(_key(o) in ("cluster.nodes", "run.world_size") for o in user):
        raise ConfigError(
            f"{src}: the plan recommends {gpus} GPUs, not whole nodes of {rpn} ranks (cluster={cfg.cluster.name}); "
            "give the size: launcher run --from … cluster.nodes=N"
        )
    return [f"cluster.nodes={max(1, gpus // rpn)}"]


def _recommended_trial(trials: Sequence[Trial], rec: Recommendation, sweep_dir: Path) -> Trial:
    """The first planned trial of the recommended size and combination: its node count."""
    for t in trials:
        if t.world_size == rec.world_size and t.variant == rec.variant:
            return t
    raise ConfigError(  # a hand-edited sweep.json: the table's rows do not match its plan
        f"--from {str(sweep_dir)!r}: sweep.json plans no trial of {rec.world_size} ranks"
        + (f" in {rec.variant}" if rec.variant else "")
        + ", which its table recommends; rerun the sweep"
    )


def _combination(sweep_dir: Path, rec: Recommendation) -> list[str]:
    """The recommended combination's overrides as the sweep stored them (keys renamed since respelled),
    less the sweep's own settings (KEPT_SWEEP_KEYS aside)."""
    variants = expand(read_sweep_spec(sweep_dir).doc["overrides"])
    found = [v for v in variants if v.label == rec.variant]  # one combination: both ''
    if not found:
        raise ConfigError(
            f"--from {str(sweep_dir)!r}: the recommended combination {rec.variant!r} is not one of the overrides "
            "sweep.json stores (a `plan --verify` sweep keeps its candidates' settings in trial.json only); "
            "run the candidate with the overrides `plan --verify` printed for it"
        )
    return [o for o in map(current_spelling, found[0].overrides) if _kept(o)]


def _kept(override: str) -> bool:
    """An override a run keeps: anything but sweep.* settings (KEPT_SWEEP_KEYS aside)."""
    return not _key(override).startswith("sweep.") or _key(override) in KEPT_SWEEP_KEYS


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _requeue(cfg: LauncherConfig, user: Sequence[str]) -> tuple[list[str], str]:
    """(`run.requeue=true` or nothing, why not where it would be expected): a long run on a batch cluster
    checkpoints on the time-limit warning and requeues, where the built-in trainer can resume its layout."""
    if not cluster_traits(cfg.cluster).batch_jobs or any(_key(o) == "run.requeue" for o in user):
        return [], ""
    if cfg.job.kind == "command":
        return [], "not requeued: your command saves its own checkpoints; add --requeue if it resumes from them"
    if not traits(cfg.parallel.layout).checkpoint:
        return [], f"not requeued: parallel.layout={cfg.parallel.layout} cannot be checkpointed yet"
    return ["run.requeue=true"], ""
