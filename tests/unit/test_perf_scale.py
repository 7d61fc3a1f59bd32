"""What the model adds where real runs lose efficiency with size (issue 32 item 4), each term on literal
shapes: NCCL's algorithm chosen per message by its time (the tree's log-depth latency for small
all-reduces at many nodes, the ring's bandwidth for large ones), an oversubscribed layer above the leaf
switches, and the wait for the slowest of N ranks (stragglers); the cluster fields that set them."""

from __future__ import annotations

import math

import pytest

from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.perf.comm import NCCL_TREE_BW_SHARE, Group, Leaf, Topology, allreduce_s, bandwidth, gather_s
from launcher.perf.links import Link
from launcher.perf.presets import from_presets
from launcher.perf.shapes import shape_for
from launcher.perf.step import Shape
from launcher.perf.stragglers import fitted_jitter, harmonic, straggle

NV = Link(bandwidth_gbps=100.0, latency_s=2e-6, name="nv")
IB = Link(bandwidth_gbps=10.0, latency_s=10e-6, name="ib")
NCCL = Topology(ranks_per_node=8, nics_per_node=8, tree=True)


def test_a_small_all_reduce_at_4096_ranks_is_latency_bound_and_slower_than_at_64():
    small = 4096.0  # bytes: a clipping norm's worth, or a tiny bucket
    at_64, at_4096 = Group(size=64, per_node=8), Group(size=4096, per_node=8)  # 8 and 512 nodes
    t64, t4096 = allreduce_s(small, at_64, NCCL, NV, IB), allreduce_s(small, at_4096, NCCL, NV, IB)
    assert t4096 > t64
    # Latency-bound: the bytes' share of the time is under 1%; the tree's 2·(log2 512 + 7) hops are the rest.
    assert t4096 == pytest.approx(2 * 4095 / 4096 * small / 80e9 / NCCL_TREE_BW_SHARE + 2 * (9 + 7) * 10e-6)
    assert 2 * 4095 / 4096 * small / 80e9 / t4096 < 0.01


def test_tree_beats_ring_for_small_messages_at_many_nodes_and_ring_wins_large_ones():
    g = Group(size=4096, per_node=8)
    ring_only = Topology(ranks_per_node=8, nics_per_node=8)  # gloo's rings, or NCCL_ALGO=Ring
    bw = 2 * 4095 / 4096 / 80e9  # seconds per byte of the ring
    for nbytes in (0.0, 4096.0, 1 * 2**20):
        ring = allreduce_s(nbytes, g, ring_only, NV, IB)
        assert ring == pytest.approx(bw * nbytes + 2 * 4095 * 10e-6)
        assert allreduce_s(nbytes, g, NCCL, NV, IB) == pytest.approx(bw * nbytes / 0.92 + 32 * 10e-6)
        assert allreduce_s(nbytes, g, NCCL, NV, IB) < ring
    # 8 nodes, 1 GiB: the tree's 8% less bandwidth (2.3 ms) costs more than the ring's 106 extra hops
    # (1.06 ms) save, so the ring it is; 1 MiB: the tree.
    g64, big = Group(size=64, per_node=8), 2.0**30
    bw64 = 2 * 63 / 64 / 80e9
    assert allreduce_s(big, g64, NCCL, NV, IB) == pytest.approx(bw64 * big + 126 * 10e-6)
    assert bw64 * big / 0.92 + 20 * 10e-6 > bw64 * big + 126 * 10e-6
    assert allreduce_s(2.0**20, g64, NCCL, NV, IB) == pytest.approx(bw64 * 2.0**20 / 0.92 + 20 * 10e-6)


def test_two_to_one_oversubscription_doubles_the_cross_leaf_term():
    leafy = Topology(ranks_per_node=8, nics_per_node=8, leaf=Leaf(nodes=4, oversubscription=2.0))
    flat = Topology(ranks_per_node=8, nics_per_node=8)
    inside, across = Group(size=32, per_node=8), Group(size=64, per_node=8)  # 4 nodes (one leaf), 8 nodes
    assert bandwidth(inside, leafy, NV, IB) == bandwidth(inside, flat, NV, IB) == 80e9
    assert bandwidth(across, flat, NV, IB) == 80e9
    assert bandwidth(across, leafy, NV, IB) == 40e9
    gib = 2.0**30
    assert gather_s(gib, across, leafy, NV, IB) - 63 * 10e-6 == pytest.approx(2 * (63 / 64 * gib / 80e9))
    # A dp group one rank per node (tp = 8 beside it) spans 8 nodes' worth of ranks: it crosses too.
    strided = Group(size=8, per_node=1, stride=8)
    assert bandwidth(strided, leafy, NV, IB) == bandwidth(strided, flat, NV, IB) / 2
    # 1:1 (a non-blocking fat tree) changes nothing, however many leaves.
    assert bandwidth(across, Topology(ranks_per_node=8, nics_per_node=8, leaf=Leaf(nodes=1)), NV, IB) == 80e9
    with pytest.raises(ValueError, match=r"leaf: nodes must be ≥ 0 and oversubscription ≥ 1, got 4, 0.5"):
        Leaf(nodes=4, oversubscription=0.5)


