"""What a plan's table needs said under it so that its figures read right on their own: why no
size is recommended when nothing fits. Pure."""

from __future__ import annotations

import dataclasses

import pandas as pd

from launcher.config.schema import LauncherConfig
from launcher.layouts import LAYOUTS, DataParallel, traits
from launcher.perf.memory_limit import limit_of
from launcher.results.policy import Recommendation


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
