"""Flags on a trial's row: measurements a reader must not take at face value. One home for what
each flag says and for its bound, so the table, the report and the recommendation agree."""

from __future__ import annotations

import math
from typing import Any, Mapping

STRAGGLER_SPREAD = 0.10
"""A trial whose slowest rank's median step time is more than this much over its fastest rank's
(`rank_spread`, launcher/train/metrics.spread) has a straggler."""
BUSY_SHARE = 0.9
"""A CPU trial whose ranks' threads demand at least this share of their machine's cores (without
oversubscribing them: cpu_contention 1) ran on a busy host: nothing left for the launcher and the
system, so its step times are noisier than the table's figures suggest."""
OVERSUBSCRIBED = "oversubscribed"
STRAGGLER = "straggler"
BUSY = "busy host"
_SEP = "; "


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def oversubscribed(metrics: Mapping[str, Any], world_size: int | None) -> str | None:
    """`oversubscribed: 4 ranks on 2 cores (cpu_contention 2.0)` when the busiest machine ran more
    threads than it has cores: lock-step ranks then wait for cores, so the trial measures
    contention, not scaling."""
    c = _number(metrics.get("cpu_contention"))
    if c is None or c <= 1.0 + 1e-9:
        return None
    cores, threads = _number(metrics.get("cpus_per_machine")), _number(metrics.get("threads_per_rank")) or 1
    if world_size and cores and (metrics.get("machines") or 1) == 1:
        ranks = f"{world_size} rank{'s' * (world_size != 1)}" + (f" × {threads:g} threads" if threads > 1 else "")
        where = f"{ranks} on {cores:g} core{'s' * (cores != 1)}"
    else:
        where = f"{c:.1f}× as many threads as cores on the busiest machine"
    return f"{OVERSUBSCRIBED}: {where} (cpu_contention {c:.1f})"


def busy_host(metrics: Mapping[str, Any], world_size: int | None) -> str | None:
    """`busy host: 2 ranks on 2 cores keep every core busy (cpu_contention 1.0) …` when a CPU trial's
    ranks on one machine, under no CPU quota, demand at least BUSY_SHARE of its cores (more than
    all of them is `oversubscribed`). Several machines or a quota: the record cannot say; no flag."""
    c = _number(metrics.get("cpu_contention"))
    cores, threads = _number(metrics.get("cpus_per_machine")), _number(metrics.get("threads_per_rank")) or 1
    quotas = metrics.get("cpu_quota_per_rank") or []
    one_machine = (metrics.get("machines") or 1) == 1 and not any(q is not None for q in quotas)
    if c is None or c > 1.0 + 1e-9 or metrics.get("cuda_device_name") or not (world_size and cores and one_machine):
        return None
    share = world_size * threads / cores
    if share < BUSY_SHARE:
        return None
    ranks = f"{world_size} rank{'s' * (world_size != 1)}" + (f" × {threads:g} threads" if threads > 1 else "")
    return (
        f"{BUSY}: {ranks} on {cores:g} core{'s' * (cores != 1)} keep {share:.0%} of them busy (cpu_contention "
        f"{c:.1f}), none left for the launcher and the system: its step times are noisier"
    )


def straggler(metrics: Mapping[str, Any], hosts: Any = None) -> str | None:
    """`straggler: rank 3's median step (on host node-b) is 19% over the fastest rank's (rank_spread
    0.19 > 0.10)` when the ranks' own median step times spread beyond STRAGGLER_SPREAD. `hosts`:
    the record's per-rank host names (its `hosts`, in rank order), so the reader knows which
    machine to look at; without them the rank alone is named."""
    spread = _number(metrics.get("rank_spread"))
    if spread is None or spread <= STRAGGLER_SPREAD:
        return None
    bound = f"(rank_spread {spread:.2f} > {STRAGGLER_SPREAD:.2f})"
    per_rank = metrics.get("rank_step_time_median_s")
    times = [_number(t) for t in per_rank] if isinstance(per_rank, list) else []
    if len(times) > 1 and all(t is not None for t in times):
        slowest = max(range(len(times)), key=lambda r: times[r])  # type: ignore[arg-type,return-value]
        on = f" (on host {hosts[slowest]})" if isinstance(hosts, list) and len(hosts) == len(times) else ""
        return f"{STRAGGLER}: rank {slowest}'s median step{on} is {spread:.0%} over the fastest rank's {bound}"
    return f"{STRAGGLER}: the ranks' median steps spread {spread:.0%} {bound}"


def trial_flags(metrics: Mapping[str, Any], world_size: int | None, hosts: Any = None) -> str | None:
    """Every flag of one trial's record metrics, joined; None when there is none. `hosts`: the
    record's per-rank host names (a straggler's host is named)."""
    found = (oversubscribed(metrics, world_size), busy_host(metrics, world_size), straggler(metrics, hosts))
    flags = [f for f in found if f]
    return _SEP.join(flags) or None


def split(flags: Any) -> list[str]:
    """The flags of a `flags` cell (empty for a null cell)."""
    return [f for f in str(flags).split(_SEP) if f] if isinstance(flags, str) else []


def kinds(flags: Any) -> list[str]:
    """The distinct kinds (`straggler`, `oversubscribed`, `busy host`) of a `flags` cell, in order."""
    return list(dict.fromkeys(f.split(":", 1)[0] for f in split(flags)))


def join(cells: Any) -> str | None:
    """The distinct flags of several cells (the repeats of a size), in first-seen order."""
    seen = list(dict.fromkeys(f for cell in cells for f in split(cell)))
    return _SEP.join(seen) or None


def detail(flags: Any, kind: str) -> str | None:
    """What a flag of `kind` says after its `kind: ` prefix, from a `flags` cell."""
    prefix = f"{kind}: "
    return next((f.removeprefix(prefix) for f in split(flags) if f.startswith(prefix)), None)
