"""What a plan's table needs said under it so that its figures read right on their own: why no
size is recommended when nothing fits, why an efficiency exceeds 1, which sizes barely fit. Pure."""

from __future__ import annotations

import dataclasses

import pandas as pd

from launcher.config.schema import LauncherConfig
from launcher.layouts import LAYOUTS, DataParallel, traits
from launcher.perf.memory import GIB
from launcher.perf.memory_limit import Limit, limit_of
from launcher.results.policy import ONLY, Recommendation

ONLY_PREDICTED = "the only size predicted to run"
"""policy.ONLY in a plan's words: nothing completed, the size was predicted."""


def plan_words(rec: Recommendation, table: pd.DataFrame, cfg: LauncherConfig) -> Recommendation:
    """A recommendation made on predicted rows (judged as if completed), said in plan words: the one size
    predicted to run is not "the only size that completed", and a plan with none says why (no_fit)."""
    if rec.world_size is None:
        return no_fit(rec, table, cfg)
    return dataclasses.replace(rec, reason=rec.reason.replace(ONLY, ONLY_PREDICTED))


def no_fit(rec: Recommendation, table: pd.DataFrame, cfg: LauncherConfig) -> Recommendation:
    """A plan with no predicted size says so in plan words (a sweep's "no trial completed" would
    read as if something had run): every size predicted out of memory, the least any needs, and what
    to try. `table`: the plan's rows, statuses as recommend() judged them (`oom`, `impossible`)."""
    oom = table[table["status"] == "oom"] if "status" in table else table.iloc[:0]
    if rec.world_size is not None or oom.empty or "memory_gib" not in oom or oom["memory_gib"].isna().all():
        return rec
    least = oom.loc[oom["memory_gib"].idxmin()]
    limit = limit_of(cfg)
    usable = f" > {limit.usable_bytes / 2**30:.1f} GiB usable" if limit else ""
    every = (
        "every size is predicted out of memory"
        if len(oom) == len(table)
        else f"no size is predicted to run: {len(oom)} out of memory, the rest impossible (see reason)"
    )
    row = traits(cfg.parallel.layout) if cfg.parallel.layout in LAYOUTS else None
    sharded = row is None or row.data_parallel == DataParallel.fsdp  # more GPUs shrink what each holds
    tries = [] if sharded else ["parallel=fsdp (parameters, gradients and optimizer state sharded over the GPUs)"]
    tries.append("launcher plan --search (every layout, recompute and micro-batch)")
    tries.append("more GPUs (--gpus)" if sharded else "more GPUs once the state is sharded")
    reason = (
        f"{every}: the least any size needs is {least['memory_gib']:.1f} GiB per rank (at "
        f"{int(least['world_size'])} GPUs){usable}; try {', '.join(tries[:-1])} or {tries[-1]}"
    )
    return dataclasses.replace(rec, reason=reason)


SLOWER = (
    ("recompute_share", "recompute"),
    ("bubble_share", "the pipeline bubble"),
    ("comm_share", "exposed communication"),
)
"""The terms of a step that make the smallest size slower per GPU than a larger one, in words."""
ABOVE_ONE = 1.005
"""An efficiency the table shows above 1.00 (rounded to 2 places)."""


def _sizes(ns: pd.Series) -> str:
    return ", ".join(str(int(n)) for n in ns)


def efficiency_lines(table: pd.DataFrame, *, searched: bool = False) -> list[str]:
    """One line per variant whose efficiency exceeds 1 somewhere: efficiency is measured against the
    smallest predicted size, and that size is slower per GPU, by the term whose share of its step most
    exceeds the best size's (`searched`: the smallest size's best candidate is what fits there)."""
    if "efficiency" not in table or "status" not in table:
        return []
    done = table[table["status"] == "predicted"]
    groups = done.groupby("variant", sort=False) if "variant" in done else [("", done)]
    lines = []
    for variant, rows in groups:
        above = rows[rows["efficiency"] >= ABOVE_ONE]
        if above.empty:
            continue
        base = rows.loc[rows["world_size"].idxmin()]
        best = above.loc[above["efficiency"].idxmax()]
        n0, n1 = int(base["world_size"]), int(best["world_size"])
        gaps = {col: (base.get(col) or 0.0) - (best.get(col) or 0.0) for col, _ in SLOWER if col in rows}
        col = max(gaps, key=gaps.get, default=None)
        if col is not None and gaps[col] > 0.005:
            why = f"{dict(SLOWER)[col]} is {base[col]:.0%} of its step against {best[col]:.0%} at {n1} GPUs"
        else:
            per = base["tokens_per_s_per_device"], best["tokens_per_s_per_device"]
            why = f"{per[0]:,.0f} tokens/s per GPU against {per[1]:,.0f} at {n1} GPUs"
        fits = " (the best candidate that fits in its memory)" if searched else ""
        where = f"{variant}: " if variant else ""
        lines.append(
            f"{where}eff above 1 at {_sizes(above['world_size'])} GPUs: efficiency is against the smallest size, "
            f"{n0} GPUs{fits}, which is slower per GPU: {why}"
        )
    return lines


TIGHT = 0.05
"""A predicted size whose estimate is within this share of the usable memory is tight: the estimate's
own error (benchmarks/results/memory_accuracy.md) is of that order."""


def tight(table: pd.DataFrame, limit: Limit | None) -> pd.Series:
    """Per row: a size predicted to run (status `completed` as recommend() judges it) whose memory
    estimate is within TIGHT of `limit`'s usable bytes."""
    if limit is None or "memory_gib" not in table:
        return pd.Series(False, index=table.index)
    need = pd.to_numeric(table["memory_gib"], errors="coerce") * GIB
    return (table["status"] == "completed") & (need >= limit.usable_bytes * (1 - TIGHT))


def tight_line(table: pd.DataFrame, cfg: LauncherConfig) -> str | None:
    """The footnote of the rows marked `tight` in the memory column (None when none is)."""
    if "memory_tight" not in table or not table["memory_tight"].fillna(False).astype(bool).any():
        return None
    rows = table[table["memory_tight"].fillna(False).astype(bool)]
    limit = limit_of(cfg)
    usable = f"the {limit.usable_bytes / GIB:.1f} GiB usable" if limit else "the usable memory"
    return (
        f"tight: {_sizes(rows['world_size'])} GPUs need within {TIGHT:.0%} of {usable} "
        f"({', '.join(f'{g:.1f}' for g in rows['memory_gib'])} GiB): the estimate's error could make them run out "
        "of memory; leave room (more recompute, a smaller batch.micro, more sharding) or measure it (--verify)"
    )
