"""HSDP (parallel=hsdp, parallel.shard) and context parallelism (fsdp_cp, fsdp_tp_cp, parallel.cp)
without processes: their degrees and refusals, and their terms in the performance model figured by
hand on small cases. Parity on real ranks: tests/multiprocess/test_layouts_hsdp_cp_parity.py."""

from __future__ import annotations

import dataclasses

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.layouts import DataParallel
from launcher.perf.candidates import candidates
from launcher.perf.comm import Topology, Traffic, group
from launcher.perf.links import Link
from launcher.perf.memory import estimate
from launcher.perf.overlap import Groups, comm_terms
from launcher.perf.ring import ring_s
from launcher.perf.shapes import shape_for
from launcher.trials.layout import layout_degrees, trial_degrees
from launcher.trials.spec import make_trial

INTRA, INTER = Link(bandwidth_gbps=100.0, latency_s=0.0), Link(bandwidth_gbps=10.0, latency_s=0.0)
"""Round links without latency, so that every figure below is bytes ÷ bandwidth."""


@pytest.mark.parametrize(
    "overrides, world, degrees",
    [
        (["parallel=hsdp", "parallel.shard=2"], 8, dict(dp=8, tp=1, pp=1, cp=1, shard=2)),
        (["parallel=hsdp"], 4, dict(dp=4, tp=1, pp=1, cp=1, shard=4)),  # 0: one machine's ranks
        (["parallel=fsdp_cp", "parallel.cp=2"], 8, dict(dp=4, tp=1, pp=1, cp=2, shard=4)),
        (["parallel=fsdp_tp_cp", "parallel.cp=2", "parallel.tp=2"], 8, dict(dp=2, tp=2, pp=1, cp=2, shard=2)),
    ],
)
def test_degrees(overrides, world, degrees):
    cfg = compose_config(overrides)
    d = trial_degrees(cfg, world)
    assert dataclasses.asdict(d) == degrees
    assert layout_degrees(cfg, world) == (d.dp, d.tp, d.pp)  # the 3-tuple callers keep theirs
    trial = make_trial(cfg, index=0, world_size=world, steps=2, warmup_steps=1)
    assert (trial.cp, trial.shard, trial.replicate) == (d.cp, d.shard, d.dp // d.shard)


def test_hsdp_shard_zero_is_a_node_on_a_cluster():
    cfg = compose_config(["parallel=hsdp", "cluster=example_gpu_site"])
    assert trial_degrees(cfg, 32).shard == 8  # its nodes hold 8 GPUs


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["parallel=hsdp", "parallel.shard=3"],
            "world size 4: parallel.shard=3 does not divide dp=4: hsdp runs dp ÷ shard replicas of one shard "
            "group; choose a shard that divides 4",
        ),
        (
            ["parallel=fsdp_cp", "parallel.cp=null"],
            "parallel.layout=fsdp_cp needs parallel.cp=<degree ≥ 1>; set e.g. parallel.cp=2",
        ),
        (
            ["parallel=fsdp_cp", "parallel.cp=4", "sweep.world_sizes=[4,6]"],
            "world size 6: world size 6 is not a multiple of parallel.cp=4; dp × cp × tp × pp must equal the "
            "world size: pick sizes that are multiples of 4",
        ),
        (
            ["parallel=fsdp_tp_cp", "parallel.cp=2", "parallel.tp=2", "model.seq_len=34"],
            "world size 4: model.seq_len=34 is not divisible by 2·cp = 4 (torch's load balancer: a head and a tail "
            "chunk per cp rank) and cp(2) × tp(2) = 4: each rank holds equal pieces of every sequence; choose a "
            "seq_len that is a multiple of 4",
        ),
        (  # divisible by cp (2) but not by 2·cp: torch's load balancer cannot cut 4 equal chunks of 34
            ["parallel=fsdp_cp", "parallel.cp=2", "model.seq_len=34"],
            "world size 4: model.seq_len=34 is not divisible by 2·cp = 4 (torch's load balancer: a head and a tail "
            "chunk per cp rank): each rank holds equal pieces of every sequence; choose a seq_len that is a "
            "multiple of 4",
        ),
        (
            ["parallel=fsdp_cp", "parallel.cp=2", "model=mlp"],
            "world size 4: parallel.layout=fsdp_cp splits attention over the sequence, and model.arch=mlp has "
            "none; use model.arch=gpt or llama, or parallel=fsdp",
        ),
    ],
)
def test_sweep_refuses_what_it_cannot_run(overrides, message, tmp_path, capsys):
    """One line, exit 2, no sweep folder: before any trial starts."""
    results = tmp_path / "results"
    sizes = [] if any(o.startswith("sweep.world_sizes") for o in overrides) else ["sweep.world_sizes=[4]"]
    assert main(["sweep", *overrides, *sizes, f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == f"launcher: error: {message}\n"
    assert not results.exists()


@pytest.mark.parametrize("layout", ["fsdp_cp", "hsdp"])
def test_a_target_model_is_refused(layout):
    cfg = compose_config([f"parallel={layout}", "parallel.cp=2"])
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, _target_="m.build"))
    message = {
        "fsdp_cp": "parallel.layout=fsdp_cp splits each sequence across cp ranks inside the built-in model's "
        "attention; model._target_='m.build' has no attention the launcher can split: use parallel=fsdp",
        "hsdp": "parallel.layout=hsdp runs built-in models only; model._target_='m.build' runs under "
        "parallel=fsdp or ddp",
    }[layout]
    with pytest.raises(ConfigError) as err:
        trial_degrees(cfg, 4)
    assert str(err.value) == message


