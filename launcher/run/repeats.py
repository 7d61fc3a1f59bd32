"""Repeats of each size (sweep.repeats), round by round.

Every trial of every round was planned (and checked) before the sweep folder existed, in round
order (trials/spec.py: 1,2,4,1,2,4,…). A fixed count runs them all in that order. `auto` runs
the first rounds for every size, then another round only for the sizes whose tokens/s interval
is still wider than sweep.target_ci, up to sweep.max_repeats; the trials no size needed are
closed as `skipped` with the reason. Each decision is re-derived from the trial folders, so a
resumed sweep carries on where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from launcher.config.schema import LauncherConfig
from launcher.results.scaling import variant_key
from launcher.results.table import build_table
from launcher.results.uncertainty import median_interval
from launcher.trials.folder import close_skipped, is_done
from launcher.trials.spec import RepeatPlan, Trial, repeat_plan

SKIPPED_BY_AUTO = "sweep.repeats=auto did not need it"


def judge(values: Sequence[float], ran: int, plan: RepeatPlan) -> str | None:
    """None: the size needs another repeat; else why its repeats are over. `values`: tokens/s of
    its completed repeats; `ran`: its trials that ran (completed or not)."""
    if ran < plan.first:
        return None
    if not values:
        return f"none of its {ran} repeats completed"
    half = median_interval(values).half_width()
    spread = f"±{half:.1%}" if math.isfinite(half) else "an unknown spread (fewer than 2 completed)"
    target = f"sweep.target_ci={plan.target_ci:g}"
    if half <= plan.target_ci:
        return f"its tokens/s interval is {spread} after {ran} repeats, within {target}"
    if ran >= plan.planned:
        return (
            f"its tokens/s interval is still {spread} after {ran} repeats (sweep.max_repeats={plan.planned}; {target})"
        )
    return None


def _sizes(trials: Sequence[Trial]) -> dict[tuple[str, int], list[Trial]]:
    out: dict[tuple[str, int], list[Trial]] = {}
    for t in sorted(trials, key=lambda t: t.index):
        out.setdefault((t.variant, t.world_size), []).append(t)
    return out


def next_round(
    df: pd.DataFrame, trials: Sequence[Trial], plan: RepeatPlan, done: Callable[[Trial], bool]
) -> tuple[list[Trial], dict[tuple[str, int], str]]:
    """The next round (one trial of each size still short of its target, in sweep order) and, for
    every size whose repeats are over, why."""
    rows = df.set_index("trial_id")
    batch: list[Trial] = []
    over: dict[tuple[str, int], str] = {}
    for key, mine in _sizes(trials).items():
        finished = [t for t in mine if done(t)]
        status = rows.loc[[t.trial_id for t in finished], "status"] if finished else pd.Series(dtype=object)
        ran = int((status != "skipped").sum())
        values = rows.loc[status.index[status == "completed"], "tokens_per_s"].dropna().tolist()
        verdict = judge(values, ran, plan)
        pending = [t for t in mine if not done(t)]
        if verdict is None and pending:
            batch.append(pending[0])
        elif verdict is not None:
            over[key] = verdict
    return sorted(batch, key=lambda t: t.index), over


def run_repeats(
    sweep_dir: Path,
    cfg: LauncherConfig,
    trials: Sequence[Trial],
    run: Callable[[list[Trial]], None],
    log: Callable[[str], None] = print,
) -> None:
    """Run `trials` (any sizes) by the sweep's repeat plan: all not yet done, in order, for a
    fixed count; round by round for `auto`, closing what no size needed."""
    plan = repeat_plan(cfg.sweep)

    def done(t: Trial) -> bool:
        return is_done(sweep_dir, t)

    if not plan.auto:
        pending = [t for t in trials if not done(t)]
        if pending:
            run(pending)
        return
    while True:
        batch, over = next_round(build_table(sweep_dir), trials, plan, done)
        if not batch:
            break
        log(f"repeats=auto: round of {', '.join(t.trial_id for t in batch)}")
        run(batch)
    for key, verdict in over.items():
        for t in _sizes(trials)[key]:
            _close(sweep_dir, t, f"{SKIPPED_BY_AUTO}: {verdict}", log)


def _close(sweep_dir: Path, t: Trial, reason: str, log: Callable[[str], None]) -> None:
    left = close_skipped(sweep_dir, t, reason)
    if left:
        log(f"repeats=auto: {left}")


def summary(df: pd.DataFrame, cfg: LauncherConfig, unit: str = "rank") -> str | None:
    """One line for the report of an `auto` sweep: each size's repeats and its interval's half-width."""
    plan = repeat_plan(cfg.sweep)
    if not plan.auto or df.empty:
        return None
    done = df[df["status"] == "completed"]
    parts = []
    for (variant, n), rows in done.groupby([variant_key(done), "world_size"]):
        half = median_interval(rows["tokens_per_s"]).half_width()
        spread = f"±{half:.1%}" if math.isfinite(half) else "spread unknown"
        short = " (above target at sweep.max_repeats)" if half > plan.target_ci and len(rows) >= plan.planned else ""
        parts.append(
            f"{variant + ' ' if variant else ''}{int(n)} {unit}{'s' * (n != 1)}: {spread} after {len(rows)}{short}"
        )
    return (
        f"Repeats: sweep.repeats=auto (tokens/s interval to ±{plan.target_ci:.0%}, {plan.first}–{plan.planned} "
        f"repeats per size): " + "; ".join(parts) + "."
    )
