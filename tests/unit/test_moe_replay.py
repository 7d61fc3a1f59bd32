"""The mixture-of-experts rows of the published replay (Qwen3-30B-A3B: NeMo AutoModel on H100, NousResearch's
torchtitan on B200): what each source's stack runs, as the shape model prices it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from benchmarks import replay_curve as rc
from benchmarks.published_replay import CORPUS, read_corpus
from benchmarks.replay_attention import ATTENTION_KERNEL_OF_SOURCE, attention_kernel
from benchmarks.replay_case import Case
from benchmarks.replay_mapping import TRAINERS, map_row
from launcher.compute import flops, shape_rate
from launcher.compute.shape_rate import Parts
from launcher.config.builtin_support import builtin_lacks
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.schema import ModelConfig
from launcher.config.validate import validate
from launcher.perf import preset_fit
from launcher.perf.compute_term import expert_degree, shaped_mfu
from launcher.perf.plan_table import work_of
from launcher.perf.shapes import shape_for
from launcher.perf.terms import moe_line


def test_automodels_te_attention_backend_is_priced_as_cudnns_fused_attention_on_hopper():
    """NeMo AutoModel's recipe qwen3_moe_30b_te_deepep sets model.backend.attn: te, Transformer Engine's
    DotProductAttention, which picks cuDNN's fused attention on Hopper: the H100 rows run at cuDNN's cited rate
    (522 of 989 TFLOP/s at head dim 128, 16K), not FlashAttention-2's (328)."""
    assert attention_kernel({"source": "automodel_ephybrid_2607"}) == "cudnn"
    why = ATTENTION_KERNEL_OF_SOURCE["automodel_ephybrid_2607"][1]
    assert "qwen3_moe_30b_te_deepep.yaml" in why and "backend.attn: te" in why and "@60dfabfe" in why
    # torchtitan (NousResearch's fork) keeps the sdpa figure
    assert attention_kernel({"source": "nous_deepep_2511"}) == "sdpa"


QWEN3_MOE = ModelConfig(
    arch="llama",
    vocab_size=151936,
    seq_len=4096,
    d_model=2048,
    n_layers=48,
    n_heads=32,
    n_kv_heads=4,
    head_dim=128,
    ffn_hidden=6144,
    n_experts=128,
    experts_per_token=8,
    expert_ffn_hidden=768,
)
"""Qwen/Qwen3-30B-A3B's shape, as the corpus maps it."""


def test_a_routed_experts_gemm_takes_its_rows_from_every_rank_of_its_expert_parallel_group():
    """A micro-batch of 2 × 4096 tokens on a rank, top-8 of 128 experts: without expert parallel each expert
    multiplies 8192 · 8 / 128 = 512 rows; under ep 16 (AutoModel's two-node row) a rank holds 8 experts and
    each gathers those rows from all 16 ranks, 8192 rows, so its GEMM's smallest side is the expert width
    768, not 512. The FLOPs per token do not change."""
    one = {op.name: op for op in flops.model_ops(QWEN3_MOE, tokens=8192)}
    sixteen = {op.name: op for op in flops.model_ops(QWEN3_MOE, tokens=8192, ep=16)}
    assert (one["expert_w1"].m, sixteen["expert_w1"].m, sixteen["expert_w2"].m) == (512, 8192, 8192)
    assert (sixteen["expert_w1"].n, sixteen["expert_w1"].k) == (768, 2048)
    assert sixteen["wq"].m == one["wq"].m == 8192  # the dense matmuls keep the rank's own tokens
    assert [op.flops for op in sixteen.values()] == [op.flops for op in one.values()]
    parts = {
        ep: shape_rate.step_parts(QWEN3_MOE, micro_batch=2, device="H100-SXM", dtype="bf16", ep=ep) for ep in (1, 16)
    }
    # the Parts' matmuls in model_ops' order: wq wk wv wo, the dense w1 w3 w2 (no dense block: 0 FLOPs),
    # router, expert_w1 expert_w3 expert_w2, head
    smallest = {ep: [s for _, s, *_ in p.matmuls] for ep, p in parts.items()}
    assert smallest[1][-4:] == [512, 512, 512, 2048]
    assert smallest[16][-4:] == [768, 768, 768, 2048]
    assert smallest[16][:8] == smallest[1][:8] == [2048, 512, 512, 2048, 2048, 2048, 2048, 128]


def test_the_planner_and_the_replay_price_a_recipes_experts_at_its_expert_parallel_degree():
    """launcher plan (compute_term.shaped_mfu) and the replay (replay_curve.case_parts) take parallel.ep where
    the layout splits experts, and 1 where it does not (fsdp: every rank holds every expert)."""
    moe = [f"model.{k}={v}" for k, v in (("n_experts", 128), ("experts_per_token", 8), ("expert_ffn_hidden", 768))]
    ep = compose_config(["model=llama3_8b", *moe, "parallel=fsdp_ep", "parallel.ep=8"], None)
    assert expert_degree(ep) == 8
    assert expert_degree(compose_config(["model=llama3_8b", *moe, "parallel=fsdp"], None)) == 1


def _case(i: int, source: str, device: str, shape: float, truth: float) -> Case:
    """A bf16 row whose one matmul runs at `shape` of its large-GEMM rate (gemm_shape's share) and published
    `truth` × its peak."""
    parts = Parts(matmuls=((1.0, 4096, 1.0, math.inf, False, shape),), attention_s=0.0, memory_s=0.0)
    return Case(
        index=i, row={"source": source, "precision": "bf16"}, key=f"{device}/bf16", published=truth, parts=(parts, 1.0)
    )