def test_straggle_is_the_expected_maximum_of_exponential_delays():
    assert harmonic(1) == 1.0 and harmonic(4) == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4)
    # Past the exact sum: the asymptotic series, continuous with it.
    assert harmonic(4097) == pytest.approx(harmonic(4096) + 1 / 4097, rel=1e-14)
    assert straggle(1, 0.05) == 1.0 and straggle(4096, 0.0) == 1.0
    assert straggle(8, 0.02) == pytest.approx(1 + 0.02 * (1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6 + 1 / 7 + 1 / 8))
    # + s·ln 2 per doubling at scale.
    assert straggle(8192, 0.02) - straggle(4096, 0.02) == pytest.approx(0.02 * math.log(2), rel=1e-3)
    with pytest.raises(ValueError, match=r"straggle needs a finite jitter ≥ 0, got -0.1"):
        straggle(8, -0.1)


def test_a_jittery_step_waits_for_the_slowest_rank_weak_scaling_loses_efficiency():
    model = from_presets(compute_s_per_sample=0.1, intra=NV, inter=IB)

    def step(n: int, jitter: float) -> float:
        return model.predict(Shape(world_size=n, ranks_per_node=8, dp=n, global_batch=4 * n, jitter=jitter)).step_s

    assert step(8, 0.0) == step(512, 0.0) == pytest.approx(0.4)  # nothing communicated: flat without jitter
    assert step(512, 0.02) / step(8, 0.02) == pytest.approx(straggle(512, 0.02) / straggle(8, 0.02))
    assert step(512, 0.02) / step(8, 0.02) > 1.05
    with pytest.raises(ValueError, match=r"shape: jitter must be a finite number ≥ 0, got -1"):
        Shape(world_size=8, ranks_per_node=8, dp=8, global_batch=8, jitter=-1)


def test_cluster_fields_reach_the_plan_and_bad_values_are_one_line():
    gpu = ["cluster=example_gpu_site", "model=gpt_1_3b", "parallel=fsdp", "cluster.nics_per_node=8"]
    assert shape_for(compose_config(gpu), 64).jitter == fitted_jitter()  # GPUs: the fitted default
    assert shape_for(compose_config([*gpu, "cluster.step_jitter=0.05"]), 64).jitter == 0.05
    assert shape_for(compose_config([*gpu, "cluster.device=cpu"]), 64).jitter == 0.0  # CPU: contention instead
    leafy = shape_for(compose_config([*gpu, "cluster.nodes_per_leaf=4", "cluster.oversubscription=2"]), 64)
    assert leafy.topology.leaf == Leaf(nodes=4, oversubscription=2.0)
    for override, message in (
        (
            "cluster.oversubscription=0.5",
            "cluster.oversubscription=0.5 must be ≥ 1 (a leaf's downlink ÷ uplink bandwidth); "
            "set e.g. cluster.oversubscription=2 for 2:1, or 1 for a non-blocking fat tree",
        ),
        (
            "cluster.nodes_per_leaf=0",
            "cluster.nodes_per_leaf=0 must be ≥ 1 (nodes under one leaf switch); "
            "set e.g. cluster.nodes_per_leaf=32, or null for one non-blocking fabric",
        ),
        (
            "cluster.step_jitter=-0.01",
            "cluster.step_jitter=-0.01 must be ≥ 0 (a rank's mean relative delay per step); "
            "set e.g. cluster.step_jitter=0.01, or null for the fitted default",
        ),
    ):
        with pytest.raises(ConfigError) as raised:
            compose_config([*gpu, override])
        assert str(raised.value) == message


def test_a_gpu_plan_takes_the_straggler_jitter_the_replay_fitted():
    """site_jitter's default is preset_fit.json's `jitter` (written by published_replay), not a copy of one
    fit's figure in the code; fails if it falls back to STEP_JITTER while the file holds another figure."""
    from launcher.perf import preset_fit, stragglers

    fitted = preset_fit.load().jitter
    assert fitted is not None and fitted != stragglers.STEP_JITTER
    assert stragglers.site_jitter(None, "cuda") == fitted
    assert stragglers.site_jitter(None, "cpu") == 0.0 and stragglers.site_jitter(0.02, "cuda") == 0.02