def test_hsdp_traffic_by_hand():
    """16 GPUs on 2 nodes of 8 (one NIC each), one FSDP unit of P = 8 GB parameters and G = 16 GB
    gradients, no resharding. hsdp shard 8: the all-gather 7/8·P / 100 GB/s = 0.07 s and the
    reduce-scatter 7/8·G / 100 GB/s = 0.14 s stay in a node; the 2 GB shard is all-reduced across
    2 replicas on other nodes, a ring member per node at the NIC's 1/8 share: 2·½·2 GB / 1.25 GB/s
    = 1.6 s; 1.81 s. Flat fsdp over 16 puts everything on the network at 8 × 1/8 × 10 GB/s: 15/16 ·
    (8 + 16) GB / 10 GB/s = 2.25 s."""
    t = Traffic(data_parallel=DataParallel.fsdp, grad_bytes=16 * 10**9, param_bytes=8 * 10**9, reshard=False)
    topo = Topology(ranks_per_node=8)
    one = group(1, 1, 8)
    hsdp = Groups(dp=group(8, 1, 8), tp=one, pp=one, replicate=group(2, 8, 8))
    flat = Groups(dp=group(16, 1, 8), tp=one, pp=one)
    terms = comm_terms(t, hsdp, topo, INTRA, INTER, compute_s=1.0, backward_share=2 / 3)
    assert terms.dp_total_s == pytest.approx(0.07 + 0.14 + 1.6, rel=1e-12)
    assert terms.dp_exposed_s == pytest.approx(1.81, rel=1e-12)  # one unit: nothing to hide under
    assert comm_terms(t, flat, topo, INTRA, INTER, compute_s=1.0, backward_share=2 / 3).dp_total_s == pytest.approx(
        2.25, rel=1e-12
    )


