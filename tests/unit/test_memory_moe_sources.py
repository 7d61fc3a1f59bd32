"""The memory terms the published MoE groups corrected (issue 23's corpus, issue 24's MoE): NeMo AutoModel's
bf16-built model (trainer.weights_16bit) and its experts left out of FSDP where ep spans dp
(trainer.experts_outside_fsdp) move exactly the bytes its code says, and its run on 8 H100s, which ran, fits.
The other corrected terms: tests/unit/test_memory_sources.py."""

from __future__ import annotations

import csv

import pytest

from benchmarks.replay_mapping import map_row
from benchmarks.search_corpus import CORPUS
from launcher.compute import flops
from launcher.compute.flops import routed_expert_params
from launcher.config.builtin_support import builtin_lacks
from launcher.config.compose import compose_config
from launcher.perf import memory
from launcher.perf.memory import FP32, GIB, estimate
from launcher.perf.memory_limit import limit_of
from launcher.trials.spec import make_trial

QWEN3_MOE = [
    "model=llama3_8b",
    "model.n_layers=48",
    "model.d_model=2048",
    "model.n_heads=32",
    "model.n_kv_heads=4",
    "model.ffn_hidden=6144",
    "model.seq_len=4096",
    "model.n_experts=128",
    "model.experts_per_token=8",
    "model.expert_ffn_hidden=768",
    "model.vocab_size=151936",
    "precision=bf16",
    "cluster.device=cuda",
    "parallel=fsdp_ep",
    "parallel.ep=8",
    "batch.micro=4",
    "batch.global_batch=128",  # 4 micro-steps at 8 GPUs: FSDP's unsharded gradients are kept
    "model.activation_checkpointing=full",
]


def _estimate(overrides: list[str], world_size: int):
    cfg = compose_config(overrides)
    trial = make_trial(cfg, index=0, world_size=world_size, steps=1, warmup_steps=0)
    return cfg, trial, estimate(cfg, trial, "cuda")


def _stage_params(cfg, trial) -> float:
    return memory.rank_params(flops.model_parts(cfg.model), cfg.model, trial, 0)[0]


def test_weights_built_in_16_bits_keep_no_float32_master_and_16_bit_moments():
    """AutoModel's from_config builds bfloat16 weights (torch_dtype 'auto', nemo_automodel/_transformers/
    auto_model.py @60dfabfe) and torch.optim.Adam keeps its moments in the parameter's dtype: the rank's shard
    is 2 bytes a parameter in weights, gradients and each moment, not 4; the unsharded gradients FSDP keeps
    while accumulating stay float32 (its reduce_dtype) and activations are unchanged."""
    over = [*QWEN3_MOE, "parallel.ep=1", "parallel=fsdp"]
    cfg, trial, fp32 = _estimate(over, 8)
    _, _, bf16 = _estimate([*over, "trainer.weights_16bit=true"], 8)
    local = _stage_params(cfg, trial) / 8
    assert trial.accum == 4
    assert bf16.params == pytest.approx(fp32.params - local * 2, rel=1e-12)
    assert bf16.grads == pytest.approx(fp32.grads - local * 2, rel=1e-12)
    assert bf16.optimizer == pytest.approx(local * 2 * 2, rel=1e-12)
    assert fp32.optimizer == pytest.approx(local * FP32 * 2, rel=1e-12)
    assert bf16.activations == fp32.activations


def test_experts_outside_fsdp_where_ep_spans_dp_have_no_unsharded_gradients_nor_gathered_copy():
    """nemo_automodel/components/moe/parallelizer.py @60dfabfe apply_fsdp: fully_shard on the experts only
    when the ep-shard mesh (dp ÷ ep) is larger than 1, else the experts are the block's ignored_params. At 8
    GPUs with ep 8 the rank's 16 experts of each block (routed ÷ 8 parameters) lose their float32 unsharded
    gradient (kept over 4 micro-steps) and, without resharding, their 16-bit gathered copy."""
    over = [*QWEN3_MOE, "parallel.reshard_after_forward=false"]
    cfg, trial, inside = _estimate(over, 8)
    _, _, outside = _estimate([*over, "trainer.experts_outside_fsdp=true"], 8)
    own = routed_expert_params(cfg.model) / 8
    assert (trial.dp, trial.ep, trial.accum) == (8, 8, 4)
    assert inside.grads - outside.grads == pytest.approx(own * FP32, rel=1e-12)
    assert inside.params - outside.params == pytest.approx(own * 2, rel=1e-12)
    assert (inside.optimizer, inside.activations) == (outside.optimizer, outside.activations)


def test_experts_outside_fsdp_changes_nothing_where_dp_exceeds_ep():
    """At 16 GPUs with ep 8 the experts are sharded over dp ÷ ep = 2 ranks by FSDP in AutoModel too."""
    _, trial, inside = _estimate(QWEN3_MOE, 16)
    _, _, outside = _estimate([*QWEN3_MOE, "trainer.experts_outside_fsdp=true"], 16)
    assert (trial.dp, trial.ep) == (16, 8)
    assert outside == inside


def test_the_built_in_trainer_refuses_both_settings():
    cfg = compose_config([*QWEN3_MOE, "trainer.weights_16bit=true", "trainer.experts_outside_fsdp=true"])
    assert builtin_lacks(cfg) == ["trainer.weights_16bit=true", "trainer.experts_outside_fsdp=true"]


def test_automodels_qwen3_moe_run_that_ran_fits_its_h100s():
    """The DeepEP rows of AutoModel's report ran on 80 GB H100s (8 GPUs ep 8 LBS 4, 16 GPUs ep 16 LBS 2): the
    estimate was 111.5 GiB at 8 GPUs with float32 master weights and unsharded float32 expert gradients."""
    with open(CORPUS, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["source"] == "automodel_ephybrid_2607"]
    assert [int(r["gpus"]) for r in rows] == [8, 16]
    for row in rows:
        mapped = map_row(row)
        assert {"trainer.weights_16bit=true", "trainer.experts_outside_fsdp=true"} <= set(mapped.overrides)
        cfg, _, need = _estimate(mapped.overrides, mapped.gpus)
        assert limit_of(cfg).fits(need.total), f"at {mapped.gpus}: {need.total / GIB:.1f} GiB"
