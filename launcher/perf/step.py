"""The step-time formula of the performance model, and its prediction with an interval.

One optimizer step of a configuration costs

    step_s = compute_s + bubble_s + X + u · (T − X) + o

with, for per-rank work w = global_batch / world_size (tp and pp split the model, dp splits the
batch, so every layout leaves each rank global/world samples' worth of work):

    compute_s = c · w · contention^γ · k(N)    c: seconds per sample on one device, recompute
                                                included (hardware FLOPs: presets divide those by
                                                the achieved FLOP/s; a fit measures them);
                                                k(N) the wait for the slowest of N ranks
                                                (`stragglers.straggle`, 1 on one rank)
    bubble_s  = compute_s · b / (1 − b)        b: pipeline bubble fraction
    r         = recompute FLOPs ÷ model FLOPs (activation checkpointing): compute_s · r / (1 + r)
                of compute_s is recompute, run in backward, so it widens the window DDP's
                and FSDP's backward collectives hide under
    X         = the communication compute does not hide, by layout, at this compute_s
                (`overlap.comm_terms`: DDP's buckets under backward, FSDP's prefetched gathers,
                TP's collectives, PP's sends; each collective timed on the links the group
                crosses, `comm`)
    T         = all of it, none hidden (the most a step can expose); T − X what the overlap
                model credits compute with hiding

`u` ∈ [0, 1] is the share of that hideable communication a step exposes after all: 0 is the
overlap model as it stands (presets), 1 no overlap at all (CPU ranks, whose gloo collectives
share the cores their compute runs on, come out near 1); a fit measures it on trials. `o` ≥ 0
is a fixed overhead per step. `fit` calibrates c, u, o (and the links) on measured trials;
`presets.from_presets` sets them from nominal figures. Pure: no I/O, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from launcher.perf.comm import BACKWARD_SHARE, Leaf, Topology, Traffic, group
from launcher.perf.links import Link
from launcher.perf.overlap import CommTerms, Groups, comm_terms
from launcher.perf.stragglers import straggle

MIN_REL_HALF_WIDTH = 0.03
"""Floor of a fitted model's relative interval half-width: a median step time is itself only
known to about this, however well the regression fits."""

PARAMS = ("compute_s_per_sample", "exposed_comm", "overhead_s")
"""The step parameters (c, u, o), in the order of the design matrix's columns."""