def test_ring_by_hand():
    """cp 2 in a node, 4 layers, C = 1 GB of keys and values per exchange: s = 1 GB / 100 GB/s =
    0.01 s. A pass of 0.4 s with 30 % in attention: a ring step's forward attention f = 0.4 · 0.3 / 3
    / 4 / 2 = 0.005 s. Per layer: total (n−1)·s + (2n−1)·s = 0.04 s; exposed (n−1)·(s − f) +
    (n−1)·(2s − 2f) + s = 0.005 + 0.01 + 0.01 = 0.025 s; × 4 layers."""
    t = Traffic(data_parallel=DataParallel.fsdp, cp_bytes=10**9, cp_layers=4, attention_share=0.3)
    total, exposed = ring_s(t, group(2, 1, 8), Topology(ranks_per_node=8), INTRA, INTER, pass_s=0.4)
    assert (total, exposed) == (pytest.approx(0.16, rel=1e-12), pytest.approx(0.1, rel=1e-12))
    recomputed = dataclasses.replace(t, cp_recompute=True)  # full checkpointing replays the forward ring
    total, exposed = ring_s(recomputed, group(2, 1, 8), Topology(ranks_per_node=8), INTRA, INTER, pass_s=0.4)
    assert (total, exposed) == (pytest.approx(0.2, rel=1e-12), pytest.approx(0.12, rel=1e-12))


def test_shapes_and_memory_of_cp_and_hsdp():
    """fsdp_cp at 4 ranks (dp 2 × cp 2) against fsdp at 2 (dp 2), micro 4, the tiny gpt (d_model 128,
    seq 64; bf16, as a plan sizes GPUs): one exchange holds keys and values of 4 × 32 tokens × 128 ×
    2 B × 2 = 65,536 B;
    activations halve; FSDP's group is dp × cp = 4 ranks, so the state per rank halves too."""
    base = ["model=tiny_gpt", "batch.micro=4", "optim=adamw"]
    cp, fsdp = compose_config([*base, "parallel=fsdp_cp", "parallel.cp=2"]), compose_config([*base, "parallel=fsdp"])
    shape = shape_for(cp, 4)
    assert (shape.dp, shape.cp, shape.groups.dp.size, shape.groups.cp.size) == (2, 2, 4, 2)
    assert shape.traffic.cp_bytes == 2 * 4 * 32 * 128 * 2 and shape.traffic.cp_layers == cp.model.n_layers
    assert shape.traffic.tp_bytes == shape_for(fsdp, 2).traffic.tp_bytes // 2
    m_cp = estimate(cp, make_trial(cp, index=0, world_size=4, steps=2, warmup_steps=1))
    m_fsdp = estimate(fsdp, make_trial(fsdp, index=0, world_size=2, steps=2, warmup_steps=1))
    assert m_cp.activations == m_fsdp.activations / 2
    assert m_cp.optimizer == m_fsdp.optimizer / 2
    hsdp = compose_config([*base, "parallel=hsdp", "parallel.shard=2"])
    m_hsdp = estimate(hsdp, make_trial(hsdp, index=0, world_size=8, steps=2, warmup_steps=1))
    assert m_hsdp.optimizer == m_fsdp.optimizer  # state ÷ shard (2), not ÷ dp (8)
    assert shape_for(hsdp, 8).groups.replicate.size == 4


PLAN_70B = [
    "plan",
    "model=llama3_70b",
    "cluster=example_gpu_site",
    "model.activation_checkpointing=full",
    "batch.micro=1",
]


