"""The corpus rows that use what issue 24 added (hsdp, context parallel, fp8, mixture of experts, NVLink
domains beyond a node) and how the published replay fares on each, feature by feature and source by
source, against the replay's own goals (replay_case.py). Written into published_replay.md."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.replay_case import GOAL_EFF, GOAL_EFF_SHARE, GOAL_THR, GOAL_THR_SHARE, Case
from benchmarks.replay_mapping import num

FEATURES: dict[str, Callable[[dict], bool]] = {
    "hsdp": lambda r: r.get("layout") == "hsdp",
    "context parallel (cp > 1)": lambda r: (num(r.get("cp")) or 1) > 1,
    "fp8": lambda r: r.get("precision") == "fp8",
    "mixture of experts": lambda r: (num(r.get("n_experts")) or 0) > 0,
    "NVLink domain beyond a node": lambda r: (num(r.get("nvlink_domain")) or 0) > (num(r.get("gpus_per_node")) or 0),
}
"""Feature → whether a corpus row uses it."""


def _verdict(k: int, n: int, goal: float) -> str:
    if not n:
        return "no rows to judge"
    return f"{k}/{n} = {k / n:.0%} (goal ≥ {goal:.0%}: {'met' if k / n >= goal else '**NOT met**'})"


def _median_error(cases: list[Case]) -> str:
    err = [c.out["predicted_loso"] / c.published - 1 for c in cases if not c.skip]
    return f"{float(np.median(err)):+.0%} ({len(err)})" if err else "—"


def _line(name: str, mine: list[Case], others: list[Case]) -> str:
    """`others`: the same sources' rows without the feature, whose error says what is the source's own."""
    if not mine:
        return f"| {name} | 0 | — | no corpus row (benchmarks/data/README.md says what was looked for) | — | — | — |"
    done = [c for c in mine if not c.skip]
    skipped = [c for c in mine if c.skip]
    why = f" ({len(skipped)}: {skipped[0].skip.split(' in /')[0]})" if skipped else ""
    if not done:
        return f"| {name} | {len(mine)} | 0{why} | — | — | — | {_median_error(others)} |"
    err = [c.out["predicted_loso"] / c.published - 1 for c in done]
    eff = [
        c.out["predicted_eff_loso"] - c.out["published_eff"]
        for c in done
        if "predicted_eff_loso" in c.out and "published_eff" in c.out
    ]
    thr = _verdict(sum(abs(e) <= GOAL_THR for e in err), len(err), GOAL_THR_SHARE)
    effs = _verdict(sum(abs(e) <= GOAL_EFF for e in eff), len(eff), GOAL_EFF_SHARE) if eff else "no pairs"
    return (
        f"| {name} | {len(mine)} | {len(done)}{why} | {thr} | {float(np.median(err)):+.0%} | {effs} | "
        f"{_median_error(others)} |"
    )


def feature_lines(cases: list[Case]) -> list[str]:
    """One line per feature (all its rows), then one per source that has rows of it (LOSO figures), each
    beside the median error of the same sources' rows without the feature."""
    out = [
        f"| feature / source | rows | replayed (skipped: first reason) | throughput within {GOAL_THR:.0%} (LOSO) | "
        f"median error (LOSO) | efficiency within {GOAL_EFF * 100:.0f} pts (LOSO) | "
        "same sources' rows without it: median error (rows) |",
        "|---|---|---|---|---|---|---|",
    ]
    for feature, uses in FEATURES.items():
        mine = [c for c in cases if uses(c.row)]
        sources = sorted({c.source for c in mine})
        others = [c for c in cases if c.source in sources and not uses(c.row)]
        out.append(_line(f"**{feature}**", mine, others))
        for source in sources:
            out.append(
                _line(
                    f"{feature}: {source}",
                    [c for c in mine if c.source == source],
                    [c for c in others if c.source == source],
                )
            )
    return out
