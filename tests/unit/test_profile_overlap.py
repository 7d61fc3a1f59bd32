"""What a site profile measures of communication beside compute, and how the overlap model prices it: DDP's
buckets hide only behind the backward left once the first is ready, and only the measured share of it; the
ring's α from every size's time, not the smallest one's (issue 32: the bed's profile alone over-predicted)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from launcher.layouts import DataParallel
from launcher.perf import site_profile
from launcher.perf.comm import Topology, Traffic, group
from launcher.perf.links import Link, ring_latency_s
from launcher.perf.overlap import Groups, comm_terms
from launcher.train import profile_node
from launcher.train.profile_plan import READABLE_VERSIONS, SCHEMA_VERSION
from tests.unit.test_site_profile import profile_doc

MiB = 2**20


def ddp_exposed(grad_bytes: int, window: float, overlap: float) -> tuple[float, float]:
    """(all of DDP's all-reduce, what is exposed) over 2 nodes of one rank, a 10 GB/s link of no latency."""
    inter = Link(bandwidth_gbps=10.0, latency_s=0.0, overlap=overlap)
    intra = Link(bandwidth_gbps=100.0, latency_s=0.0)
    dp = group(2, 1, 1)
    groups = Groups(dp=dp, tp=group(1, 1, 1), pp=group(1, 1, 1))
    traffic = Traffic(data_parallel=DataParallel.ddp, grad_bytes=grad_bytes)
    # backward is 2/3 of the pass: a compute of 1.5 × window gives `window`
    t = comm_terms(
        traffic, groups, Topology(ranks_per_node=1), intra, inter, compute_s=1.5 * window, backward_share=2 / 3
    )
    return t.dp_total_s, t.dp_exposed_s


def test_ddp_hides_its_buckets_only_behind_the_backward_left_once_the_first_is_ready():
    """28 MiB of gradients: buckets of 1, 25 and 2 MiB, 2.936 ms on the ring (2(n−1)/n · S / B, n = 2), a
    2 ms backward window. The first bucket is ready after 1/28 of it, so 27/28 of the window (1.929 ms) is
    left to hide the rest under: 1.007 ms exposed, where the window counted whole left 0.936 ms."""
    total, exposed = ddp_exposed(28 * MiB, 2e-3, 1.0)
    assert total == pytest.approx(28 * MiB / 10e9)
    assert exposed == pytest.approx(28 * MiB / 10e9 - 2e-3 * 27 / 28)
    assert exposed == pytest.approx(1.007441e-3, rel=1e-5)


def test_a_link_whose_collectives_compute_slows_hides_only_its_measured_share():
    """The same buckets on a link whose profile measured overlap 0.4 (compute running at once hides 0.4 of
    an all-reduce's time: the bed's 25 MB/s link under gloo) and −0.5 (both at once cost more than in turn:
    the bed's loopback, where gloo's copies contend with compute for the node's CPU quota)."""
    left = 2e-3 * 27 / 28
    t = 28 * MiB / 10e9
    assert ddp_exposed(28 * MiB, 2e-3, 0.4)[1] == pytest.approx(t - 0.4 * left)
    assert ddp_exposed(28 * MiB, 2e-3, -0.5)[1] == pytest.approx(t + 0.5 * left)
    assert ddp_exposed(28 * MiB, 2e-3, 0.0)[1] == pytest.approx(t)


def test_the_last_bucket_is_exposed_whatever_the_overlap():
    """One bucket (under 1 MiB) is ready only when backward ends: all of it is exposed, at any overlap; with
    a wide window the last bucket (2 MiB of 1 + 25 + 2) still is."""
    for overlap in (1.0, 0.4, -0.5):
        total, exposed = ddp_exposed(MiB // 2, 1.0, overlap)
        assert exposed == pytest.approx(total)
    assert ddp_exposed(28 * MiB, 1.0, 1.0)[1] == pytest.approx(2 * MiB / 10e9)


def test_alpha_is_the_median_over_sizes_of_the_time_beyond_the_bytes():
    """A ring of 2 at 0.025 GB/s: four sizes' all-reduces took 0.3 ms beyond their bytes, but the smallest
    stalled once (a throttled CPU-quota period: 9 ms). α = median(9, 0.3, 0.3, 0.3) ms ÷ 2(n−1) = 0.15 ms,
    where the smallest's time alone gave 4.5 ms."""
    timed = [(4096, 9e-3 + 4096 / 25e6)] + [(b, 0.3e-3 + b / 25e6) for b in (65536, 2**20, 4 * 2**20)]
    assert ring_latency_s(timed, 2, 0.025) == pytest.approx(0.15e-3)
    # 4 ranks: busbw = algbw · 2(n−1)/n, so the bytes term is S · 1.5 / busbw and α is over 6 hops
    timed4 = [(b, 0.6e-3 + b * 1.5 / 25e6) for b in (4096, 65536, 2**20)]
    assert ring_latency_s(timed4, 4, 0.025) == pytest.approx(0.1e-3)


def test_a_profiles_overlap_reaches_its_links_and_an_older_profile_keeps_the_models_assumption(tmp_path):
    doc = profile_doc() | {"overlap": {"intra": -0.25, "inter": 0.4}}
    path = tmp_path / "site.json"
    path.write_text(json.dumps(doc))
    p = site_profile.load(path)
    intra, inter = site_profile.links(p, Link(bandwidth_gbps=1, latency_s=0), Link(bandwidth_gbps=1, latency_s=0))
    assert (intra.overlap, inter.overlap) == (-0.25, 0.4)
    assert SCHEMA_VERSION == 3 and READABLE_VERSIONS == (1, 2, 3)
    old = dict(doc, version=2)  # a schema 2 file: no overlap was measured, whatever it holds
    path.write_text(json.dumps(old))
    intra, inter = site_profile.links(site_profile.load(path), intra, inter)
    assert (intra.overlap, inter.overlap) == (1.0, 1.0)
    path.write_text(json.dumps(doc | {"overlap": {"inter": 1.5}}))
    with pytest.raises(site_profile.ProfileError, match=r"inter overlap is 1.5, not a share in \[-1, 1\]"):
        site_profile.load(path)


def test_the_overlap_share_is_what_running_both_at_once_saved_of_the_comm():
    """All-reduce alone 40 ms, compute alone 80 ms: both at once in 100 ms hid 20 of the 40 (0.5); in 130 ms
    they cost 10 ms more than in turn (−0.25); never beyond [−1, 1]."""
    assert profile_node.overlap_share(0.04, 0.08, 0.10) == pytest.approx(0.5)
    assert profile_node.overlap_share(0.04, 0.08, 0.13) == pytest.approx(-0.25)
    assert profile_node.overlap_share(0.04, 0.08, 0.08) == pytest.approx(1.0)
    assert profile_node.overlap_share(0.04, 0.08, 0.30) == -1.0


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_collectives_figure_is_its_sustained_mean_over_a_count_its_first_run_sets(one_rank_group):
    """A 4 ms collective that stalls 9 ms one run in five: the median of five read 4 ms, a burst; the
    figure is the mean over ENOUGH_S ÷ 4 ms = 125 runs, capped at COMM_MAX_ITERS (100): 5 ms."""
    now, runs, waits = [0.0], [], []

    def run() -> None:
        runs.append(1)
        now[0] += 0.004 + (0.005 if len(runs) % 5 == 0 else 0.0)

    t = profile_node.sustained(run, torch.device("cpu"), lambda: waits.append(1), None, clock=lambda: now[0])
    assert (len(runs), len(waits)) == (2 + profile_node.COMM_MAX_ITERS, 1 + profile_node.COMM_MAX_ITERS)
    # runs 3..102 are timed: 20 of those 100 are multiples of 5
    assert t == pytest.approx((100 * 0.004 + 20 * 0.005) / 100)


def test_a_matmul_is_timed_on_operands_cycled_through_more_than_any_cache():
    """A 128³ fp32 pair is 128 KiB, L2-resident if re-run: the profile cycles through 64 MiB of pairs (512), as
    a step's ops read activations cold (the bed's 128³ matmul read 48 GFLOP/s re-running one pair, 40 cycling).
    Consecutive calls use other operands; the 513th comes back to the first's."""
    from launcher.train.profile_plan import COLD_BYTES

    cpu = torch.device("cpu")
    assert COLD_BYTES["cpu"] == 64 * MiB
    assert profile_node.copies(2 * 128 * 128 * 4, cpu) == 512
    assert profile_node.copies(2**30, cpu) == 1
    seen: list[int] = []
    run = profile_node._cycling([(1,), (2,), (3,)], seen.append)
    for _ in range(4):
        run()
    assert seen == [2, 3, 1, 2]
    mm = profile_node._matmul("fp32", 128, 128, 128, cpu)
    outs = [mm() for _ in range(513)]
    assert not torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[512])


def test_the_overlap_share_sums_seconds_of_all_reduce_not_a_collectives_window(one_rank_group):
    """The share is a difference of three sums, noisier than any one: its rounds run until OVERLAP_S (2 s) of
    all-reduce, up to OVERLAP_MAX_ROUNDS (400), where a collective's figure stops at COMM_MAX_ITERS (100). A
    one-rank all-reduce takes microseconds, so the cap sets the count: each round computes once alone and once
    beside the all-reduce (one matmul a time here, the matmul timed far longer than the all-reduce)."""
    calls: list[int] = []
    profile_node._overlap_share(dist.group.WORLD, True, torch.device("cpu"), lambda: calls.append(1), 1.0)
    assert (profile_node.OVERLAP_S, profile_node.OVERLAP_MAX_ROUNDS) == (2.0, 400)
    assert len(calls) == 2 * profile_node.OVERLAP_MAX_ROUNDS
