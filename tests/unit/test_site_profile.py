"""A site profile (issue 32 item 2): the file `launcher profile` writes, read back as a typed SiteProfile
(busbw interpolated in log bytes, the matmul rate in log of a shape's smallest dimension), and `launcher plan
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
from launcher.compute.flops import model_ops, param_counts
from launcher.compute.loss_bytes import LOSS_BYTES
from launcher.compute.shape_rate import FLASH_SHARE, HEAD_DIM_HALF, SEQ_HALF
from launcher.config.compose import compose_config
from launcher.perf import preset_fit, site_profile
from launcher.perf.comm import ddp_buckets
from launcher.perf.plan_table import from_presets_forecast, preset_model, work_of
from launcher.perf.shapes import shape_for
from launcher.train.profile_plan import (
    OPS,
    SCHEMA,
    SCHEMA_VERSION,
    attention_shapes,
    busbw_factor,
    matmul_shapes,
    message_bytes,
)


def profile_doc(
    *, inter_busbw: float = 2.0, intra_busbw: float = 8.0, tflops: float = 0.1, mem_bw: float = 10.0, op_us: float = 5.0
) -> dict:
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
        "attention": {
            "fp32": [
                {"seq": 64, "head_dim": 32, "tflops": tflops / 8},
                {"seq": 256, "head_dim": 64, "tflops": tflops / 4},
            ]
        },
        "mem_bw_gbs": mem_bw,
        "op_us": op_us,
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


def test_a_gpus_matmuls_are_measured_at_a_training_steps_tall_shapes():
    """A GPU's grid: m a micro-batch's tokens, its smallest sides every bundled width from gpt_125m's 768 to
    llama3_70b's 8192, so a step's matmuls are priced inside the grid at shapes like theirs. Fails with the
    squares the grid had (1024³ … 8192³: a 1024³ output fills few SMs, and 768 fell off the grid's end)."""
    shapes = matmul_shapes("cuda")
    assert {m for m, _, _ in shapes} == {16384}
    assert {min(s) for s in shapes} == {768, 1024, 2048, 4096, 8192}


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


def test_a_matmuls_rate_is_interpolated_in_log_of_its_smallest_dimension(tmp_path):
    """Measured at s = 128 (0.05 TFLOP/s) and s = 512 (0.1): s = 256 lies half way in log, s = 400 at
    log(400/128)/log(4) of the way; beyond the grid the end's rate. (The nearest shape in log m, n, k took
    s = 400's (600, 400, 512) at 512³'s 0.1.)"""
    p = site_profile.load(write(tmp_path, "site.json", profile_doc(tflops=0.1)))
    assert site_profile.matmul_flops(p, "fp32", 512, 256, 1024) == pytest.approx(0.075e12)
    part = math.log(400 / 128) / math.log(4)
    assert site_profile.matmul_flops(p, "fp32", 600, 400, 512) == pytest.approx((0.05 + 0.05 * part) * 1e12)
    assert site_profile.matmul_flops(p, "fp32", 100, 150, 140) == pytest.approx(0.05e12)
    assert site_profile.matmul_flops(p, "fp32", 4096, 4096, 4096) == pytest.approx(0.1e12)
    with pytest.raises(site_profile.ProfileError, match="no fp8 matmuls measured"):
        site_profile.matmul_flops(p, "fp8", 128, 128, 128)


def test_links_come_from_the_measured_all_reduce(tmp_path):
    p = site_profile.load(write(tmp_path, "site.json", profile_doc(intra_busbw=8.0, inter_busbw=2.0)))
    from launcher.perf.links import LINKS  # the presets a scope not measured keeps

    intra, inter = site_profile.links(p, LINKS["nvlink"], LINKS["ib400"])
    assert (intra.bandwidth_gbps, inter.bandwidth_gbps) == (pytest.approx(8.0), pytest.approx(2.0))
    # α: each size's time beyond its bytes at the 4 MiB busbw (4 KiB: 100 µs − 2.048 µs; 4 MiB: 0), the
    # median over sizes, over 2(n−1) = 2 hops (links.ring_latency_s)
    assert inter.latency_s == pytest.approx((100e-6 - 4096 / 2e9) / 2 / 2)
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
    # the ring all-reduce of the gradient in DDP's buckets: 2(n−1)/n · S / B + buckets · 2(n−1) · α, α the
    # 4 KiB all-reduce's 100 µs beyond its bytes, halved by the median with the 4 MiB one's 0, over 2 hops
    grad = shape.traffic.grad_bytes
    for model, busbw in ((a, 2.0), (b, 1.0)):
        alpha = (100e-6 - 4096 / (busbw * 1e9)) / 2 / 2
        assert model.comm_total_s == pytest.approx(grad / (busbw * 1e9) + ddp_buckets(grad) * 2 * alpha)


def one_point(tflops: float, **over) -> dict:
    """A profile whose fp32 matmuls were measured at one shape: every matmul of the model is priced there."""
    doc = profile_doc(**over)
    doc["matmul"]["fp32"] = [{"m": 512, "n": 512, "k": 512, "tflops": tflops}]
    return doc


def _seconds(tmp_path, name: str, doc: dict, *over: str):
    cfg = compose_config(["cluster=devcluster", *over, f"cluster.profile={write(tmp_path, name, doc)}"])
    return cfg, site_profile.step_seconds(cfg, site_profile.load(cfg.cluster.profile), work_of(cfg).dtype)


def test_half_the_matmul_rate_takes_twice_the_matmul_time_and_the_plan_prices_every_op(tmp_path):
    """tiny_gpt at micro 8 × seq 64 (512 tokens a micro-batch): its weight matmuls (6·N FLOPs a token less
    the norms' and biases') at the one rate measured; the rest of the step does not move with it."""
    cfg, fast = _seconds(tmp_path, "fast.json", one_point(0.2))
    _, slow = _seconds(tmp_path, "slow.json", one_point(0.1))
    assert slow.matmul_s == pytest.approx(2 * fast.matmul_s)
    flops = sum(op.flops for op in model_ops(cfg.model, tokens=512) if op.priced == "matmul")
    assert slow.matmul_s == pytest.approx(flops / 0.1e12)
    assert (slow.attention_s, slow.memory_s, slow.dispatch_s) == (fast.attention_s, fast.memory_s, fast.dispatch_s)
    fast_model, shape = _model(tmp_path, "fast.json", one_point(0.2))
    slow_model, _ = _model(tmp_path, "slow.json", one_point(0.1))
    assert slow_model.compute_s_per_sample == pytest.approx(64 * slow.total_s)  # 64 tokens a sample
    assert slow_model.predict(shape).compute_s > fast_model.predict(shape).compute_s
    table = from_presets_forecast(cfg, [1, 2], assume_mfu=None).table
    assert list(table["status"]) == ["predicted", "predicted"] and math.isnan(table["mfu"].iloc[0])


def test_half_the_memory_bandwidth_takes_twice_the_memory_bound_time_exactly(tmp_path):
    """Norms, activations (fp32: twice the op model's bf16 bytes), the loss and AdamW's 72 bytes a parameter (torch's
    default unfused step, as the launcher's trainer runs it) over the tokens of its step, at the measured
    bandwidth; nothing else moves."""
    cfg, fast = _seconds(tmp_path, "fast.json", profile_doc(mem_bw=10.0))
    _, slow = _seconds(tmp_path, "slow.json", profile_doc(mem_bw=5.0))
    assert slow.memory_s == pytest.approx(2 * fast.memory_s)
    assert (slow.matmul_s, slow.attention_s, slow.dispatch_s) == (fast.matmul_s, fast.attention_s, fast.dispatch_s)
    ops = {op.name: op for op in model_ops(cfg.model, tokens=512)}
    nbytes = 2 * ops["elementwise"].nbytes + ops["loss"].nbytes + 72 * param_counts(cfg.model)[0] / 512
    assert slow.memory_s == pytest.approx(nbytes / 5e9)


def test_the_loss_is_priced_as_the_trainer_runs_it(tmp_path):
    """A fused cross-entropy (trainer.fused_loss) moves 6 B a logit where torch's moves 36 (compute/loss_bytes.py),
    at the measured bandwidth; nothing else moves. Fails if the profile path priced every trainer's loss as
    torch's, as it did before (the preset path already read the trainer)."""
    cfg, torch_loss = _seconds(tmp_path, "a.json", profile_doc(mem_bw=10.0))
    _, fused = _seconds(tmp_path, "b.json", profile_doc(mem_bw=10.0), "trainer.fused_loss=true")
    saved = (LOSS_BYTES["torch"] - LOSS_BYTES["fused"]) * cfg.model.vocab_size / 10e9
    assert torch_loss.memory_s - fused.memory_s == pytest.approx(saved)
    assert (fused.matmul_s, fused.attention_s) == (torch_loss.matmul_s, torch_loss.attention_s)


def test_a_per_op_cost_adds_ops_times_the_cost(tmp_path):
    """The profile's µs per op × the ops one optimizer step dispatches (accum micro-batches' forward and
    backward, then the optimizer's), spread over its tokens; on a CPU it adds to the arithmetic."""
    for accum in (1, 2):
        over = f"batch.accum={accum}"
        cfg, none = _seconds(tmp_path, "cheap.json", profile_doc(op_us=1e-9), over)
        _, some = _seconds(tmp_path, "dear.json", profile_doc(op_us=8.0), over)
        ops = site_profile.dispatched_ops(cfg.model, accum, ddp=True)  # devcluster's recipe: DDP
        assert ops == accum * (40 + 132 * 2) + 16 + 9 * 37 + 16 + 4 * 37 + 2 * (accum - 1)  # tiny_gpt: 37 tensors
        assert some.dispatch_s * 512 * accum == pytest.approx(8e-6 * ops)
        assert some.total_s - none.total_s == pytest.approx(8e-6 * ops / (512 * accum), rel=1e-6)


def test_attention_runs_at_the_measured_kernels_rate_and_a_schema_1_profile_at_its_share_of_the_peak(tmp_path):
    """tiny_gpt's core: seq 64, head dim 32, the point measured at 0.1/8 TFLOP/s counted (causal skipping is in
    the rate). A schema 1 file (no attention, no per-op cost) is still read: the op model's FLASH_SHARE of
    its fastest matmul, and no per-op cost, which the plan's footer says."""
    cfg, t = _seconds(tmp_path, "v2.json", profile_doc(tflops=0.1))
    (core,) = [op for op in model_ops(cfg.model, tokens=512) if op.priced == "attention"]
    assert t.attention_s == pytest.approx(core.flops / (0.1e12 / 8))
    old = {k: v for k, v in profile_doc(tflops=0.1).items() if k not in ("attention", "op_us")} | {"version": 1}
    _, t1 = _seconds(tmp_path, "v1.json", old)
    shape = core.k / (core.k + HEAD_DIM_HALF) * core.n / (core.n + SEQ_HALF)
    assert t1.attention_s == pytest.approx(core.flops * 0.5 / (0.1e12 * FLASH_SHARE * shape))
    assert t1.dispatch_s == 0.0 and t1.matmul_s == t.matmul_s
    said = site_profile.phrase(
        compose_config(["cluster=devcluster", f"cluster.profile={tmp_path / 'v1.json'}"]), "fp32"
    )
    assert "no per-op cost (a schema 1 profile did not measure it)" in said


def test_dispatched_ops_are_what_a_real_step_of_the_trainer_dispatches():
    """The rule's counts against torch's own: every aten op of one step of the built-in model (forward,
    loss, backward, global-norm clipping, AdamW as torch picks it on a CPU, zero_grad), per architecture,
    bare and under DDP (one gloo rank: its reducer's ops, no_sync on the first micro-batch)."""
    from contextlib import nullcontext

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils._python_dispatch import TorchDispatchMode

    from launcher.train import clipping
    from launcher.train.loop import build_optimizer
    from launcher.train.models import build_model

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for recipe, ddp in (("tiny_gpt", False), ("tiny_gpt", True), ("tiny_llama", True), ("mlp", False)):
            cfg = compose_config([f"model={recipe}", "model.n_layers=3", "batch.accum=2"])
            model = build_model(cfg.model, seed=0)
            net = DistributedDataParallel(model) if ddp else model
            opt = build_optimizer(cfg.optim, net.parameters(), 1e-3)
            idx = torch.randint(0, cfg.model.vocab_size, (2, cfg.model.seq_len + 1))

            def step(net=net, opt=opt, idx=idx, ddp=ddp) -> None:
                for k in range(2):
                    with net.no_sync() if ddp and k == 0 else nullcontext():
                        out = net(idx[:, :-1])
                        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), idx[:, 1:].reshape(-1))
                        loss.backward()
                clipping.clip_grad_norm(list(net.parameters()), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)

            step()  # the optimizer's state is made on its first step
            with Count() as counted:
                step()
            assert counted.ops == site_profile.dispatched_ops(cfg.model, 2, ddp=ddp), (recipe, ddp)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file; make one with `launcher profile --output"),
        ("{not json", "not JSON"),
        (json.dumps({"schema": "other"}), 'not a site profile (no "schema": "launcher.site_profile")'),
        (json.dumps({**profile_doc(), "version": 99}), "schema version 99, this launcher reads 1, 2"),
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
    assert doc["mem_bw_gbs"] > 0 and doc["op_us"] > 0
    for points in doc["attention"].values():
        assert [(p["seq"], p["head_dim"]) for p in points] == list(attention_shapes("cpu"))
        assert all(p["tflops"] > 0 for p in points)
    assert sorted(doc["attention"]) == ["bf16", "fp32"]
    assert set(doc["scopes"]) == scopes and sorted(doc["collectives"]) == (sorted(OPS) if scopes else [])
    for op in OPS if scopes else ():
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
