"""The step-time formula of the performance model, and its prediction with an interval.

One optimizer step of a configuration costs

    step_s = compute_s + bubble_s + e · comm_s + o

with, for per-rank work w = global_batch / world_size (tp and pp split the model, dp splits the
batch, so every layout leaves each rank global/world samples' worth of work):

    compute_s = c · w · contention^γ    c: seconds per sample on one device
    bubble_s  = compute_s · b / (1 − b) b: pipeline bubble fraction, so compute + bubble = compute / (1 − b)
    comm_s    = comm_factor · ring(grad_bytes, n=dp, link, messages)
    ring      = 2(n−1)/n · S / B + messages · 2(n−1) · α   (0 for n = 1; see `links`)

`e` ∈ [0, 1] is the share of the all-reduce not hidden behind backward and `o` ≥ 0 a fixed
overhead per step. The link is the inter-node one as soon as the ranks span more than one node:
a ring over ranks placed node by node crosses each node's link once each way, so however many
ranks share a node, its link carries 2(n−1)/n · S and paces the ring (in-node hops are faster).
`fit` calibrates c, e, o (and the links) on measured trials; `presets.from_presets` sets them
from nominal figures. Pure: no I/O, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from launcher.model.links import Link, ring_allreduce_s

MIN_REL_HALF_WIDTH = 0.03
"""Floor of a fitted model's relative interval half-width: a median step time is itself only
known to about this, however well the regression fits."""

PARAMS = ("compute_s_per_sample", "exposed_comm", "overhead_s")
"""The step parameters (c, e, o), in the order of the design matrix's columns."""


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
    """Pipeline bubble fraction b in [0, 1) (see `trials.layout.pipeline_bubble`); 0 without pipeline."""
    contention: float = 1.0
    """Slow-down ≥ 1 of compute from CPU oversubscription (ranks × threads over cores); 1 on GPUs."""
    comm_factor: float = 1.0
    """All-reduce volumes per step (see `trials.layout.fsdp_comm_factor`): 1 for DDP, 1.5 for FSDP
    resharding after forward."""
    messages: int = 1
    """All-reduces the gradient goes in per step, each paying the ring's latency: DDP's buckets
    (see `shapes.ddp_buckets`); 1 where the layout's calls are not modelled."""

    def __post_init__(self) -> None:
        for name in ("world_size", "ranks_per_node", "dp", "global_batch", "accum", "messages"):
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


def comm_full_s(shape: Shape, link: Link) -> float:
    """comm_factor · ring all-reduce of the shape's gradients; 0 when it has none to reduce."""
    if shape.grad_bytes == 0:
        return 0.0
    return shape.comm_factor * ring_allreduce_s(shape.grad_bytes, shape.dp, link, messages=shape.messages)


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
    """c · w · contention^γ."""
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
    """Relative std of a new trial around the prediction, what the intervals use: a fit's held-out
    error, never below its repeat noise (see `interval.scatter`); presets: the stated uncertainty;
    a fit with nothing to measure it on: fit.SIGMA_WITHOUT_DOF."""
    rel_sigma_measured: float | None = None
    """Relative residual std of the step-time fit, measured on its spare degrees of freedom; None
    when nothing was fitted or the fit had no more trials than parameters (n ≤ p)."""
    rel_sigma_holdout: float | None = None
    """Relative RMS error of trials predicted by the model refitted without their shape (leave one
    shape out); None when there were too few shapes to hold one out."""
    rel_sigma_repeat: float | None = None
    """Run-to-run relative std of one trial, pooled over repeats of a shape; None without repeats."""
    param_var_in_sigma: float = 0.0
    """Parameter variance (relative²) already inside rel_sigma: a held-out error includes the
    refit's own uncertainty, on average σ²·k/n at the trials' shapes (k free parameters, n trials);
    predict adds only the excess of a shape's parameter variance over this. 0 when rel_sigma was
    not measured on held-out trials."""
    level: float | None = None
    """Nominal coverage of the interval (0.9: it should hold 9 of 10 trials not yet run); None for
    presets, whose interval is a stated uncertainty, not a measured one."""
    n_parameters: int = 0
    """p: step parameters (c, e, o) estimated from the data rather than fixed (0 for presets)."""
    z: float = 2.0
    """Interval half-width in standard deviations: the t quantile of `level` for a fit."""
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
        for name in ("rel_sigma_measured", "rel_sigma_holdout", "rel_sigma_repeat"):
            if getattr(self, name) is not None and not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be ≥ 0 or None, got {getattr(self, name)}")
        if self.level is not None and not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1) or None, got {self.level}")
        if len(self.cov) != len(self.free) or any(len(row) != len(self.free) for row in self.cov):
            shape = [len(row) for row in self.cov]
            raise ValueError(f"cov must be {len(self.free)}×{len(self.free)} for free={self.free}, got row lengths {shape}")

    def source(self, key: str) -> str:
        """Where parameter `key` ("intra", "inter", or a field name) came from."""
        return dict(self.sources)[key]

    def link_for(self, shape: Shape) -> Link:
        return self.inter if shape.multi_node else self.intra

    def predict(self, shape: Shape) -> Prediction:
        base = shape.work_per_rank * shape.contention**self.contention_exponent
        compute = self.compute_s_per_sample * base
        bubble = compute * shape.bubble / (1.0 - shape.bubble)
        comm_full = comm_full_s(shape, self.link_for(shape))
        comm = self.exposed_comm * comm_full
        step = compute + bubble + comm + self.overhead_s

        var = self.rel_sigma**2
        if self.free and step > 0:
            # Parameter uncertainty grows with how far this shape's terms lie from the trials'.
            row = dict(zip(PARAMS, (base / (1.0 - shape.bubble), comm_full, 1.0)))
            x = np.array([row[p] for p in self.free]) / step
            # Held-out errors already carry the parameter variance typical of the trials' shapes;
            # only what this shape has beyond that is added (never less than nothing).
            var += max(0.0, float(x @ np.array(self.cov) @ x) - self.param_var_in_sigma)
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
            "rel_sigma_measured": self.rel_sigma_measured,
            "rel_sigma_holdout": self.rel_sigma_holdout,
            "rel_sigma_repeat": self.rel_sigma_repeat,
            "level": self.level,
            "param_var_in_sigma": self.param_var_in_sigma,
            "n_parameters": self.n_parameters,
            "z": self.z,
            "min_rel_half_width": self.min_rel_half_width,
            "free": list(self.free),
            "cov": [list(row) for row in self.cov],
            "sources": dict(self.sources),
            "n_observations": self.n_observations,
            "contention_exponent": self.contention_exponent,
        }
