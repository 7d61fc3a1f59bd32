"""A calibrated performance model of one training step, for predicting sizes not measured.

One optimizer step of a configuration costs

    step_s = compute_s + bubble_s + e · comm_s + o

with, for per-rank work w = global_batch / world_size (tp and pp split the model, dp splits the
batch, so every layout leaves each rank global/world samples' worth of work):

    compute_s = c · w · contention          c: seconds per sample on one device
    bubble_s  = compute_s · b / (1 − b)     b: pipeline bubble fraction, so compute + bubble = compute / (1 − b)
    comm_s    = comm_factor · ring(grad_bytes, n=dp, link)
    ring      = 2(n−1)/n · S / B + 2(n−1) · α   (0 for n = 1)

`e` ∈ [0, 1] is the share of the all-reduce not hidden behind backward and `o` ≥ 0 a fixed
overhead per step. The link is the inter-node one as soon as the ranks span more than one node.

`fit` calibrates the model in two stages: the links (B, α) from measured all-reduces, then
(c, e, o) from measured step times given those links. Both stages are weighted least squares on
the relative scale (errors as a share of the measured time), because step and all-reduce times
span orders of magnitude and a 1 ms miss matters at 5 ms, not at 5 s. Bounds are handled
exactly by enumerating active sets, which is cheap with at most three unknowns.

`from_presets` builds the same model from nominal figures when nothing has been measured yet.
This module is pure: no I/O, no torch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_REL_HALF_WIDTH = 0.03
"""Floor of a fitted model's relative interval half-width: a median step time is itself only
known to about this, however well the regression fits."""

SIGMA_WITHOUT_DOF = 0.10
"""Relative residual std assumed when a fit has no spare observations to estimate it from."""


@dataclass(kw_only=True, frozen=True)
class Link:
    bandwidth_gbps: float
    """Bus bandwidth B in GB/s (1e9 bytes/s, not gigabits), as nccl-tests reports `busbw`."""
    latency_s: float
    """Per-hop latency α of the ring, seconds; a ring all-reduce pays 2(n−1) of them."""
    name: str = ""
    """Preset or origin name, for reports."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth_gbps) and self.bandwidth_gbps > 0):
            raise ValueError(f"link {self.name!r}: bandwidth_gbps must be finite and > 0, got {self.bandwidth_gbps}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"link {self.name!r}: latency_s must be finite and ≥ 0, got {self.latency_s}")

    def to_dict(self) -> dict:
        return {"name": self.name, "bandwidth_gbps": self.bandwidth_gbps, "latency_s": self.latency_s}


# Bandwidths are nominal per-GPU link rates; real NCCL bus bandwidth is usually lower, which is why
# `fit` replaces them as soon as all-reduces are measured. Latencies are the order of magnitude of
# NCCL's small-message per-hop cost on each transport (µs on NVLink/PCIe/InfiniBand, tens of µs
# over TCP sockets), not vendor figures.
LINKS: dict[str, Link] = {
    # A100 NVLink 3: 12 links × 25 GB/s per direction × 2 directions.
    "nvlink": Link(bandwidth_gbps=600.0, latency_s=3e-6, name="nvlink"),
    # PCIe 4.0 x16: 31.5 GB/s raw per direction, ≈ 25 GB/s after packet overhead.
    "pcie": Link(bandwidth_gbps=25.0, latency_s=5e-6, name="pcie"),
    # InfiniBand NDR: 400 Gb/s per port = 50 GB/s.
    "ib400": Link(bandwidth_gbps=50.0, latency_s=5e-6, name="ib400"),
    # InfiniBand HDR: 200 Gb/s per port = 25 GB/s.
    "ib200": Link(bandwidth_gbps=25.0, latency_s=5e-6, name="ib200"),
    # 100 GbE = 12.5 GB/s; NCCL's socket transport adds tens of µs per hop.
    "eth100": Link(bandwidth_gbps=12.5, latency_s=30e-6, name="eth100"),
    # 10 GbE = 1.25 GB/s.
    "eth10": Link(bandwidth_gbps=1.25, latency_s=50e-6, name="eth10"),
}


def _ring_terms(nbytes: float, n: int) -> tuple[float, float]:
    """(x1, x2) of the ring model t = x1 / B + x2 · α: bytes each rank moves, and hops."""
    return 2.0 * (n - 1) / n * nbytes, 2.0 * (n - 1)


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `n` ranks: 2(n−1)/n · S / B + 2(n−1) · α."""
    if n < 1:
        raise ValueError(f"an all-reduce needs n ≥ 1 ranks, got {n}")
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"an all-reduce needs finite nbytes ≥ 0, got {nbytes}")
    if n == 1:
        return 0.0
    x1, x2 = _ring_terms(nbytes, n)
    return x1 / (link.bandwidth_gbps * 1e9) + x2 * link.latency_s


def pipeline_bubble(pp: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Theoretical bubble fraction b = (p−1) / (v·m + p−1) of a pipeline of `pp` ranks running
    `microbatches` micro-batches (GPipe and 1F1B share it; interleaving over v stages per rank
    divides the bubble by v)."""
    if pp < 1 or microbatches < 1 or virtual_stages < 1:
        raise ValueError(
            f"pipeline needs pp, microbatches, virtual_stages ≥ 1, got {pp}, {microbatches}, {virtual_stages}"
        )
    return (pp - 1) / (virtual_stages * microbatches + pp - 1)


@dataclass(kw_only=True, frozen=True)
class Shape:
    """One configuration (a measured trial, or a size to predict)."""

    world_size: int
    """Ranks in the job (dp × tp × pp)."""
    ranks_per_node: int
    """Ranks on one node; the job crosses nodes, and uses the inter-node link, when world_size exceeds it."""
    dp: int
    """Data-parallel degree: ranks in the gradient all-reduce group."""
    global_batch: int
    """Samples per optimizer step over the whole job."""
    accum: int = 1
    """Micro-steps per optimizer step. Recorded only: the model charges one all-reduce per optimizer
    step, and the work per rank already counts every micro-step through global_batch."""
    grad_bytes: int = 0
    """Bytes of one data-parallel all-reduce per optimizer step (0: no gradient communication)."""
    bubble: float = 0.0
    """Pipeline bubble fraction b in [0, 1) (see `pipeline_bubble`); 0 without pipeline."""
    contention: float = 1.0
    """Slow-down ≥ 1 of compute from CPU oversubscription (ranks × threads over cores); 1 on GPUs."""
    comm_factor: float = 1.0
    """All-reduce volumes per step: 1 for DDP, 1.5 for FSDP resharding after forward (extra all-gather)."""

    def __post_init__(self) -> None:
        for name in ("world_size", "ranks_per_node", "dp", "global_batch", "accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"shape: {name} must be ≥ 1, got {getattr(self, name)}")
        if self.world_size % self.dp:
            raise ValueError(f"shape: dp={self.dp} does not divide world_size={self.world_size}")
        if self.grad_bytes < 0:
            raise ValueError(f"shape: grad_bytes must be ≥ 0, got {self.grad_bytes}")
        if not 0.0 <= self.bubble < 1.0:
            raise ValueError(f"shape: bubble must be in [0, 1), got {self.bubble}")
        if not self.contention >= 1.0:
            raise ValueError(f"shape: contention must be ≥ 1, got {self.contention}")
        if not self.comm_factor >= 0.0:
            raise ValueError(f"shape: comm_factor must be ≥ 0, got {self.comm_factor}")

    @property
    def work_per_rank(self) -> float:
        """w = global_batch / world_size, samples-equivalent."""
        return self.global_batch / self.world_size

    @property
    def multi_node(self) -> bool:
        return self.world_size > self.ranks_per_node


def _comm_full_s(shape: Shape, link: Link) -> float:
    """comm_factor · ring all-reduce of the shape's gradients; 0 when it has none to reduce."""
    if shape.grad_bytes == 0:
        return 0.0
    return shape.comm_factor * ring_allreduce_s(shape.grad_bytes, shape.dp, link)


@dataclass(kw_only=True, frozen=True)
class Observation:
    """One measured trial."""

    shape: Shape
    """The configuration measured."""
    step_s: float
    """Measured median step time, seconds."""
    allreduce: tuple[tuple[int, int, float], ...] = ()
    """Measured all-reduces over the dp group: (n ranks, bytes, seconds), possibly several sizes."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.step_s) and self.step_s > 0):
            raise ValueError(
                f"observation at world_size={self.shape.world_size}: step_s must be > 0, got {self.step_s}"
            )
        for n, nbytes, seconds in self.allreduce:
            if n < 1 or nbytes < 0 or not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(
                    f"observation at world_size={self.shape.world_size}: all-reduce (n={n}, bytes={nbytes}, "
                    f"seconds={seconds}) needs n ≥ 1, bytes ≥ 0, seconds > 0"
                )


@dataclass(kw_only=True, frozen=True)
class Prediction:
    """Predicted step time of one shape, split into its terms, with an interval."""

    step_s: float
    """Predicted step time, seconds."""
    low_s: float
    """Lower end of the interval on step time (never below 0)."""
    high_s: float
    """Upper end of the interval on step time."""
    compute_s: float
    """c · w · contention."""
    bubble_s: float
    """Pipeline bubble, compute_s · b / (1 − b)."""
    comm_s: float
    """Exposed communication, e · comm_factor · ring all-reduce."""
    overhead_s: float
    """Fixed per-step overhead o."""
    rel_half_width: float
    """Half-width of the interval as a share of step_s."""

    def tokens_per_s(self, global_batch: int, seq_len: int) -> float:
        """Throughput at the predicted step time."""
        return global_batch * seq_len / self.step_s if self.step_s > 0 else math.inf

    def tokens_per_s_interval(self, global_batch: int, seq_len: int) -> tuple[float, float]:
        """(low, high) throughput: the low end comes from high_s, the high end from low_s (inf at 0)."""
        tokens = global_batch * seq_len
        low = tokens / self.high_s if self.high_s > 0 else math.inf
        high = tokens / self.low_s if self.low_s > 0 else math.inf
        return low, high


_PARAMS = ("compute_s_per_sample", "exposed_comm", "overhead_s")


@dataclass(kw_only=True, frozen=True)
class PerfModel:
    """Calibrated (or preset) step-time model; see the module docstring for the formula."""

    compute_s_per_sample: float
    """c: seconds per sample of work on one device."""
    overhead_s: float
    """o: fixed overhead per step, seconds."""
    exposed_comm: float
    """e: share of the all-reduce not hidden behind backward, in [0, 1]."""
    intra: Link
    """Link between ranks of one node."""
    inter: Link
    """Link used once the ranks span nodes."""
    rel_sigma: float
    """Relative residual std of the step-time fit (presets: the assumed relative uncertainty)."""
    z: float = 2.0
    """Interval half-width in standard deviations."""
    free: tuple[str, ...] = ()
    """Parameters estimated freely (not fixed, not at a bound), in the order of `cov`."""
    cov: tuple[tuple[float, ...], ...] = ()
    """Covariance of the `free` parameters on the relative scale: σ² (XᵀWX)⁻¹ with W = diag(1/step²).
    The links are treated as exact here: their own fit error is not propagated into intervals."""
    min_rel_half_width: float = MIN_REL_HALF_WIDTH
    """Floor of the relative interval half-width."""
    sources: tuple[tuple[str, str], ...] = ()
    """(parameter, where it came from) pairs, e.g. ("inter", "fitted from 6 all-reduces")."""
    n_observations: int = 0
    """Step times the model was fitted on (0 for presets)."""
    contention_exponent: float = 1.0
    """γ in compute × contention^γ: how much worse than proportional oversubscribed CPU ranks
    run (lock-step ranks wait for the one that lost its core); fitted when trials differ in it."""

    def __post_init__(self) -> None:
        if not self.compute_s_per_sample >= 0:
            raise ValueError(f"compute_s_per_sample must be ≥ 0, got {self.compute_s_per_sample}")
        if not self.overhead_s >= 0:
            raise ValueError(f"overhead_s must be ≥ 0, got {self.overhead_s}")
        if not 0.0 <= self.exposed_comm <= 1.0:
            raise ValueError(f"exposed_comm must be in [0, 1], got {self.exposed_comm}")
        if not self.rel_sigma >= 0:
            raise ValueError(f"rel_sigma must be ≥ 0, got {self.rel_sigma}")
        if len(self.cov) != len(self.free) or any(len(row) != len(self.free) for row in self.cov):
            raise ValueError(f"cov must be {len(self.free)}×{len(self.free)} for free={self.free}")

    def source(self, key: str) -> str:
        """Where parameter `key` ("intra", "inter", or a field name) came from."""
        return dict(self.sources)[key]

    def link_for(self, shape: Shape) -> Link:
        return self.inter if shape.multi_node else self.intra

    def predict(self, shape: Shape) -> Prediction:
        base = shape.work_per_rank * shape.contention**self.contention_exponent
        compute = self.compute_s_per_sample * base
        bubble = compute * shape.bubble / (1.0 - shape.bubble)
        comm_full = _comm_full_s(shape, self.link_for(shape))
        comm = self.exposed_comm * comm_full
        step = compute + bubble + comm + self.overhead_s

        var = self.rel_sigma**2
        if self.free and step > 0:
            row = dict(zip(_PARAMS, (base / (1.0 - shape.bubble), comm_full, 1.0)))
            x = np.array([row[p] for p in self.free]) / step
            var += float(x @ np.array(self.cov) @ x)
        h = max(self.min_rel_half_width, self.z * math.sqrt(var))
        return Prediction(
            step_s=step,
            low_s=max(0.0, step * (1.0 - h)),
            high_s=step * (1.0 + h),
            compute_s=compute,
            bubble_s=bubble,
            comm_s=comm,
            overhead_s=self.overhead_s,
            rel_half_width=h,
        )

    def to_dict(self) -> dict:
        return {
            "compute_s_per_sample": self.compute_s_per_sample,
            "overhead_s": self.overhead_s,
            "exposed_comm": self.exposed_comm,
            "intra": self.intra.to_dict(),
            "inter": self.inter.to_dict(),
            "rel_sigma": self.rel_sigma,
            "z": self.z,
            "min_rel_half_width": self.min_rel_half_width,
            "free": list(self.free),
            "cov": [list(row) for row in self.cov],
            "sources": dict(self.sources),
            "n_observations": self.n_observations,
            "contention_exponent": self.contention_exponent,
        }


def from_presets(
    *,
    compute_s_per_sample: float,
    intra: Link,
    inter: Link,
    overhead_s: float = 0.0,
    exposed_comm: float = 1.0,
    rel_uncertainty: float = 0.25,
) -> PerfModel:
    """A model with nothing measured: every interval is ±rel_uncertainty of the step time."""
    if not rel_uncertainty >= 0:
        raise ValueError(f"rel_uncertainty must be ≥ 0, got {rel_uncertainty}")
    return PerfModel(
        compute_s_per_sample=compute_s_per_sample,
        overhead_s=overhead_s,
        exposed_comm=exposed_comm,
        intra=intra,
        inter=inter,
        rel_sigma=rel_uncertainty,
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


def _bounded_lstsq(a: np.ndarray, y: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """min ‖a v − y‖ subject to lower ≤ v ≤ upper, and the indices left strictly free.

    The optimum of a convex bounded least squares is the unconstrained optimum on the face of the
    box it lies on, so trying every face (each variable free, at its lower or at its upper bound)
    and keeping the best feasible solution is exact. That is 3^k solves: fine for k ≤ 3.
    """
    k = a.shape[1]
    # Columns differ by many orders of magnitude (bytes vs hops); scaling keeps lstsq honest.
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a_s = a / norms
    best: tuple[float, np.ndarray, list[int]] | None = None
    choices = [("free", "low") + (("high",) if math.isfinite(upper[j]) else ()) for j in range(k)]
    for combo in itertools.product(*choices):
        v = np.where(np.array(combo) == "high", upper, lower).astype(float)
        free = [j for j in range(k) if combo[j] == "free"]
        if free:
            fixed = [j for j in range(k) if combo[j] != "free"]
            rhs = y - a[:, fixed] @ v[fixed]
            sol = np.linalg.lstsq(a_s[:, free], rhs, rcond=None)[0] / norms[free]
            tol = 1e-9 * np.maximum(1.0, np.abs(sol))
            if np.any(sol < lower[free] - tol) or np.any(sol > upper[free] + tol):
                continue
            v[free] = np.clip(sol, lower[free], upper[free])
        cost = float(np.sum((a @ v - y) ** 2))
        if best is None or cost < best[0] - 1e-15 * max(1.0, cost):
            best = (cost, v, free)
    assert best is not None  # the all-at-bounds face is always feasible
    return best[1], best[2]


def _rank(x: np.ndarray) -> int:
    """Rank of a design after normalising its columns, so magnitudes do not pass for directions."""
    norms = np.linalg.norm(x, axis=0)
    keep = norms > 0
    if not keep.any():
        return 0
    return int(np.linalg.matrix_rank(x[:, keep] / norms[keep], tol=1e-9))


def _fit_link(samples: list[tuple[int, int, float]], preset: Link, label: str) -> tuple[Link, str]:
    """Stage 1 for one link class: (B, α) from measured all-reduces, relative least squares, both ≥ 0."""
    usable = [(n, b, t) for n, b, t in samples if n >= 2]
    if not usable:
        return preset, f"preset {preset.name or 'link'} (no {label} all-reduces over ≥ 2 ranks measured)"
    x = np.array([_ring_terms(b, n) for n, b, _ in usable])
    t = np.array([s for _, _, s in usable])
    m = len(usable)
    # Rows divided by t: minimising Σ((t − t̂)/t)² treats a 10% miss alike at 10 µs and at 1 s.
    a = x / t[:, None]
    y = np.ones(m)
    preset_inv_bw = 1.0 / (preset.bandwidth_gbps * 1e9)
    name = f"{preset.name} (fitted)" if preset.name else "fitted"

    if not np.any(x[:, 0] > 0):
        # Only empty messages: latency is all they show.
        (alpha,), _ = _bounded_lstsq(a[:, [1]], y - a[:, 0] * preset_inv_bw, np.zeros(1), np.full(1, np.inf))
        link = Link(bandwidth_gbps=preset.bandwidth_gbps, latency_s=float(alpha), name=name)
        return link, f"latency fitted from {m} zero-byte all-reduces; bandwidth preset {preset.name or 'link'}"

    if _rank(x) >= 2:
        (inv_bw, alpha), _ = _bounded_lstsq(a, y, np.zeros(2), np.full(2, np.inf))
        if inv_bw > 0:
            note = " (latency at bound 0)" if alpha == 0 else ""
            link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=float(alpha), name=name)
            return link, f"fitted from {m} all-reduces: bandwidth and latency{note}"
        # Times flat in message size: no bandwidth to see, so keep the preset and fit α under it.
        (alpha,), _ = _bounded_lstsq(a[:, [1]], y - a[:, 0] * preset_inv_bw, np.zeros(1), np.full(1, np.inf))
        link = Link(bandwidth_gbps=preset.bandwidth_gbps, latency_s=float(alpha), name=name)
        return link, (
            f"latency fitted from {m} all-reduces; bandwidth preset {preset.name or 'link'} "
            "(times do not grow with message size)"
        )

    # One direction only (one rank count and one message size): the split between bandwidth and
    # latency is invisible, so trust the preset latency and attribute the rest to bandwidth.
    (inv_bw,), _ = _bounded_lstsq(a[:, [0]], y - a[:, 1] * preset.latency_s, np.zeros(1), np.full(1, np.inf))
    if inv_bw > 0:
        link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=preset.latency_s, name=name)
        return link, (
            f"bandwidth fitted from {m} all-reduces; latency preset {preset.name or 'link'} "
            f"{preset.latency_s:g} s (one direction of (size, ranks) cannot separate them)"
        )
    # The preset latency alone already exceeds the measured times: it is wrong for this link.
    (inv_bw,), _ = _bounded_lstsq(a[:, [0]], y, np.zeros(1), np.full(1, np.inf))
    link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=0.0, name=name)
    return link, (
        f"bandwidth fitted from {m} all-reduces; latency set to 0 (preset {preset.latency_s:g} s "
        f"alone exceeds the measured {float(t.min()):g} s)"
    )


def _fit_steps(obs: Sequence[Observation], intra_fit: Link, inter_fit: Link, gamma: float) -> dict:
    """Stage 2 at a given contention exponent γ: bounded relative least squares for c, e, o."""
    sources: dict[str, str] = {}
    n = len(obs)
    y = np.array([o.step_s for o in obs])
    x = np.array(
        [
            [
                o.shape.work_per_rank * o.shape.contention**gamma / (1.0 - o.shape.bubble),
                _comm_full_s(o.shape, inter_fit if o.shape.multi_node else intra_fit),
                1.0,
            ]
            for o in obs
        ]
    )
    fixed: dict[int, tuple[float, str]] = {}
    if not np.any(x[:, 1] > 0):
        fixed[1] = (1.0, "fixed at 1 (no trial communicates, so exposure is unidentifiable)")

    def n_free() -> int:
        return 3 - len(fixed)

    # Too few observations, or columns that move together: drop the overhead first (it is the
    # least informative term), then the exposure.
    for j, value in ((2, 0.0), (1, 1.0)):
        if j not in fixed and n < n_free():
            fixed[j] = (value, f"fixed at {value:g} ({n} step time{'s' * (n != 1)} for {n_free()} parameters)")

    def deficient(drop: tuple[int, ...]) -> bool:
        cols = [i for i in range(3) if i not in fixed and i not in drop]
        return _rank(x[:, cols]) < len(cols)

    if deficient(()):
        # Fix the fewest terms that make the rest separable, overhead before exposure.
        candidates = [d for d in ((2,), (1,), (2, 1)) if not set(d) & set(fixed)]
        drop = next((d for d in candidates if not deficient(d)), candidates[-1] if candidates else ())
        for j in drop:
            value = 0.0 if j == 2 else 1.0
            fixed[j] = (value, f"fixed at {value:g} (not separable from the other terms in these trials)")

    a = x / y[:, None]
    target = np.ones(n)
    cols = [i for i in range(3) if i not in fixed]
    for j, (value, _) in fixed.items():
        target = target - a[:, j] * value
    lower = np.array([0.0, 0.0, 0.0])[cols]
    upper = np.array([np.inf, 1.0, np.inf])[cols]
    sol, free_local = _bounded_lstsq(a[:, cols], target, lower, upper)
    params = np.array([fixed[j][0] if j in fixed else 0.0 for j in range(3)])
    params[cols] = sol
    free_idx = [cols[i] for i in free_local]

    for j in cols:
        if j in free_idx:
            sources[_PARAMS[j]] = f"fitted from {n} step times"
        else:
            bound = "1" if params[j] == 1.0 and j == 1 else "0"
            sources[_PARAMS[j]] = f"fitted from {n} step times; at bound {bound}"
    for j, (_, why) in fixed.items():
        sources[_PARAMS[j]] = why

    rel_resid = (y - x @ params) / y
    p = len(cols)
    sigma = math.sqrt(float(rel_resid @ rel_resid) / (n - p)) if n > p else SIGMA_WITHOUT_DOF
    cov: tuple[tuple[float, ...], ...] = ()
    if free_idx:
        af = a[:, free_idx]
        cov = tuple(tuple(float(v) for v in row) for row in sigma**2 * np.linalg.pinv(af.T @ af))

    return {"params": params, "sigma": sigma, "cov": cov, "free_idx": free_idx, "gamma": gamma, "sources": sources,
            "sse": float(rel_resid @ rel_resid)}


def fit(observations: Sequence[Observation], *, intra: Link, inter: Link, z: float = 2.0) -> PerfModel:
    """Calibrate a model on measured trials; `intra`/`inter` are presets for what the data cannot show."""
    obs = list(observations)
    if not obs:
        raise ValueError("fit needs at least 1 observation, got 0")
    if not z > 0:
        raise ValueError(f"z must be > 0, got {z}")

    # Stage 1: the links.
    intra_ar = [m for o in obs if not o.shape.multi_node for m in o.allreduce]
    inter_ar = [m for o in obs if o.shape.multi_node for m in o.allreduce]
    intra_fit, intra_src = _fit_link(intra_ar, intra, "intra-node")
    inter_fit, inter_src = _fit_link(inter_ar, inter, "inter-node")
    sources: dict[str, str] = {"intra": intra_src, "inter": inter_src}

    # Stage 2: c, e, o from step times, given the links — for each candidate contention
    # exponent γ when some trial was oversubscribed (profile least squares), else γ = 1.
    contended = len({o.shape.contention for o in obs}) > 1
    gammas = [round(0.5 + 0.02 * k, 2) for k in range(101)] if contended and len(obs) > 4 else [1.0]
    best = min((_fit_steps(obs, intra_fit, inter_fit, g) for g in gammas), key=lambda r: r["sse"])
    params, sigma, cov, free_idx, gamma = best["params"], best["sigma"], best["cov"], best["free_idx"], best["gamma"]
    sources.update(best["sources"])
    sources["contention_exponent"] = (
        f"fitted from {len(obs)} step times (profile over 0.5–2.5)" if len(gammas) > 1
        else "fixed at 1 (no oversubscribed trial, or too few to fit it)"
    )

    return PerfModel(
        compute_s_per_sample=float(params[0]),
        exposed_comm=float(min(1.0, max(0.0, params[1]))),
        overhead_s=float(params[2]),
        intra=intra_fit,
        inter=inter_fit,
        rel_sigma=sigma,
        z=z,
        free=tuple(_PARAMS[j] for j in free_idx),
        cov=cov,
        min_rel_half_width=MIN_REL_HALF_WIDTH,
        sources=tuple(sorted(sources.items())),
        n_observations=len(obs),
        contention_exponent=gamma,
    )
