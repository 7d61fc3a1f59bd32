"""How much of a step's communication the compute hides, per layout (see `comm` for what each
collective costs). Pure: no I/O, no torch.

With a pass = one forward+backward of a micro-batch (of a pipeline microbatch under pp), its
compute P = compute_s / passes, its backward window W = β·P (β: backward's share, recompute
included) and its forward F = P − W:

DDP      one bucketed all-reduce per optimizer step, on the last pass only (no_sync before);
         buckets become ready as backward goes, so what does not fit under the window is
         exposed, and at least the last bucket (it is ready only when backward ends):
             exposed = max(T_last_bucket, T_all − W)
FSDP     per pass: the root's and the first block's all-gathers are exposed, block i+1's
         all-gather hides under block i's forward (prefetch): AG_r + AG_b + (L−1)·max(0, AG_b − F/L);
         in backward block i−1's all-gather (when resharded) and block i+1's reduce-scatter hide
         under block i's backward, the first backward all-gather and the last reduce-scatters
         (the first block's and the root's) are exposed. Reduce-scatters run on the last pass
         only (set_requires_gradient_sync; on every pass under fsdp_sync_each_microstep:
         Traffic.syncs), all-gathers on every pass (once per step for a
         pipeline stage that keeps its parameters: Traffic.gathered_once).
TP       sequence-parallel all-gathers and reduce-scatters on the critical path: TP_EXPOSED of them;
         under trainer.tp_comm_overlap each is split into tp chunks pipelined against its matmul,
         so one chunk in tp waits, and what the step's compute cannot cover:
             exposed = T_tp / tp + max(0, T_tp · (1 − 1/tp) − compute)
PP       each slot of the schedule waits for its microbatch's send: sends × one p2p time.
EP       expert parallel's all-to-alls (dispatch before, combine after each MoE block's experts,
         forward and backward): on the critical path, none hidden (no overlap is modelled).
HSDP     as FSDP inside the shard group (`dp`), and after each reduce-scatter an all-reduce of the
         gradient shard across the replicas (`replicate`), hidden as the reduce-scatters are.
CP       torch's ring (perf/ring.py): each exchange of keys and values overlaps one ring step's
         attention; the cp ranks' gradients are reduced inside FSDP's group (dp × cp).
CLIP     gradient clipping's global norm: one fp32 scalar all-reduced per step on each group that
         splits the gradients (Traffic.norm_groups), between the last backward and the optimizer
         step, with nothing to hide under: exposed in full, in its group's part. Four bytes: its
         time is the ring's latency, 2(n−1)·α (a tree's 2·log₂n·α across nodes), microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.layouts import DataParallel
from launcher.perf.comm import (
    TP_EXPOSED,
    Group,
    Topology,
    Traffic,
    all_to_all_s,
    allreduce_s,
    ddp_bucket_bytes,
    ddp_buckets,
    gather_s,
    overlap_share,
    p2p_s,
)
from launcher.perf.links import Link
from launcher.perf.ring import ring_s


@dataclass(kw_only=True, frozen=True)
class Groups:
    """The three groups one rank belongs to."""

    dp: Group
    """Its data-parallel group."""
    tp: Group
    """Its tensor-parallel group."""
    pp: Group
    """Its pipeline group."""
    ep: Group | None = None
    """Its expert-parallel group (ep consecutive dp ranks); None without expert parallelism."""
    cp: Group = Group(size=1, per_node=1)
    """Its context-parallel ring."""
    replicate: Group = Group(size=1, per_node=1)
    """hsdp: the replicas of its shard it all-reduces its gradient shard with."""


@dataclass(kw_only=True, frozen=True)
class CommTerms:
    """A step's communication by layout part: all of it, and what the overlap model leaves exposed."""

    dp_total_s: float
    """Data-parallel collectives (DDP's all-reduce, FSDP's gathers and scatters), none hidden."""
    dp_exposed_s: float
    """…of which compute does not hide."""
    tp_total_s: float
    """Tensor-parallel collectives, none hidden."""
    tp_exposed_s: float
    """…of which on the critical path (TP_EXPOSED of them)."""
    pp_total_s: float
    """Pipeline sends on the critical path (none hidden: `pp_exposed_s` is the same)."""
    ep_total_s: float = 0.0
    """Expert-parallel all-to-alls (dispatch, combine), not overlapped: exposed in full (the
    engines wait for each before the experts, or the combine, can run)."""
    cp_total_s: float = 0.0
    """Context-parallel ring exchanges, none hidden."""
    cp_exposed_s: float = 0.0
    """…of which the ring's attention does not hide."""

    @property
    def pp_exposed_s(self) -> float:
        return self.pp_total_s

    @property
    def total_s(self) -> float:
        """T: every collective's time, the most a step could expose."""
        return self.dp_total_s + self.tp_total_s + self.pp_total_s + self.ep_total_s + self.cp_total_s

    @property
    def exposed_s(self) -> float:
        """X: what the overlap model leaves exposed."""
        return self.dp_exposed_s + self.tp_exposed_s + self.pp_exposed_s + self.ep_total_s + self.cp_exposed_s

    @property
    def hidden_s(self) -> float:
        """H = T − X: what the overlap model credits compute with hiding."""
        return self.total_s - self.exposed_s


