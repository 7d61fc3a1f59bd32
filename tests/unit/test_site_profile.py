"""A site profile (issue 32 item 2): the file `launcher profile` writes, read back as a typed SiteProfile
(busbw interpolated in log bytes, the matmul rate at the model's shapes), and `launcher plan
cluster.profile=PATH` predicting from it: half the measured link bandwidth gives a longer comm term,
half the measured matmul rate twice the compute; a missing or damaged file is one line, exit 2.
The measurements themselves: tests/multiprocess/test_profile_local.py, tests/slurm/test_profile_slurm.py."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest

from launcher import cli
from launcher.config.compose import compose_config
from launcher.perf import preset_fit, site_profile
from launcher.perf.comm import ddp_buckets
from launcher.perf.plan_table import from_presets_forecast, preset_model, work_of
from launcher.perf.shapes import shape_for
from launcher.train.profile_plan import OPS, SCHEMA, SCHEMA_VERSION, busbw_factor, matmul_shapes, message_bytes


def profile_doc(*, inter_busbw: float = 2.0, intra_busbw: float = 8.0, tflops: float = 0.1) -> dict:
    """A profile as profile_node.py writes it: one node's two ranks (intra), two nodes (inter)."""

    def points(busbw: float) -> list[dict]:
        return [
            {"bytes": 4096, "busbw_gbs": busbw / 100, "latency_us": 100.0},
            {"bytes": 4 * 2**20, "busbw_gbs": busbw, "latency_us": 4 * 2**20 / (busbw * 1e3)},
        ]

    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "device": {"name": "cpu", "type": "cpu", "threads_per_rank": 1},
        "ranks": 4,
        "nodes": 2,
        "ranks_per_node": 2,
        "hosts": ["n1", "n1", "n2", "n2"],
        "matmul": {
            "fp32": [
                {"m": 128, "n": 128, "k": 128, "tflops": tflops / 2},
                {"m": 512, "n": 512, "k": 512, "tflops": tflops},
            ],
            "bf16": [{"m": 512, "n": 512, "k": 512, "tflops": 3 * tflops}],
        },
        "mem_bw_gbs": 10.0,
        "scopes": {"intra": {"ranks": 2}, "inter": {"ranks": 2}},
        "collectives": {
            op: {"intra": points(intra_busbw), "inter": points(inter_busbw)} for op in ("all_reduce", "all_gather")
        },
        "skipped": [],
        "torch": "2.13.0",
        "measured_at": "2026-11-28T20:00:00Z",
    }