def test_a_device_of_one_source_is_priced_by_the_pooled_curve_and_does_not_bend_it():
    """A100 and H100 rows of two sources each run at e_max 0.60 over shapes of share 0.4..0.95; one B200 source
    publishes 0.15 of peak at share 0.8 (its stack's, not its chip's). The B200 key has no curve of its own, and
    the pooled curve it is priced by is the backed devices' e_max 0.60: fitted with the B200 rows in, it bent to
    fit them (the pooled e_max is what they could move)."""
    shares = [0.4, 0.5, 0.6, 0.8, 0.95, 0.4, 0.6, 0.95]
    backed = [
        _case(i, f"{dev.lower()}_{i % 2}", dev, share, round(0.60 * share, 4))
        for dev in ("A100", "H100")
        for i, share in enumerate(shares)
    ]
    backed = [dataclasses.replace(c, index=i) for i, c in enumerate(backed)]
    b200 = [_case(100 + i, "b200_only", "B200", 0.8, 0.15) for i in range(5)]
    curves = rc.fit_curves(backed + b200, lambda c, mfu: np.log(mfu), 2)
    assert "B200/bf16" not in curves
    assert curves["*/bf16"] == curves["A100/bf16"] == curves["H100/bf16"] == [0.60, 0.0]
    assert rc.fit_curves(backed, lambda c, mfu: np.log(mfu), 2)["*/bf16"] == [0.60, 0.0]
    # The B200 rows in the pooled fit would pull its e_max down (the guard POOLED_FROM_BACKED describes).
    assert rc.fit_curve(backed + b200, lambda c, mfu: np.log(mfu), {}, s_half=0.0)[0] < 0.60


MOE = ["model=llama3_8b", "model.n_experts=128", "model.experts_per_token=8", "model.expert_ffn_hidden=768"]


def test_a_per_rank_dispatcher_sends_the_copies_it_is_told_and_the_default_one_per_routed_expert():
    """ep 8, micro 1 × 8192 tokens of d 4096 in bf16: one all-to-all's buffer is 8192 × 8 × 4096 × 2 bytes with
    a copy per routed expert (torchtitan's all-to-all, the built-in trainer's), an eighth of it where the
    dispatcher sends a token once per destination rank and its experts sit on one rank (trainer.ep_dispatch_copies=1,
    DeepEP under AutoModel's fake balanced gate). A sweep of the built-in trainer refuses it; more copies than
    routed experts is one line."""
    base = [*MOE, "parallel=fsdp_ep", "parallel.ep=8", "batch.micro=1", "batch.global_batch=8", "precision=bf16"]
    default = shape_for(compose_config(base, None), 8).traffic
    one = shape_for(compose_config([*base, "trainer.ep_dispatch_copies=1"], None), 8).traffic
    assert default.ep_bytes == 8192 * 8 * 4096 * 2 == 8 * one.ep_bytes
    assert default.ep_all_to_alls == one.ep_all_to_alls
    assert builtin_lacks(compose_config([*base, "trainer.ep_dispatch_copies=1"], None)) == [
        "trainer.ep_dispatch_copies=1"
    ]
    with pytest.raises(ConfigError, match=r"trainer.ep_dispatch_copies=9 must be in 0..8 \(model.experts_per_token\)"):
        validate(compose_config([*base, "trainer.ep_dispatch_copies=9"], None))


def test_automodels_rows_send_each_token_once_as_its_fake_balanced_gate_and_deepep_do():
    """NeMo AutoModel's recipe routes with FakeBalancedGate (token i to experts 8i..8i+7 mod 128: one rank's
    block at ep 8 and 16) and dispatches with DeepEP, which sends a token once per destination rank."""
    rows = [r for r in read_corpus(CORPUS) if r["source"] == "automodel_ephybrid_2607"]
    assert len(rows) == 2
    for row in rows:
        mapped = map_row(row)
        assert "trainer.ep_dispatch_copies=1" in mapped.overrides
    why = TRAINERS["automodel_ephybrid_2607"][1]
    assert "FakeBalancedGate" in why and "8i..8i+7 mod 128" in why and "per-token deduplicated destination bytes" in why


def test_the_plan_footer_says_how_many_copies_of_a_token_its_all_to_alls_move():
    base = [*MOE, "parallel=fsdp_ep", "parallel.ep=8", "cluster=example_gpu_site"]
    assert "(tokens × 8 × d_model" in moe_line(compose_config(base, None))
    assert "(tokens × 1 × d_model" in moe_line(compose_config([*base, "trainer.ep_dispatch_copies=1"], None))


def test_launcher_plans_price_a_routed_experts_gemm_at_its_expert_parallel_width():
    """`launcher plan`'s compute term passes parallel.ep to the step's ops: at ep 8 an expert's GEMM takes
    8× the rows it takes at ep 1 (micro 1 × 4096 tokens × 8 of 128 experts: 256 rows, under the curve's
    s_half; 2048 at ep 8), so the same recipe's MFU is higher. Fails with shaped_mfu's `ep=` left out."""
    moe = [f"model.{k}={v}" for k, v in (("n_experts", 128), ("experts_per_token", 8), ("expert_ffn_hidden", 768))]
    base = ["model=llama3_8b", "model.seq_len=4096", *moe, "cluster=example_gpu_site", "batch.micro=1"]
    base += ["cluster.device_name=H100-SXM", "cluster.peak_flops_per_device=null", "parallel=fsdp_ep"]
    fit = preset_fit.load(preset_fit.PACKAGED)

    def mfu(ep: int) -> float:
        cfg = compose_config([*base, f"parallel.ep={ep}"], None)
        w = work_of(cfg)
        return shaped_mfu(cfg, executed_flops=w.executed_flops, peak_flops=w.peak.flops, dtype=w.dtype, fit=fit)[0]

    assert mfu(8) > 1.05 * mfu(1)