def comm_terms(
    traffic: Traffic,
    groups: Groups,
    topo: Topology,
    intra: Link,
    inter: Link,
    *,
    compute_s: float,
    backward_share: float,
) -> CommTerms:
    """The step's communication given its compute (seconds, bubble excluded)."""
    t = traffic
    pass_s = compute_s / t.passes
    window = backward_share * pass_s
    dp_total, dp_exposed = 0.0, 0.0
    if t.data_parallel == DataParallel.ddp and t.grad_bytes and groups.dp.size > 1:
        dp_total, dp_exposed = _ddp(t, groups.dp, topo, intra, inter, window)
    elif t.data_parallel == DataParallel.fsdp and groups.dp.size > 1:
        links = (topo, intra, inter)
        dp_total, dp_exposed = _fsdp(t, groups.dp, groups.replicate, links, forward=pass_s - window, backward=window)
    tp_total = 0.0
    if t.tp_collectives and groups.tp.size > 1:
        nbytes = t.tp_bytes * t.tp_collectives
        tp_total = t.passes * gather_s(nbytes, groups.tp, topo, intra, inter, messages=t.tp_collectives)
    pp_total = 0.0
    if t.pp_sends and groups.pp.size > 1:
        crosses = not topo.on_nvlink(groups.pp)
        pp_total = t.pp_sends * p2p_s(t.pp_bytes, crosses, intra, inter, topo.nics_per_node / topo.ranks_per_node)
    ep_total = 0.0
    if t.ep_all_to_alls and groups.ep is not None:
        ep_total = all_to_all_s(t.ep_bytes, groups.ep, topo, intra, inter, messages=t.ep_all_to_alls)
    cp_total, cp_exposed = ring_s(t, groups.cp, topo, intra, inter, pass_s=pass_s)
    norm = {name: _norm_s(getattr(groups, name), topo, intra, inter) for name in t.norm_groups}
    dp_norm, tp_norm, pp_norm = (norm.get(name, 0.0) for name in ("dp", "tp", "pp"))
    return CommTerms(
        dp_total_s=dp_total + dp_norm,
        dp_exposed_s=dp_exposed + dp_norm,
        tp_total_s=tp_total + tp_norm,
        tp_exposed_s=tp_exposed_s(tp_total, groups.tp.size, compute_s=compute_s, overlap=t.tp_overlap) + tp_norm,
        pp_total_s=pp_total + pp_norm,
        ep_total_s=ep_total,
        cp_total_s=cp_total,
        cp_exposed_s=cp_exposed,
    )


