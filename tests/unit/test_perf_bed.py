"""The model against a bed with dedicated compute and a known link: the link it fits, no
contention exponent where compute is dedicated, and intervals that hold trials the fit never saw."""

from __future__ import annotations

import math

import numpy as np
import pytest

from launcher.perf.calibrate import Measured, _contention
from launcher.perf.comm import Traffic
from launcher.perf.fit import fit
from launcher.perf.interval import coverage, repeat_noise, scatter, t_quantile
from launcher.perf.links import LINKS, Link, ring_allreduce_s
from launcher.perf.shapes import ddp_buckets
from launcher.perf.step import Observation, PerfModel, Shape, comm_at
from launcher.perf.summary import layout_line

GRAD = 1_882_112  # tiny_gpt's gradient, bytes
BED_MB_S = 25.0  # --link-rate 200mbit

# Measured on the bed (`cluster up --cpus-per-node 0.45 --link-rate 200mbit`), 2 ranks per node,
# accumulation 1: world size → (median step s, [(ranks, bytes, all-reduce s)]). The small probes
# take far longer than 25 MB/s and a constant latency explain (CPU-throttled ranks: latency that
# overlaps transfer), which is what a fit weighting each probe by its own time was led by.
BED_RPN2 = {
    2: (0.1331, [(2, 29408, 0.00591), (2, 235264, 0.00775), (2, 1882112, 0.01054)]),
    4: (0.2449, [(4, 29408, 0.0074), (4, 235264, 0.01214), (4, 1882112, 0.10342)]),
    6: (0.2633, [(6, 29408, 0.0156), (6, 235264, 0.01423), (6, 1882112, 0.12694)]),
    8: (0.2932, [(8, 29408, 0.01587), (8, 235264, 0.01996), (8, 1882112, 0.13457)]),
}


def bed_shape(world: int, rpn: int, accum: int = 1) -> Shape:
    return Shape(
        world_size=world,
        ranks_per_node=rpn,
        dp=world,
        global_batch=8 * accum * world,
        accum=accum,
        traffic=Traffic(data_parallel="ddp", grad_bytes=GRAD, passes=accum),
    )


def test_t_quantile_matches_tables_and_refuses_bad_input():
    for p, dof, want in [
        (0.95, 1, 6.3138),
        (0.95, 3, 2.3534),
        (0.95, 5, 2.0150),
        (0.975, 10, 2.2281),
        (0.95, 30, 1.6973),
        (0.95, 1e6, 1.6449),
    ]:
        assert t_quantile(p, dof) == pytest.approx(want, abs=1e-4)
    with pytest.raises(ValueError, match="0.5 ≤ p < 1, got 1.0"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="dof > 0, got 0"):
        t_quantile(0.95, 0)


def test_repeat_noise_pools_groups_on_the_log_scale():
    sigma, dof = repeat_noise([[1.0, 1.1], [2.0], [3.0, 3.0, 3.3]])
    logs = [np.log([1.0, 1.1]), np.log([3.0, 3.0, 3.3])]
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in logs)
    assert (sigma, dof) == (pytest.approx(math.sqrt(ss / 3), rel=1e-12), 3)
    assert repeat_noise([[1.0], [2.0]]) == (None, 0)


def test_scatter_takes_held_out_error_then_repeat_noise_then_the_assumption():
    held = scatter(holdout=0.06, holdout_dof=3, repeat=0.04, repeat_dof=8, assumed=0.1, level=0.9)
    assert (held.sigma, held.held_out) == (0.06, True)
    assert held.quantile == pytest.approx(2.3534, abs=1e-4)
    assert held.source == "held-out error 6.0% (leave one shape out, t on 3 dof)"
    floor = scatter(holdout=0.03, holdout_dof=3, repeat=0.05, repeat_dof=8, assumed=0.1, level=0.9)
    assert (floor.sigma, floor.source) == (0.05, "repeat noise 5.0% (above the held-out error 3.0%)")
    only = scatter(holdout=None, holdout_dof=0, repeat=0.05, repeat_dof=4, assumed=0.1, level=0.9)
    assert (only.sigma, only.held_out) == (0.05, False) and only.quantile == pytest.approx(2.1318, abs=1e-4)
    none = scatter(holdout=None, holdout_dof=0, repeat=None, repeat_dof=0, assumed=0.1, level=0.9)
    assert (none.sigma, none.quantile) == (0.1, pytest.approx(1.6449, abs=1e-4))
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\), got 90"):
        scatter(holdout=None, holdout_dof=0, repeat=None, repeat_dof=0, assumed=0.1, level=90)


