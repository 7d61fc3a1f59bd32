"""The step-time model from nominal figures, for planning before anything has been measured."""

from __future__ import annotations

from launcher.perf.links import Link
from launcher.perf.step import PerfModel


def from_presets(
    *,
    compute_s_per_sample: float,
    intra: Link,
    inter: Link,
    overhead_s: float = 0.0,
    exposed_comm: float = 0.0,
    rel_uncertainty: float = 0.25,
) -> PerfModel:
    """A model with nothing measured: every interval is ±rel_uncertainty of the step time.
    `exposed_comm` 0: the overlap model (`overlap`) as it stands, nothing it hides shows."""
    if not rel_uncertainty >= 0:
        raise ValueError(f"rel_uncertainty must be ≥ 0, got {rel_uncertainty}")
    return PerfModel(
        compute_s_per_sample=compute_s_per_sample,
        overhead_s=overhead_s,
        exposed_comm=exposed_comm,
        intra=intra,
        inter=inter,
        rel_sigma=rel_uncertainty,
        rel_sigma_measured=None,
        # z = 1 and no floor, so the half-width is exactly the stated uncertainty.
        z=1.0,
        min_rel_half_width=0.0,
        sources=tuple(
            (key, f"preset {value}")
            for key, value in (
                ("compute_s_per_sample", compute_s_per_sample),
                ("overhead_s", overhead_s),
                ("exposed_comm", exposed_comm),
                ("intra", intra.name or "link"),
                ("inter", inter.name or "link"),
            )
        ),
        n_observations=0,
    )