def tp_exposed_s(total: float, tp: int, *, compute_s: float, overlap: bool) -> float:
    """The tp collectives' time left on the critical path. Chunked (Megatron's userbuffers, torch's async
    TP: a ring of tp steps, each moving one rank's chunk while the matmul works on the last), the first
    all-gather chunk and the last reduce-scatter chunk wait, 1/tp of the time, and the rest hides under
    the matmuls as far as the step's compute reaches."""
    if not overlap or tp <= 1:
        return TP_EXPOSED * total
    return total / tp + max(0.0, total * (1 - 1 / tp) - compute_s)


NORM_BYTES = 4
"""One fp32 scalar: gradient clipping's norm (squared) all-reduced per group."""


def _norm_s(g: Group, topo: Topology, intra: Link, inter: Link) -> float:
    return allreduce_s(NORM_BYTES, g, topo, intra, inter) if g.size > 1 else 0.0


def _ddp(t: Traffic, g: Group, topo: Topology, intra: Link, inter: Link, window: float) -> tuple[float, float]:
    """All of DDP's all-reduce T, and what the backward window leaves exposed: the buckets go one after another
    from when the first is ready, once backward has produced its gradients (a share of the window by bytes, as
    backward's FLOPs follow the parameters), so compute can hide them only over what is left of the window
    after that, and only the link's `overlap` share of it (`hidden`); the last bucket, ready when backward
    ends, is exposed whatever the rest: max(T_last, T − hidden(T, window − ready_first))."""
    total = allreduce_s(t.grad_bytes, g, topo, intra, inter, messages=ddp_buckets(t.grad_bytes))
    buckets = ddp_bucket_bytes(t.grad_bytes)
    last = allreduce_s(buckets[-1], g, topo, intra, inter)
    left = window * (1.0 - buckets[0] / t.grad_bytes)  # the window after the first bucket is ready
    return total, max(last, total - hidden(total, left, overlap_share(g, topo, intra, inter)))


def hidden(comm: float, compute: float, share: float) -> float:
    """Seconds of `comm` that `compute` running at once hides: `share` of the shorter (what a site profile's
    overlap measures: t_comm + t_compute − t_both = share · t_comm, the compute the longer); negative
    where running both at once costs more than one after the other."""
    return share * min(comm, max(0.0, compute))


def _fsdp(
    t: Traffic, g: Group, rep: Group, links: tuple[Topology, Link, Link], *, forward: float, backward: float
) -> tuple[float, float]:
    L = t.blocks
    blocks = 1.0 - t.root_share

    def gather(nbytes: float) -> float:
        return gather_s(nbytes, g, *links) if nbytes > 0 else 0.0

    def across(nbytes: float) -> float:  # hsdp: the gradient shard's all-reduce over the replicas
        return allreduce_s(nbytes / g.size, rep, *links) if nbytes > 0 else 0.0

    p_root = t.root_share if t.param_root_share is None else t.param_root_share  # fp8: the root gathers bf16
    ag_b, ag_r = gather(t.param_bytes * (1.0 - p_root) / L), gather(t.param_bytes * p_root)
    rs_b = gather(t.grad_bytes * blocks / L) + across(t.grad_bytes * blocks / L)
    rs_r = gather(t.grad_bytes * t.root_share) + across(t.grad_bytes * t.root_share)
    share = overlap_share(g, *links)
    f_l, b_l = forward / L, backward / L
    again = ag_b if t.reshard else 0.0  # backward's all-gather of a block freed after forward
    fwd = ag_r + ag_b + (L - 1) * (ag_b - hidden(ag_b, f_l, share))
    bwd = again + (L - 1) * (again - hidden(again, b_l, share))
    bwd_sync = again + (L - 1) * (again + rs_b - hidden(again + rs_b, b_l, share)) + rs_b + rs_r
    gathering = 1 if t.gathered_once else t.passes  # passes whose forward gathers
    exposed = gathering * fwd + (t.passes - t.syncs) * bwd + t.syncs * bwd_sync
    total = gathering * (ag_r + L * ag_b) + t.passes * L * again + t.syncs * (L * rs_b + rs_r)
    return total, exposed