def test_coverage_counts_measured_values_inside_their_interval():
    assert coverage([(10.0, 9.0, 11.0), (12.0, 9.0, 11.0), (9.0, 9.0, 11.0)]) == (2, 3)


def test_bed_records_give_the_configured_inter_node_bandwidth():
    obs = [
        Observation(shape=bed_shape(w, 2), step_s=step, allreduce=tuple(probe)) for w, (step, probe) in BED_RPN2.items()
    ]
    model = fit(obs, intra=LINKS["nvlink"], inter=LINKS["ib400"])
    mb_s = model.inter.bandwidth_gbps * 1e3
    # 26.9 MB/s: the gradient-sized all-reduces' bus bandwidth (24–27 MB/s), within ±20% of 25.
    assert abs(mb_s / BED_MB_S - 1) <= 0.20, mb_s
    assert model.source("inter") == "fitted from 9 all-reduces: bandwidth and latency"
    # The one-node trial's loopback ring is its own (much faster) link.
    assert model.intra.bandwidth_gbps > 5 * model.inter.bandwidth_gbps


def test_two_ranks_per_node_ring_is_paced_by_the_node_link():
    link = Link(bandwidth_gbps=0.025, latency_s=0.0)
    # 4 nodes × 2 ranks: the node link carries 2·7/8 of the gradient, as one rank of a flat ring does.
    two_per_node = bed_shape(8, 2)
    assert two_per_node.multi_node and not bed_shape(2, 2).multi_node
    assert ring_allreduce_s(GRAD, 8, link) == pytest.approx(2 * 7 / 8 * GRAD / 25e6, rel=1e-12)
    model = PerfModel(
        compute_s_per_sample=0.0, overhead_s=0.0, exposed_comm=0.0, intra=LINKS["nvlink"], inter=link, rel_sigma=0.0
    )
    assert model.predict(two_per_node).comm_s == pytest.approx(2 * 7 / 8 * GRAD / 25e6, rel=1e-12)


def test_ddp_buckets_each_pay_the_ring_latency():
    assert [ddp_buckets(b) for b in (1, 1024 * 1024, GRAD, 400_000_000)] == [1, 1, 2, 17]
    link = Link(bandwidth_gbps=1.0, latency_s=1e-3)
    one = ring_allreduce_s(GRAD, 4, link)
    assert ring_allreduce_s(GRAD, 4, link, messages=2) == pytest.approx(one + 6 * 1e-3, rel=1e-12)
    with pytest.raises(ValueError, match="≥ 1 messages, got 0"):
        ring_allreduce_s(GRAD, 4, link, messages=0)


def test_dedicated_compute_fits_no_contention_exponent():
    obs = [
        Observation(shape=bed_shape(w, 2, a), step_s=step * a, allreduce=tuple(probe))
        for w, (step, probe) in BED_RPN2.items()
        for a in (1, 2)
    ]
    model = fit(obs, intra=LINKS["nvlink"], inter=LINKS["ib400"])
    assert model.contention_exponent == 1.0
    assert model.source("contention_exponent") == "not fitted (every trial had dedicated compute: contention 1)"
    assert "contention" not in layout_line("ddp", model)


def _measured(*, world: int, nodes: int, quota: float | None) -> Measured:
    metrics = {
        "cpu_contention": 1.0,
        "machines": 1,
        "cpus_per_machine": 2,
        "threads_per_rank": 1,
        "cpu_quota_per_rank": [quota] * world,
    }
    trial = {"world_size": world, "nodes": nodes}
    return Measured(trial=trial, metrics=metrics, config={"cluster": {"kind": "slurm"}}, wall_s=1.0)


