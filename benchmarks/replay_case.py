"""What the published replay (published_replay.py) and its result files (replay_report.py) share:
one corpus row on its way through the replay, and the goals the replay is judged on."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from benchmarks.replay_mapping import Mapped
from launcher.config.schema import LauncherConfig

QUANTILE = 0.9
"""The share of (source-weighted) leave-one-source-out errors the preset interval covers."""
GOAL_THR, GOAL_THR_SHARE, GOAL_THR_MEDIAN = 0.25, 0.90, 0.10
"""Per-GPU throughput within ±25% of the published figure in ≥ 90% of replayed rows, and a median |error| ≤ 10%
(issue 32's acceptance; issue 14 had set 80% and no median)."""
GOAL_EFF, GOAL_EFF_SHARE = 0.10, 0.90
"""Efficiency within ±10 points of the published, in ≥ 90% of the rows with a baseline, and more of them than the
baseline that predicts 1.0 for every row (issue 32: a goal that baseline meets tests nothing)."""


@dataclass(kw_only=True)
class Case:
    """One corpus row on its way through the replay."""

    index: int
    """Row number in the corpus (0-based, header excluded)."""
    row: dict
    """The corpus row as read."""
    mapped: Mapped | None = None
    """Its plan overrides; None when skipped."""
    skip: str | None = None
    """Why the tool cannot replay it; None when replayed."""
    cfg: LauncherConfig | None = None
    """The composed plan config."""
    key: str = ""
    """Its fit key (`H100/bf16`)."""
    published: float = math.nan
    """Published tokens/s per GPU."""
    published_from: str = ""
    """Which published column that came from."""
    inv_grid: np.ndarray | None = None
    """1 / predicted per-GPU throughput at each MFU of published_replay.GRID."""
    parts: tuple | None = None
    """(compute/shape_rate.Parts of its step, executed FLOPs ÷ peak): what the shape model prices; None
    where it does not apply (replay_curve.case_parts)."""
    out: dict = field(default_factory=dict)
    """Figures reported for the row."""

    @property
    def source(self) -> str:
        return self.row["source"]