@dataclass(kw_only=True, frozen=True)
class Shape:
    """One configuration (a measured trial, or a size to predict)."""

    world_size: int
    """Ranks in the job (dp × tp × pp)."""
    ranks_per_node: int
    """Ranks on one node; a group whose ranks lie on several nodes uses the network."""
    dp: int
    """Data-parallel degree: ranks in the gradient all-reduce group."""
    tp: int = 1
    """Tensor-parallel degree (consecutive ranks: innermost)."""
    pp: int = 1
    """Pipeline degree."""
    ep: int = 1
    """Expert-parallel degree: consecutive dp ranks (borrowed from dp: not a factor of world_size)."""
    cp: int = 1
    """Context-parallel degree (ranks splitting each sequence, between pp and tp in the layout)."""
    shard: int = 0
    """hsdp: dp ranks in one FSDP shard group (dp ÷ shard replicas all-reduce across); 0: all of dp."""
    global_batch: int
    """Samples per optimizer step over the whole job."""
    accum: int = 1
    """Micro-steps per optimizer step; the work per rank already counts them through global_batch,
    the traffic's passes say how often each collective runs."""
    bubble: float = 0.0
    """Pipeline bubble fraction b in [0, 1) (see `trials.layout.pipeline_bubble`); 0 without pipeline."""
    contention: float = 1.0
    """Slow-down ≥ 1 of compute from CPU oversubscription (ranks × threads over cores); 1 on GPUs."""
    recompute: float = 0.0
    """r: FLOPs activation checkpointing recomputes ÷ model FLOPs (0 without). The compute term
    already holds them (c is per sample of hardware work); r splits it for MFU vs HFU and for
    the backward window (recompute runs in backward)."""
    nics_per_node: int = 1
    """Network interfaces per node (rails), each at the inter-node link's bandwidth."""
    tree: bool = False
    """Collectives may take NCCL's tree across nodes (NCCL on GPUs; gloo rings only)."""
    nvlink_domain: int = 0
    """Ranks sharing one NVLink domain, a multiple of ranks_per_node; 0: one node's (comm.Topology)."""
    leaf: Leaf = Leaf()
    """Leaf switches and their oversubscription (comm.Leaf); default: one non-blocking fabric."""
    jitter: float = 0.0
    """Mean relative delay of a rank's compute per step: the step waits for the slowest (`stragglers`)."""
    traffic: Traffic = Traffic()
    """What one rank communicates per step (see `comm.Traffic`)."""

    def __post_init__(self) -> None:
        for name in ("world_size", "ranks_per_node", "dp", "tp", "pp", "global_batch", "accum", "nics_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"shape: {name} must be ≥ 1, got {getattr(self, name)}")
        if self.dp * self.cp * self.tp * self.pp != self.world_size:
            cp = f"cp({self.cp}) × " if self.cp > 1 else ""
            raise ValueError(
                f"shape: dp({self.dp}) × {cp}tp({self.tp}) × pp({self.pp}) = "
                f"{self.dp * self.cp * self.tp * self.pp} ≠ world_size {self.world_size}"
            )
        if self.cp < 1 or self.shard < 0 or (self.shard and self.dp % self.shard):
            raise ValueError(
                f"shape: cp must be ≥ 1 and shard divide dp({self.dp}), got cp {self.cp}, shard {self.shard}"
            )
        if not 0.0 <= self.bubble < 1.0:
            raise ValueError(f"shape: bubble must be in [0, 1), got {self.bubble}")
        if not self.contention >= 1.0:
            raise ValueError(f"shape: contention must be ≥ 1, got {self.contention}")
        if not self.recompute >= 0.0:
            raise ValueError(f"shape: recompute must be ≥ 0, got {self.recompute}")
        if not (math.isfinite(self.jitter) and self.jitter >= 0.0):
            raise ValueError(f"shape: jitter must be a finite number ≥ 0, got {self.jitter}")

    @property
    def work_per_rank(self) -> float:
        """w = global_batch / world_size, samples-equivalent."""
        return self.global_batch / self.world_size

    @property
    def multi_node(self) -> bool:
        return self.world_size > self.ranks_per_node

    @property
    def backward_share(self) -> float:
        """β: backward's share of a pass's compute, recompute (run in backward) included."""
        return (BACKWARD_SHARE + self.recompute) / (1.0 + self.recompute)

    @property
    def groups(self) -> Groups:
        """Ranks laid out dp × pp × cp × tp, tp innermost (train/engines/base.py). FSDP's group
        (`dp`) is dp × cp (the cp ranks hold the same parameters), inside one replica under hsdp."""
        rpn, inner = self.ranks_per_node, self.cp * self.tp * self.pp
        shard = self.shard or self.dp
        return Groups(
            dp=group(shard * self.cp, self.tp * self.pp, rpn),
            tp=group(self.tp, 1, rpn),
            pp=group(self.pp, self.cp * self.tp, rpn),
            cp=group(self.cp, self.tp, rpn),
            replicate=group(self.dp // shard, shard * inner, rpn),
            ep=group(self.ep, self.tp * self.pp, rpn) if self.ep > 1 else None,
        )

    @property
    def topology(self) -> Topology:
        return Topology(
            ranks_per_node=self.ranks_per_node,
            nics_per_node=self.nics_per_node,
            tree=self.tree,
            nvlink_domain=self.nvlink_domain,
            leaf=self.leaf,
        )

    def compute_work(self, gamma: float = 1.0) -> float:
        """compute_s ÷ c: w · contention^γ · straggle(world_size, jitter)."""
        return self.work_per_rank * self.contention**gamma * straggle(self.world_size, self.jitter)


def comm_at(shape: Shape, intra: Link, inter: Link, compute_s: float) -> CommTerms:
    """The shape's communication (all, and exposed per the overlap model) at `compute_s`."""
    return comm_terms(
        shape.traffic,
        shape.groups,
        shape.topology,
        intra,
        inter,
        compute_s=compute_s,
        backward_share=shape.backward_share,
    )


@dataclass(kw_only=True, frozen=True)
class Observation:
    """One measured trial."""

    shape: Shape
    """The configuration measured."""
    step_s: float
    """Measured median step time, seconds."""
    allreduce: tuple[tuple[int, int, float], ...] = ()
    """Measured all-reduces over the probed group: (n ranks, bytes, seconds), possibly several sizes."""
    probe_group: str = "dp"
    """Which of the shape's groups the all-reduces ran over: `dp`, or `pp` (a pipeline's probe)."""
    gathers: tuple[tuple[int, int, int, float], ...] = ()
    """Measured tensor-parallel collectives per step: (n ranks, bytes of their full tensors
    together, how many, seconds together); each an all-gather's or reduce-scatter's worth."""

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
        if self.probe_group not in ("dp", "pp"):
            raise ValueError(f"observation: probe_group must be dp or pp, got {self.probe_group!r}")
        for n, nbytes, count, seconds in self.gathers:
            if n < 1 or nbytes < 0 or count < 1 or not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(
                    f"observation at world_size={self.shape.world_size}: collectives (n={n}, bytes={nbytes}, "
                    f"count={count}, seconds={seconds}) need n ≥ 1, bytes ≥ 0, count ≥ 1, seconds > 0"
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
    """c · w · contention^γ: model FLOPs' compute and the recompute."""
    recompute_s: float
    """The recompute's part of compute_s, compute_s · r / (1 + r): hardware FLOPs take
    compute_s, model FLOPs compute_s − recompute_s, so HFU / MFU = compute_s / (compute_s − recompute_s)."""
    bubble_s: float
    """Pipeline bubble, compute_s · b / (1 − b)."""
    comm_s: float
    """Exposed communication, X + u · (T − X)."""
    comm_total_s: float
    """All communication T, none hidden."""
    dp_comm_s: float
    """comm_s's data-parallel part (DDP's all-reduce, FSDP's gathers and scatters)."""
    tp_comm_s: float
    """comm_s's tensor-parallel part."""
    pp_comm_s: float
    """comm_s's pipeline sends."""
    ep_comm_s: float = 0.0
    """comm_s's expert-parallel all-to-alls (exposed in full)."""
    cp_comm_s: float = 0.0
    """comm_s's context-parallel ring (keys and values passed around the cp group)."""
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
    """c: seconds per sample of work on one device, activation recompute included."""
    overhead_s: float
    """o: fixed overhead per step, seconds."""
    exposed_comm: float
    """u ∈ [0, 1]: share of the communication the overlap model credits as hidden that is exposed
    after all (0: the overlap model as it stands; 1: no overlap)."""
    intra: Link
    """Link between ranks of one node."""
    inter: Link
    """Network link between nodes, one NIC's (a group spanning nodes gets its share of the
    node's NICs, see `comm`)."""
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
    """p: step parameters (c, u, o) estimated from the data rather than fixed (0 for presets)."""
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
            raise ValueError(
                f"cov must be {len(self.free)}×{len(self.free)} for free={self.free}, got row lengths {shape}"
            )

    def source(self, key: str) -> str:
        """Where parameter `key` ("intra", "inter", or a field name) came from."""
        return dict(self.sources)[key]

    def predict(self, shape: Shape) -> Prediction:
        base = shape.compute_work(self.contention_exponent)
        compute = self.compute_s_per_sample * base
        bubble = compute * shape.bubble / (1.0 - shape.bubble)
        terms = comm_at(shape, self.intra, self.inter, compute)
        u = self.exposed_comm
        comm = terms.exposed_s + u * terms.hidden_s
        step = compute + bubble + comm + self.overhead_s

        var = self.rel_sigma**2
        if self.free and step > 0:
            # Parameter uncertainty grows with how far this shape's terms lie from the trials'.
            row = dict(zip(PARAMS, (base / (1.0 - shape.bubble), terms.hidden_s, 1.0)))
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
            recompute_s=compute * shape.recompute / (1.0 + shape.recompute),
            bubble_s=bubble,
            comm_s=comm,
            comm_total_s=terms.total_s,
            dp_comm_s=terms.dp_exposed_s + u * (terms.dp_total_s - terms.dp_exposed_s),
            tp_comm_s=terms.tp_exposed_s + u * (terms.tp_total_s - terms.tp_exposed_s),
            pp_comm_s=terms.pp_exposed_s,
            ep_comm_s=terms.ep_total_s,
            cp_comm_s=terms.cp_exposed_s,
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