def test_contention_at_other_sizes_counts_each_node_at_most_its_quota():
    bed = _measured(world=4, nodes=2, quota=0.45)
    # 4 nodes × min(2 ranks, 0.45 CPU) = 1.8 CPUs on 2 cores: dedicated at every size.
    assert [_contention(bed, n) for n in (2, 6, 8)] == [1.0, 1.0, 1.0]
    shared = _measured(world=4, nodes=2, quota=None)
    # Without quotas the nodes' ranks share the machine's 2 cores.
    assert [_contention(shared, n) for n in (2, 6, 8)] == [1.0, 3.0, 4.0]


def _bed_trial(shape: Shape, rng: np.random.Generator, noise: float) -> Observation:
    """A bed trial: 30 ms per sample-equivalent, 80% of what the overlap model hides exposed after
    all (CPU ranks hide less than it credits), 20 ms overhead, log-normal noise."""
    link = Link(bandwidth_gbps=0.025, latency_s=5e-4) if shape.multi_node else Link(bandwidth_gbps=1.0, latency_s=5e-5)
    terms = comm_at(shape, link, link, 0.03 * shape.work_per_rank)
    comm = terms.exposed_s + 0.8 * terms.hidden_s
    step = (0.03 * shape.work_per_rank + comm + 0.02) * math.exp(rng.normal(0, noise))
    probe = (
        tuple(
            (shape.dp, b, ring_allreduce_s(b, shape.dp, link) * math.exp(rng.normal(0, noise)))
            for b in (GRAD // 64, GRAD // 8, GRAD)
        )
        if shape.dp > 1
        else ()
    )
    return Observation(shape=shape, step_s=step, allreduce=probe)


def test_interval_coverage_of_held_out_sizes():
    """Fit nodes {1,2,4} × accumulation {1,2}, two repeats each, predict new trials at 3 nodes:
    the nominal 90% interval holds close to 90% of them (not 100%: it is not padded)."""
    inside, total, bandwidths = 0, 0, []
    for seed in range(60):
        rng = np.random.default_rng(seed)
        train = [_bed_trial(bed_shape(n, 1, a), rng, 0.05) for n in (1, 2, 4) for a in (1, 2) for _ in range(2)]
        model = fit(train, intra=LINKS["nvlink"], inter=LINKS["eth10"])
        bandwidths.append(model.inter.bandwidth_gbps)
        for a in (1, 2):
            for _ in range(2):
                t = _bed_trial(bed_shape(3, 1, a), rng, 0.05)
                p = model.predict(t.shape)
                inside += p.low_s <= t.step_s <= p.high_s
                total += 1
    assert 0.85 <= inside / total <= 0.99, inside / total
    assert float(np.median(bandwidths)) == pytest.approx(0.025, rel=0.02)


def test_prediction_adds_only_parameter_variance_beyond_the_trials():
    link = Link(bandwidth_gbps=1.0, latency_s=0.0)
    base = dict(
        compute_s_per_sample=0.01,
        overhead_s=0.0,
        exposed_comm=1.0,
        intra=link,
        inter=link,
        rel_sigma=0.05,
        z=2.0,
        free=("compute_s_per_sample",),
        cov=((1e-6,),),
        min_rel_half_width=0.0,
    )
    shape = Shape(world_size=1, ranks_per_node=1, dp=1, global_batch=8)
    # x = w / step = 8 / 0.08 = 100: parameter variance 1e-6 · 100² = 0.01.
    assert PerfModel(**base).predict(shape).rel_half_width == pytest.approx(2 * math.sqrt(0.05**2 + 0.01))
    held = PerfModel(**base, param_var_in_sigma=0.004).predict(shape)
    assert held.rel_half_width == pytest.approx(2 * math.sqrt(0.05**2 + 0.006))
    assert PerfModel(**base, param_var_in_sigma=0.02).predict(shape).rel_half_width == pytest.approx(0.1)
