"""Communication of every layout, one home for the presets and the calibrated model alike: where
each group of ranks sits (topology), what one collective costs on the links it crosses, and how
much of a step's traffic the compute hides. Pure: no I/O, no torch.

Ranks are laid out dp × pp × tp with tp innermost (train/engines/base.py), node by node, so a tp
group is consecutive ranks, a pp group strides tp ranks and a dp group tp·pp ranks.

A collective over a group that stays in one node runs on the in-node link, and so does one whose
group stays within one NVLink domain of several nodes (cluster.nvlink_domain: GB200 NVL72's 72 GPUs).
One that spans N nodes with g members each runs as NCCL runs it: a ring crosses each node boundary once per channel and
NCCL opens one channel per NIC, so the node's k NICs carry the ring; every rank of the node talks
in its own group at the same time (rpn / g groups per node), so a group gets g·k/rpn NICs' worth:

    B_eff = min(B_intra, B_inter · g · k / rpn)      (k = cluster.nics_per_node; B_inter per NIC)

With 8 NICs on 8 GPUs a dp group holding one GPU per node (tp = 8) gets one NIC per GPU (rails);
with 1 NIC the node's GPUs share it. Times (S bytes, n ranks):

    all-reduce              2(n−1)/n · S / B_eff + messages · hops · α
    all-gather/reduce-scatter (n−1)/n · S / B_eff + messages · (n−1) · α
    ring hops = 2(n−1); NCCL's tree (across nodes, hierarchical: in-node chain, then a binary
    tree of nodes) hops = 2(⌈log2 N⌉ + g − 1) at NCCL_TREE_BW_SHARE of the ring's bandwidth; NCCL
    picks the algorithm per message by the time its model predicts for each (NCCL_ALGO unset), so an
    all-reduce takes the faster of the two: the tree for small messages at many nodes, where the
    ring's 2(n−1) hops dominate, the ring for large ones

The tree only where NCCL runs (GPUs); gloo rings on CPU. α is the slowest link's the group uses.
See `exposed` for what each layout hides behind compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from launcher.layouts import DataParallel
from launcher.perf.links import Link

DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""torch DDP's first gradient bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES): small, so
the first all-reduce starts early in backward."""
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""torch DDP's other buckets (bucket_cap_mb=25, the engines' default)."""
BACKWARD_SHARE = 2.0 / 3.0
"""Backward's share of a forward+backward pass without recompute: 4 of the 6 FLOPs per
parameter and token."""
TP_EXPOSED = 1.0
"""Share of the tensor-parallel collectives on the critical path without trainer.tp_comm_overlap:
sequence-parallel all-gathers and reduce-scatters sit between the matmuls that need their output
(no overlap in the engines, nor in Megatron's default); the calibrated model's factor scales it with
the rest. With it: overlap.tp_exposed_s."""


def ddp_buckets(grad_bytes: int) -> int:
    """All-reduces DDP issues per step for `grad_bytes` of gradients: the 1 MiB first bucket, then
    25 MiB ones (a bucket closes once it reaches its cap, so this is the count to within one)."""
    return 1 + math.ceil(max(0, grad_bytes - DDP_FIRST_BUCKET_BYTES) / DDP_BUCKET_BYTES)


def ddp_bucket_bytes(grad_bytes: int) -> list[int]:
    """Bytes of each bucket DDP all-reduces, in the order backward makes them ready: the 1 MiB first
    bucket (the last layers' gradients), 25 MiB ones, then the rest (the first layers', ready last)."""
    buckets = ddp_buckets(grad_bytes)
    if buckets == 1:
        return [grad_bytes]
    return [DDP_FIRST_BUCKET_BYTES] + [DDP_BUCKET_BYTES] * (buckets - 2) + [ddp_last_bucket(grad_bytes)]


def ddp_last_bucket(grad_bytes: int) -> int:
    """Bytes of the last bucket DDP all-reduces (the first layers' gradients, ready last)."""
    buckets = ddp_buckets(grad_bytes)
    if buckets == 1:
        return grad_bytes
    return grad_bytes - DDP_FIRST_BUCKET_BYTES - (buckets - 2) * DDP_BUCKET_BYTES


@dataclass(kw_only=True, frozen=True)
class Group:
    """Where one communicating group of ranks sits."""

    size: int
    """Ranks in the group (n)."""
    per_node: int
    """Members on one node (g): size when the group stays in one node."""
    stride: int = field(default=1, compare=False)
    """Ranks between two consecutive members: the group lies within size × stride consecutive ranks
    (where an NVLink domain holds it; not part of what makes two groups alike)."""

    @property
    def nodes(self) -> int:
        return -(-self.size // self.per_node)

    @property
    def spans_nodes(self) -> bool:
        return self.size > self.per_node


def group(size: int, stride: int, ranks_per_node: int) -> Group:
    """The group of `size` ranks `stride` apart (dp: tp·pp; pp: tp; tp: 1) on nodes of
    `ranks_per_node` ranks."""
    if size < 1 or stride < 1 or ranks_per_node < 1:
        raise ValueError(f"a group needs size, stride, ranks_per_node ≥ 1, got {size}, {stride}, {ranks_per_node}")
    return Group(size=size, per_node=max(1, min(size, ranks_per_node // stride)), stride=stride)


@dataclass(kw_only=True, frozen=True)
class Leaf:
    """The switches above the nodes: a group spanning more nodes than one leaf switch holds crosses the
    layer above it, where each NIC gets 1/oversubscription of its rate (see `bandwidth`)."""

    nodes: int = 0
    """Nodes under one leaf switch (cluster.nodes_per_leaf); 0: every node under one non-blocking fabric."""
    oversubscription: float = 1.0
    """A leaf's downlink ÷ uplink bandwidth (cluster.oversubscription), ≥ 1; 1: non-blocking."""

    def __post_init__(self) -> None:
        if self.nodes < 0 or not (math.isfinite(self.oversubscription) and self.oversubscription >= 1.0):
            raise ValueError(
                f"leaf: nodes must be ≥ 0 and oversubscription ≥ 1, got {self.nodes}, {self.oversubscription}"
            )

    def crossed_by(self, g: Group, ranks_per_node: int) -> bool:
        """The group's members lie under more than one leaf: its size × stride consecutive ranks span
        more nodes than a leaf holds (nodes fill leaves in order, as a job's nodes sit in a block)."""
        return self.nodes > 0 and -(-g.size * g.stride // ranks_per_node) > self.nodes


@dataclass(kw_only=True, frozen=True)
class Topology:
    """The nodes and how NCCL may use them."""

    ranks_per_node: int
    """Ranks on one node (rpn)."""
    nics_per_node: int = 1
    """Network interfaces (rails) per node, each at the inter-node link's bandwidth (k)."""
    tree: bool = False
    """Whether collectives may take NCCL's tree across nodes (NCCL on GPUs; gloo rings only)."""
    nvlink_domain: int = 0
    """Ranks sharing one NVLink domain, a multiple of ranks_per_node (GB200 NVL72: 72, over 18 nodes of 4);
    0: each node is its own domain."""
    leaf: Leaf = Leaf()
    """The leaf switches and the oversubscription above them (default: one non-blocking fabric)."""

    def __post_init__(self) -> None:
        if self.ranks_per_node < 1 or self.nics_per_node < 1:
            raise ValueError(
                f"topology: ranks_per_node and nics_per_node must be ≥ 1, got "
                f"{self.ranks_per_node}, {self.nics_per_node}"
            )
        if self.nvlink_domain < 0 or self.nvlink_domain % self.ranks_per_node:
            raise ValueError(
                f"topology: nvlink_domain={self.nvlink_domain} must be 0 or a multiple of "
                f"ranks_per_node={self.ranks_per_node}"
            )

    def on_nvlink(self, g: Group) -> bool:
        """The group's collectives stay on the in-node link (NVLink): it lies within one node, or within
        one NVLink domain (its size × stride consecutive ranks fit in one, as domains hold whole nodes)."""
        return not g.spans_nodes or (self.nvlink_domain > 0 and g.size * g.stride <= self.nvlink_domain)

    def share(self, g: Group) -> float:
        """Inter-node links' worth a spanning group's ring gets: g·k/rpn (see the module docstring)."""
        return g.per_node * self.nics_per_node / self.ranks_per_node


def bandwidth(g: Group, topo: Topology, intra: Link, inter: Link) -> float:
    """B_eff in bytes/s for a ring over `g`; ÷ the oversubscription when the group spans leaf switches.

    Above a leaf with oversubscription r, its nodes' NICs share 1/r of their rate on the uplinks. Every
    rank runs its group's collective at once, and where the job's nodes sit and how ECMP hashes their
    flows onto the uplinks is the scheduler's and the fabric's, not the plan's: so a spanning group's
    inter-node hops are taken to cross at B_inter / r (Llama 3's 24K-GPU RoCE fabric, 1:7 above its
    3072-GPU pods, keeps data-parallel traffic inside a pod for this reason, arXiv 2407.21783 §3.3.1;
    NVIDIA's SuperPOD reference builds a non-blocking fat tree, r = 1, for collectives' sake)."""
    if topo.on_nvlink(g):
        return intra.bandwidth_gbps * 1e9
    inter_gbps = inter.bandwidth_gbps * topo.share(g)
    if topo.leaf.crossed_by(g, topo.ranks_per_node):
        inter_gbps /= topo.leaf.oversubscription
    return min(intra.bandwidth_gbps, inter_gbps) * 1e9


def overlap_share(g: Group, topo: Topology, intra: Link, inter: Link) -> float:
    """The share of the group's collectives that compute hides: the least `overlap` of the links it crosses."""
    return intra.overlap if topo.on_nvlink(g) else min(intra.overlap, inter.overlap)


def latency(g: Group, intra: Link, inter: Link, topo: Topology | None = None) -> float:
    """α of the slowest link the group's ring uses (`topo`: whether an NVLink domain holds it)."""
    on_nvlink = topo.on_nvlink(g) if topo is not None else not g.spans_nodes
    return intra.latency_s if on_nvlink else inter.latency_s


def allreduce_hops(g: Group, topo: Topology) -> float:
    """Latency terms of one all-reduce: the ring's 2(n−1), or NCCL's tree across nodes when shorter."""
    ring = 2.0 * (g.size - 1)
    if not topo.tree or topo.on_nvlink(g):
        return ring
    return min(ring, 2.0 * (math.ceil(math.log2(g.nodes)) + g.per_node - 1))


NCCL_TREE_BW_SHARE = 0.92
"""The tree all-reduce's bus bandwidth ÷ the ring's in NCCL's own cost model (src/graph/tuning.cc,
ncclTopoTuneModel: `if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce) busBw = min(busBw * .92, …)`),
from which NCCL picks the algorithm and protocol of each collective by predicted time (ncclTopoGetAlgoTime:
latency + bytes / bandwidth); its latency there is 2·((ranks per node − 1)·intra + log2(nodes)·inter)
against the ring's hops between every pair of neighbours, which is why the tree wins small messages at scale."""


def allreduce_s(nbytes: float, g: Group, topo: Topology, intra: Link, inter: Link, *, messages: int = 1) -> float:
    """Seconds of all-reducing `nbytes` over `g` in `messages` collectives (0 for one rank): the ring's
    time, or NCCL's tree's (its log-depth latency at NCCL_TREE_BW_SHARE of the bandwidth) when faster."""
    if g.size == 1:
        return 0.0
    n = g.size
    bw = 2.0 * (n - 1) / n * nbytes / bandwidth(g, topo, intra, inter)
    alpha = latency(g, intra, inter, topo)
    ring = bw + messages * 2.0 * (n - 1) * alpha
    if not topo.tree or topo.on_nvlink(g):
        return ring
    return min(ring, bw / NCCL_TREE_BW_SHARE + messages * allreduce_hops(g, topo) * alpha)


def gather_s(nbytes: float, g: Group, topo: Topology, intra: Link, inter: Link, *, messages: int = 1) -> float:
    """Seconds of all-gathering (or reduce-scattering) `nbytes` in all (the full tensor) over `g`
    in `messages` collectives: half an all-reduce's bytes and its ring's hops (NCCL has no tree
    for these)."""
    if g.size == 1:
        return 0.0
    n = g.size
    alpha = latency(g, intra, inter, topo)
    return (n - 1) / n * nbytes / bandwidth(g, topo, intra, inter) + messages * (n - 1) * alpha


def p2p_s(nbytes: float, crosses_nodes: bool, intra: Link, inter: Link, nics_share: float) -> float:
    """Seconds of one point-to-point send of `nbytes` (a stage boundary): one hop; across nodes
    at the NIC share the sending rank has."""
    if crosses_nodes:
        return nbytes / (min(intra.bandwidth_gbps, inter.bandwidth_gbps * nics_share) * 1e9) + inter.latency_s
    return nbytes / (intra.bandwidth_gbps * 1e9) + intra.latency_s


def all_to_all_s(nbytes: float, g: Group, topo: Topology, intra: Link, inter: Link, *, messages: int = 1) -> float:
    """Seconds of `messages` all-to-alls of `nbytes` each (a rank's whole buffer) over `g`: each rank
    sends (n−1)/n of it, one message to each of the n − 1 others, on the links the group crosses."""
    if g.size == 1:
        return 0.0
    n = g.size
    per = (n - 1) / n * nbytes / bandwidth(g, topo, intra, inter) + (n - 1) * latency(g, intra, inter)
    return messages * per


@dataclass(kw_only=True, frozen=True)
class Traffic:
    """What one rank communicates per optimizer step, by kind; bytes at the dtype on the wire."""

    data_parallel: DataParallel = DataParallel.none
    """How gradients cross the dp group: `ddp` (bucketed all-reduce), `fsdp` (per-unit all-gathers
    and reduce-scatters) or `none`."""
    grad_bytes: int = 0
    """This rank's whole gradient (tp/pp-local, unsharded) at the reduce dtype: DDP's all-reduce,
    FSDP's reduce-scatters together."""
    param_bytes: int = 0
    """FSDP: this rank's parameters (tp/pp-local, unsharded) at the parameter dtype: one round of
    its all-gathers together. 0 for DDP."""
    root_share: float = 0.0
    """FSDP: share of grad/param bytes in the root unit (embeddings, final norm, head), gathered
    once per pass and never resharded after forward; the rest is split evenly over `blocks`."""
    param_root_share: float | None = None
    """FSDP: the root's share of param_bytes where it differs from root_share (fp8 gathers the blocks'
    weights in fp8, the root's in bf16); None: root_share."""
    blocks: int = 1
    """FSDP units besides the root: the blocks of this rank's stages."""
    reshard: bool = True
    """FSDP: blocks freed after forward are gathered again for backward (ZeRO-3)."""
    gathered_once: bool = False
    """FSDP: parameters stay gathered across the step's passes, so forward gathers once per step:
    a pipeline stage not resharding after forward (torch's stage keeps parameters unsharded after
    every backward but the step's last). Otherwise every pass gathers (FSDP reshards after backward)."""
    passes: int = 1
    """Forward+backward passes per optimizer step: accumulation × pipeline microbatches."""
    syncs: int = 1
    """FSDP: passes whose backward reduce-scatters the gradients: 1 (the step's last), or every
    micro-step's under parallel.fsdp_sync_each_microstep (accumulation without a pipeline)."""
    tp_bytes: int = 0
    """Bytes of one tensor-parallel collective's full activation (microbatch × seq × d_model × bytes)."""
    tp_collectives: int = 0
    """Tensor-parallel all-gathers and reduce-scatters per pass (forward, backward, recompute)."""
    tp_overlap: bool = False
    """The tp collectives run in tp chunks pipelined against their matmuls (trainer.tp_comm_overlap):
    overlap.tp_exposed_s."""
    pp_bytes: int = 0
    """Bytes of one send across a stage boundary (a microbatch's activation or its gradient)."""
    pp_sends: int = 0
    """Sends on the pipeline's critical path per optimizer step: 2 (forward, backward) per slot
    of the schedule, v·m + p − 1 slots per micro-step."""
    ep_bytes: int = 0
    """Expert parallel: bytes of one all-to-all's full buffer on a rank, its tokens × top-k × d_model × wire
    bytes (one pass's tokens through one MoE block); (ep − 1)/ep of it leaves the rank."""
    ep_all_to_alls: int = 0
    """Expert-parallel all-to-alls per optimizer step: dispatch and combine per MoE block, in forward and
    again (their transposes) in backward, per pass."""
    cp_bytes: int = 0
    """Context parallel: bytes of one ring exchange, this rank's keys and values of one layer and
    (pipeline) microbatch (its 1/cp of the sequence, its 1/tp of the kv heads)."""
    cp_layers: int = 0
    """Layers whose attention runs the ring on this rank each pass (its stage's blocks); 0 without cp."""
    cp_recompute: bool = False
    """Full activation checkpointing replays each block's forward, its ring with it."""
    attention_share: float = 0.0
    """Share of a pass's executed compute in the attention cores (scores and weighted values, forward and
    backward): what torch's ring overlaps its exchanges with."""
    norm_groups: tuple[str, ...] = ()
    """Groups (of "dp", "tp", "pp") over which gradient clipping completes the global norm: one
    fp32 scalar all-reduce each per optimizer step (train/clipping.py): FSDP's dp, tp, pp."""

    def __post_init__(self) -> None:
        if self.data_parallel not in tuple(DataParallel):
            raise ValueError(f"traffic: data_parallel must be ddp, fsdp or none, got {self.data_parallel!r}")
        for name in (
            "grad_bytes",
            "param_bytes",
            "tp_bytes",
            "tp_collectives",
            "pp_bytes",
            "pp_sends",
            "cp_bytes",
            "ep_bytes",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"traffic: {name} must be ≥ 0, got {getattr(self, name)}")
        if self.blocks < 1 or self.passes < 1:
            raise ValueError(f"traffic: blocks and passes must be ≥ 1, got {self.blocks}, {self.passes}")
        if not set(self.norm_groups) <= {"dp", "tp", "pp"}:
            raise ValueError(f"traffic: norm_groups must name dp, tp or pp, got {self.norm_groups}")
        if not 1 <= self.syncs <= self.passes:
            raise ValueError(f"traffic: syncs must be in [1, passes={self.passes}], got {self.syncs}")
        for name in ("root_share", "param_root_share"):
            if not 0.0 <= (getattr(self, name) or 0.0) <= 1.0:
                raise ValueError(f"traffic: {name} must be in [0, 1], got {getattr(self, name)}")
