"""`launcher plan --search` as the terminal shows it: per size the best candidate in the plan's
table (judged by sweep.policy), the runners-up with why each loses, the recommendation naming
size and layout; `--output` writes every candidate and saves the plan (saved_plan.py) for `run --from`."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence

from launcher.config.builtin_support import builtin_lacks
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.perf.candidates import Candidate, builtin_runs
from launcher.perf.memory_limit import limit_of
from launcher.perf.notes import efficiency_lines, tight_line
from launcher.perf.plan_table import fp8_mfu_ratio, write_output
from launcher.perf.saved_plan import save_search_plan, saved_line
from launcher.perf.search import TOP, Search, search
from launcher.perf.search_table import best_forecast, every_candidate, key_line, runner_lines
from launcher.perf.terms import dominant_lines, fp8_line, moe_line
from launcher.report.terminal import PLAN_PRIORITY, print_table


def memory_line(cfg: LauncherConfig) -> str:
    """The footer line saying what memory the plan checked against."""
    limit = limit_of(cfg)
    if limit is None:
        return (
            "memory: estimated per rank (launcher/perf/memory.py), not checked: the device's memory is unknown "
            "(set cluster.device_memory_gb)"
        )
    return f"memory: the neediest rank's estimate (launcher/perf/memory.py) against {limit.describe()}"


Verify = Callable[[Sequence[str], "str | None", Search, int, int], int]
"""run/verify.py's verify(overrides, recipes, found, world_size, k): handed down by the CLI, as
perf/ may not import the sweep driver above it."""


def search_main(
    cfg: LauncherConfig,
    sizes: list[int],
    args: argparse.Namespace,
    *,
    overrides: Sequence[str] = (),
    verify: Verify | None = None,
) -> int:
    """Search, print, write; 0 when a size is recommended. With `verify` (--verify K) the top K at
    the recommended size then run for real, and what they measured recommends."""
    found = search(cfg, sizes, assume_mfu=args.assume_mfu)
    fc = best_forecast(cfg, found)
    total = sum(len(s.ranked) + len(s.dropped) for s in found.sizes)
    dropped = sum(len(s.dropped) for s in found.sizes)
    footer = [
        f"runners-up (top {TOP} per size):",
        *runner_lines(found),
        f"searched {total} candidates ({dropped} over the memory limit) from the layout table; within a size "
        "tokens/s, $ per token and time to a token budget rank them alike",
        f"model: presets, MFU {found.mfu:.2f} ({found.mfu_source})",
        *dominant_lines(fc.table, "", False),
        *efficiency_lines(fc.table, searched=True),
        *[line for line in [tight_line(fc.table, cfg), key_line(found)] if line],
        *[line for line in [moe_line(cfg, searched=True), fp8_line(fp8_mfu_ratio(cfg, args.assume_mfu))] if line],
        memory_line(cfg),
    ]
    rec, best = fc.recommendation, None
    if rec.world_size is not None:
        footer += recommended_lines(cfg, found, rec.world_size)
        best = startable_best(cfg, found, rec.world_size)
    print_table(
        fc.table.dropna(axis=1, how="all"),
        rec,
        unit="GPU",
        everything=None,
        priority=PLAN_PRIORITY,
        title=f"plan --search: {cfg.model.name}, {cfg.cluster.name} (predicted; nothing ran)",
        footer="\n".join(footer),
    )
    if args.output:
        write_output(every_candidate(found), args.output)
        saved = save_search_plan(
            args.output, recipes=args.recipes, overrides=overrides, cfg=cfg, forecast=fc, best=best
        )
        print(f"every candidate written to {args.output}")
        print(saved_line(saved, rec))
    if verify is not None and rec.world_size is not None:
        runs = runnable(cfg, found)
        if not next(s for s in runs.sizes if s.world_size == rec.world_size).ranked:
            raise ConfigError(
                f"--verify {args.verify}: nothing the built-in trainer runs fits at {rec.world_size} GPUs (the "
                "search's best there need per-op checkpointing, model.activation_checkpointing=op); run them under "
                "torchtitan (job=command), or verify at another size (--gpus)"
            )
        return verify(overrides, args.recipes, runs, rec.world_size, args.verify)
    return 0 if rec.world_size is not None else 1


def recommended_lines(cfg: LauncherConfig, found: Search, n: int) -> list[str]:
    """`Recommended:` with the best candidate's overrides at `n` GPUs; where the recipe is the built-in
    trainer's and that best asks what it lacks (per-op checkpointing), one more line says so and names
    the best it runs."""
    ranked = next(s for s in found.sizes if s.world_size == n).ranked
    best = ranked[0].candidate
    out = [f"Recommended: {n} GPUs with {best.layout}: {' '.join(best.overrides())}"]
    if not builtin_runs(cfg, best):
        lacks = ", ".join(builtin_lacks(best.config(cfg)))
        own = next((s for s in ranked if builtin_runs(cfg, s.candidate)), None)
        alt = (
            f"the best it runs at {n} GPUs: {own.candidate.label} "
            f"({own.tokens_per_s / ranked[0].tokens_per_s - 1:+.0%}): {' '.join(own.candidate.overrides())}"
            if own
            else f"nothing it runs fits at {n} GPUs"
        )
        out.append(
            f"  {lacks} is torchtitan's per-op recompute, which the built-in trainer does not implement: run it "
            f"under torchtitan (job=command); {alt}"
        )
    return out


def startable_best(cfg: LauncherConfig, found: Search, n: int) -> Candidate | None:
    """What a saved plan hands `run --from` at `n` GPUs: the best candidate the recipe's trainer runs (the
    built-in trainer lacks per-op checkpointing, which the search's best may use); None when none fits."""
    ranked = next(s for s in runnable(cfg, found).sizes if s.world_size == n).ranked
    return ranked[0].candidate if ranked else None


def runnable(cfg: LauncherConfig, found: Search) -> Search:
    """`found` less the candidates the recipe's trainer cannot run, for --verify to run for real."""
    sizes = [
        dataclasses.replace(s, ranked=[x for x in s.ranked if builtin_runs(cfg, x.candidate)]) for s in found.sizes
    ]
    return dataclasses.replace(found, sizes=sizes)
