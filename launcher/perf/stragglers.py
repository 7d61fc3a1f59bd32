"""Stragglers and jitter: why a synchronous step gets slower with the number of ranks when nothing
else does. Pure: no I/O, no torch.

Every rank of a data-parallel (or pipeline) job waits at each collective for the last one to
arrive, so a step lasts the slowest rank's compute, not the average one's. With each rank's compute
c·(1 + e), e ≥ 0 a per-rank delay of mean s (relative) and an exponential tail (OS noise, clock
and thermal throttling, a slow host: Hoefler, Schneider & Lumsdaine, "Characterizing the Influence
of System Noise on Large-Scale Applications by Simulation", SC10, doi:10.1109/SC.2010.12: noise
with such tails costs a collective-synchronised code an expected maximum that grows as log N;
Lin et al., "Understanding Stragglers in Large Model Training Using What-if Analysis", OSDI '25,
arXiv:2505.05713: stragglers in ByteDance's LLM training cluster, not only failed hardware), the
expected maximum over N ranks is s·H_N, H_N = 1 + 1/2 + … + 1/N ≈ ln N + 0.577 (the order
statistics of the exponential, Rényi's representation). Against one rank, which waits for nobody:

    straggle(N) = 1 + s · (H_N − 1)          (1 on one rank; + s·ln 2 per doubling at scale)

`s` is a site's figure (`cluster.step_jitter`); the default is fitted on the published corpus's
efficiency pairs by benchmarks/published_replay.py (leave-one-source-out there)."""

from __future__ import annotations

import functools
import math

from launcher.perf import preset_fit

STEP_JITTER = 0.0075
"""s on GPUs when the cluster does not say and preset_fit.json holds no fitted figure (a file written
before it): the first fit's value. The figure a plan uses is the file's `jitter`, which
benchmarks/published_replay.py fits on every source's efficiency pairs (its report gives the
leave-one-source-out range its goals are judged on)."""

_EULER_GAMMA = 0.5772156649015329
_EXACT_UP_TO = 4096


def harmonic(n: int) -> float:
    """H_n = Σ_{k=1..n} 1/k: exact up to 4096 terms, then ln n + γ + 1/(2n) − 1/(12n²) (error < 1e-15)."""
    if n < 1:
        raise ValueError(f"harmonic number needs n ≥ 1, got {n}")
    if n <= _EXACT_UP_TO:
        return math.fsum(1.0 / k for k in range(1, n + 1))
    return math.log(n) + _EULER_GAMMA + 1.0 / (2 * n) - 1.0 / (12 * n * n)


def straggle(ranks: int, jitter: float) -> float:
    """The factor on a step's compute of `ranks` ranks in lock step, each delayed by a mean `jitter`
    (relative, exponential tail): 1 + jitter · (H_ranks − 1), see the module docstring."""
    if ranks < 1:
        raise ValueError(f"straggle needs ranks ≥ 1, got {ranks}")
    if not (math.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"straggle needs a finite jitter ≥ 0, got {jitter}")
    return 1.0 + jitter * (harmonic(ranks) - 1.0)


def site_jitter(configured: float | None, device: str) -> float:
    """s for a plan: cluster.step_jitter when set, else STEP_JITTER on GPUs and 0 on CPU ranks (whose
    slow-down with ranks is the oversubscription of their cores, `Shape.contention`)."""
    if configured is not None:
        return configured
    return fitted_jitter() if device == "cuda" else 0.0


@functools.cache
def fitted_jitter() -> float:
    """The packaged fit's s (preset_fit.json, read once per process), else STEP_JITTER."""
    fitted = preset_fit.load().jitter
    return STEP_JITTER if fitted is None else fitted