def write(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def write_doc(doc: dict) -> str:
    path = Path(tempfile.mkdtemp()) / "site.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_busbw_is_nccl_tests_factor():
    assert busbw_factor("all_reduce", 4) == pytest.approx(1.5)
    assert busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert busbw_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert busbw_factor("all_to_all", 8) == pytest.approx(7 / 8)


def test_profile_reads_back_typed_and_interpolates_in_log_bytes(tmp_path):
    p = site_profile.load(write(tmp_path, "site.json", profile_doc(inter_busbw=2.0)))
    assert p.device_name == "cpu" and p.mem_bw_gbs == 10.0 and p.scope_ranks == {"intra": 2, "inter": 2}
    assert p.matmul_points("fp32") == [(128, 128, 128, 0.05), (512, 512, 512, 0.1)]
    assert p.busbw("all_reduce", "inter", 4096) == pytest.approx(0.02)
    assert p.busbw("all_reduce", "inter", 4 * 2**20) == pytest.approx(2.0)
    # 64 KiB is 4/10 of the way from 4 KiB to 4 MiB in log bytes
    assert p.busbw("all_reduce", "inter", 65536) == pytest.approx(0.02 + 0.4 * (2.0 - 0.02))
    assert p.busbw("all_reduce", "inter", 2**30) == pytest.approx(2.0)  # the end's figure beyond it
    with pytest.raises(site_profile.ProfileError, match="no reduce_scatter measured inter"):
        p.busbw("reduce_scatter", "inter", 4096)


def test_matmul_rate_takes_the_nearest_shape_in_log_space_weighted_by_flops(tmp_path):
    p = site_profile.load(write(tmp_path, "site.json", profile_doc(tflops=0.1)))
    assert site_profile.matmul_rate(p, "fp32", [(100, 150, 140)]) == pytest.approx(0.05e12)
    assert site_profile.matmul_rate(p, "fp32", [(600, 400, 512)]) == pytest.approx(0.1e12)
    # one of each: time adds up (1 unit of FLOPs at 0.05, 64 at 0.1)
    both = site_profile.matmul_rate(p, "fp32", [(128, 128, 128), (512, 512, 512)])
    assert both == pytest.approx(65 / (1 / 0.05e12 + 64 / 0.1e12))
    with pytest.raises(site_profile.ProfileError, match="no fp8 matmuls measured"):
        site_profile.matmul_rate(p, "fp8", [(128, 128, 128)])


def test_links_come_from_the_measured_all_reduce(tmp_path):
    p = site_profile.load(write(tmp_path, "site.json", profile_doc(intra_busbw=8.0, inter_busbw=2.0)))
    from launcher.perf.links import LINKS  # the presets a scope not measured keeps

    intra, inter = site_profile.links(p, LINKS["nvlink"], LINKS["ib400"])
    assert (intra.bandwidth_gbps, inter.bandwidth_gbps) == (pytest.approx(8.0), pytest.approx(2.0))
    assert inter.latency_s == pytest.approx(100e-6 / 2)  # smallest message's time over 2(n−1) = 2 hops
    doc = profile_doc()
    del doc["collectives"]["all_reduce"]["intra"]
    only_inter = site_profile.load(write(tmp_path, "inter.json", doc))
    assert site_profile.links(only_inter, LINKS["nvlink"], LINKS["ib400"])[0] == LINKS["nvlink"]


def _model(tmp_path, name: str, doc: dict):
    cfg = compose_config(["cluster=devcluster", f"cluster.profile={write(tmp_path, name, doc)}"])
    work = work_of(cfg)
    return preset_model(cfg, work, 0.5, preset_fit.load()), shape_for(cfg, 2)


def test_plan_with_half_the_link_bandwidth_has_a_longer_comm_term(tmp_path):
    fast, shape = _model(tmp_path, "fast.json", profile_doc(inter_busbw=2.0))
    slow, _ = _model(tmp_path, "slow.json", profile_doc(inter_busbw=1.0))
    assert (fast.inter.bandwidth_gbps, slow.inter.bandwidth_gbps) == (pytest.approx(2.0), pytest.approx(1.0))
    a, b = fast.predict(shape), slow.predict(shape)
    assert shape.multi_node and shape.ranks_per_node == 1  # devcluster: one rank per node, the ring crosses nodes
    assert b.comm_total_s > a.comm_total_s
    assert b.compute_s == pytest.approx(a.compute_s)  # the same matmuls: only the link changed
    # the ring all-reduce of the gradient in DDP's buckets: 2(n−1)/n · S / B + buckets · 2(n−1) · α, α = 50 µs
    grad = shape.traffic.grad_bytes
    hops = ddp_buckets(grad) * 2 * 50e-6
    assert a.comm_total_s == pytest.approx(grad / 2.0e9 + hops)
    assert b.comm_total_s == pytest.approx(grad / 1.0e9 + hops)


def one_point(tflops: float) -> dict:
    """A profile whose fp32 matmuls were measured at one shape: every matmul of the model is priced there."""
    doc = profile_doc()
    doc["matmul"]["fp32"] = [{"m": 512, "n": 512, "k": 512, "tflops": tflops}]
    return doc


def test_plan_with_half_the_matmul_rate_takes_twice_the_compute(tmp_path):
    fast, shape = _model(tmp_path, "fast.json", one_point(0.2))
    slow, _ = _model(tmp_path, "slow.json", one_point(0.1))
    assert slow.compute_s_per_sample == pytest.approx(2 * fast.compute_s_per_sample)
    cfg = compose_config(["cluster=devcluster", f"cluster.profile={tmp_path / 'slow.json'}"])
    work = work_of(cfg)
    assert slow.compute_s_per_sample == pytest.approx(work.executed_flops * work.tokens_per_sample / 0.1e12)
    assert slow.predict(shape).compute_s > fast.predict(shape).compute_s
    table = from_presets_forecast(cfg, [1, 2], assume_mfu=None).table
    assert list(table["status"]) == ["predicted", "predicted"] and math.isnan(table["mfu"].iloc[0])


def test_the_model_matmuls_are_priced_at_their_nearest_shape(tmp_path):
    """tiny_gpt at micro 8 × seq 64: m = 512 tokens; d 128, ffn 512, vocab 256. (512, 128, 128) lies nearer
    128³ than 512³ in log space, (512, 512, 128) nearer 512³, the head (512, 256, 128) as near both (the smaller
    is taken): the rate is between the two points'."""
    cfg = compose_config(["cluster=devcluster"])
    shapes = site_profile.model_matmuls(cfg.model, 512)
    assert shapes == [(512, 512, 128), (512, 128, 512), (512, 384, 128), (512, 128, 128)] * 2 + [(512, 256, 128)]
    p = site_profile.load(write(tmp_path, "site.json", profile_doc(tflops=0.1)))
    flops = [2 * m * n * k for m, n, k in shapes]
    at = [0.1e12, 0.1e12, 0.1e12, 0.05e12] * 2 + [0.05e12]
    expected = sum(flops) / sum(f / r for f, r in zip(flops, at, strict=True))
    assert site_profile.matmul_rate(p, "fp32", shapes) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file; make one with `launcher profile --output"),
        ("{not json", "not JSON"),
        (json.dumps({"schema": "other"}), 'not a site profile (no "schema": "launcher.site_profile")'),
        (json.dumps({**profile_doc(), "version": 99}), "schema version 99, this launcher reads 1"),
        (json.dumps({**profile_doc(), "mem_bw_gbs": -1}), "damaged (mem_bw_gbs is -1, not a positive number)"),
        (json.dumps({k: v for k, v in profile_doc().items() if k != "matmul"}), "damaged (KeyError: 'matmul')"),
    ],
)
def test_a_bad_profile_stops_the_plan_with_one_line(tmp_path, capsys, content, said):
    path = tmp_path / "site.json"
    if content is not None:
        path.write_text(content)
    code = cli.main(["plan", "cluster=devcluster", f"cluster.profile={path}", "--gpus", "1,2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"launcher: error: cluster.profile={path}: ") and said in err
    assert err.count("\n") == 1


def check_measured(doc: dict, *, ranks: int, nodes: int, scopes: set[str]) -> None:
    """What a profile `launcher profile` measured must hold (the real runs: tests/multiprocess and tests/slurm):
    every field, positive figures, nccl-tests' sizes in order, and the plan reads it back."""
    assert (doc["schema"], doc["version"]) == (SCHEMA, SCHEMA_VERSION)
    assert (doc["ranks"], doc["nodes"], doc["device"]["type"], doc["device"]["name"]) == (ranks, nodes, "cpu", "cpu")
    assert len(doc["hosts"]) == ranks and len(set(doc["hosts"])) == nodes
    assert sorted(doc["matmul"]) == ["bf16", "fp32"]
    for points in doc["matmul"].values():
        assert [(p["m"], p["n"], p["k"]) for p in points] == list(matmul_shapes("cpu"))
        assert all(p["tflops"] > 0 for p in points)
    assert doc["mem_bw_gbs"] > 0
    assert set(doc["scopes"]) == scopes and sorted(doc["collectives"]) == sorted(OPS)
    for op in OPS:
        assert set(doc["collectives"][op]) == scopes
        for points in doc["collectives"][op].values():
            assert [p["bytes"] for p in points] == list(message_bytes("cpu"))
            assert all(p["busbw_gbs"] > 0 and p["latency_us"] > 0 for p in points)
    loaded = site_profile.load(write_doc(doc))
    assert set(loaded.scope_ranks) == scopes


def test_a_collective_is_timed_the_same_number_of_times_on_every_rank():
    """Each rank choosing its count by its own clock left one waiting in a collective the others never called
    (the bed's profile hung at a 256 KiB all-reduce): a collective runs exactly COMM_ITERS times after a warm-up,
    however long each took."""
    import torch

    from launcher.train.profile_node import COMM_ITERS, timed

    calls, waits = [], []
    timed(lambda: calls.append(1), torch.device("cpu"), lambda: waits.append(1), iters=COMM_ITERS)
    assert (len(calls), len(waits)) == (1 + COMM_ITERS, COMM_ITERS)


def test_a_ranks_own_figure_is_its_sustained_rate_not_a_burst():
    """A CPU quota throttles a rank now and then: one run in five stalls. The median of runs read the burst
    rate (1 ms); the figure is total time ÷ runs over ENOUGH_S, what a step of many runs feels. The runs take
    their time on a stand-in clock: a sleep's length on a loaded machine is not the test's to pin (CI's
    clean-clone run read 3.9 ms of sleep(0.001) and failed)."""
    import torch

    from launcher.train import profile_node

    now, runs = [0.0], []

    def run() -> None:
        runs.append(1)
        now[0] += 0.005 if len(runs) % 5 == 0 else 0.001

    t = profile_node.timed(run, torch.device("cpu"), clock=lambda: now[0])
    timed_runs = len(runs) - 1  # the first is the warm-up
    assert timed_runs * t >= profile_node.ENOUGH_S  # the window, counted whole
    every = [0.005 if i % 5 == 0 else 0.001 for i in range(2, len(runs) + 1)]  # each timed run's seconds
    assert t == pytest.approx(sum(every) / timed_runs, rel=1e-9)
    assert t == pytest.approx((4 * 0.001 + 0.005) / 5, rel=0.01)  # the sustained rate, not the median's 0.001