def test_plan_of_hsdp_predicts_and_states_its_assumptions(capsys):
    """`launcher plan model=llama3_70b cluster=example_gpu_site parallel=hsdp parallel.shard=64
    model.activation_checkpointing=full batch.micro=1`: 70B's state fits 80 GB only ÷ 64, so
    sizes below one shard group are impossible and the others predicted, all at the same memory."""
    assert main([*PLAN_70B, "parallel=hsdp", "parallel.shard=64", "--gpus", "32,64,128"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
    assert [(r[0], r[2]) for r in rows] == [("32", "impossible"), ("64", "predicted"), ("128", "predicted")]
    printed = " ".join(out.split())
    assert (
        "hsdp: FSDP inside shard groups of 64, their all-gathers and reduce-scatters on the links the group spans; "
        "each gradient shard then all-reduced across the dp ÷ shard replicas (the inter-node link once they sit on "
        "other nodes), hidden under backward as the reduce-scatters are; parameters, gradients and optimizer state "
        "÷ shard"
    ) in printed


def test_plan_of_context_parallel_predicts_and_states_its_assumptions(capsys):
    """`launcher plan model=llama3_70b cluster=example_gpu_site parallel=fsdp_tp_cp parallel.cp=2 parallel.tp=8
    model.activation_checkpointing=full batch.micro=1`: tp 8 in a node, cp 2 across two."""
    assert main([*PLAN_70B, "parallel=fsdp_tp_cp", "parallel.cp=2", "parallel.tp=8", "--gpus", "8,16,32"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
    assert [(r[0], r[2]) for r in rows] == [("8", "impossible"), ("16", "predicted"), ("32", "predicted")]
    printed = " ".join(out.split())
    assert (
        "cp: each sequence split over parallel.cp=2 GPUs: activations ÷ 2; torch's ring attention sends this "
        "rank's keys and values per layer (cp − 1 exchanges forward, 2·cp − 1 with their gradients backward), "
        "each overlapped with one ring step's attention and exposed where it outlasts it; no collective of its "
        "own for gradients: FSDP shards and reduces over dp × cp"
    ) in printed


def test_search_tries_hsdp_and_cp_where_their_degrees_apply():
    """At 16 GPUs of 8 a node: hsdp (shard a node), fsdp_cp at cp 2, 4, 8 and fsdp_tp_cp with cp × tp ≤ 8
    (seq 2048 divides them all); each candidate turns back into the overrides that run it."""
    cfg = compose_config(["model=gpt_1_3b", "cluster=example_gpu_site"])
    found = {(c.layout, c.dp, c.tp, c.cp) for c in candidates(cfg, 16) if c.layout in ("hsdp", "fsdp_cp", "fsdp_tp_cp")}
    assert found == {
        ("hsdp", 16, 1, 1),
        ("fsdp_cp", 8, 1, 2),
        ("fsdp_cp", 4, 1, 4),
        ("fsdp_cp", 2, 1, 8),
        ("fsdp_tp_cp", 4, 2, 2),
        ("fsdp_tp_cp", 2, 2, 4),
        ("fsdp_tp_cp", 2, 4, 2),
    }
    one = next(c for c in candidates(cfg, 16) if c.layout == "fsdp_tp_cp" and c.cp == 4)
    assert one.overrides()[:3] == ["parallel=fsdp_tp_cp", "parallel.tp=2", "parallel.cp=4"]
    assert one.config(cfg).parallel.cp == 4 and one.label.startswith("fsdp_tp_cp tp2 cp4 ")


def test_plan_of_llama_405b_in_its_four_d_layout(capsys):
    """`launcher plan model=llama3_405b cluster=example_gpu_site parallel=fsdp_tp_pp_cp parallel.tp=8
    parallel.pp=14 parallel.cp=2 parallel.microbatches=14 model.activation_checkpointing=full batch.micro=14`:
    Llama 3.1 405B's 4-D layout (126 layers: 14 stages of 9), predicted, its cp assumptions in the footer."""
    argv = ["plan", "model=llama3_405b", "cluster=example_gpu_site", "parallel=fsdp_tp_pp_cp", "parallel.tp=8"]
    argv += ["parallel.pp=14", "parallel.cp=2", "parallel.microbatches=14", "model.activation_checkpointing=full"]
    assert main([*argv, "batch.micro=14", "--gpus", "224,448"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]
    assert [(r[0], r[1], r[2]) for r in rows] == [("224", "28", "predicted"), ("448", "56", "predicted")]
    assert "cp: each sequence split over parallel.cp=2 GPUs: activations ÷ 2" in " ".join(out.split())
