"""The step time is priced at the FLOPs a causal kernel executes (compute/flops.py's
executed_flops_per_token), MFU at the usual count: figures by hand on small shapes."""

from __future__ import annotations

import dataclasses

import pytest

from launcher.compute import flops
from launcher.config.compose import compose_config
from launcher.config.schema import ModelConfig
from launcher.perf import preset_fit
from launcher.perf.plan_table import preset_model, work_of
from launcher.perf.shapes import shape_for

# 4·L·H·Q·T = 4 · 2 · 4 · 8 · 16 = 4,096 forward FLOPs per token in the attention cores.
GPT = ModelConfig(arch="gpt", vocab_size=96, seq_len=16, d_model=32, n_layers=2, n_heads=4)
CORE = 4_096


def test_the_causal_core_runs_half_of_what_mfu_counts():
    """none: 3 runs of the core, 3 · 4,096 / 2 = 6,144 not executed; selective and full rerun it in
    backward, 4 · 4,096 / 2 = 8,192; op keeps its output, 6,144; the mlp model has no core."""
    assert flops.attention_forward_flops_per_token(GPT) == CORE
    hw = flops.hardware_flops_per_token(GPT)
    assert flops.executed_flops_per_token(GPT) == hw - 6_144
    for mode, skipped in (("selective", 8_192), ("full", 8_192), ("op", 6_144)):
        ac = dataclasses.replace(GPT, activation_checkpointing=mode)
        assert flops.executed_flops_per_token(ac) == flops.hardware_flops_per_token(ac) - skipped
        assert flops.flops_per_token(ac) == flops.flops_per_token(GPT)  # MFU's count keeps the whole square
    mlp = ModelConfig(arch="mlp", vocab_size=96, seq_len=16, d_model=32, n_layers=2, n_heads=1)
    assert flops.executed_flops_per_token(mlp) == flops.hardware_flops_per_token(mlp)


def test_the_plan_prices_compute_at_the_executed_flops():
    """tiny_gpt (d 128, 2 layers, 4 heads, seq 64): its core is 4 · 2 · 4 · 32 · 64 = 65,536 FLOPs
    a token, so the step executes 3 · 65,536 / 2 = 98,304 a token fewer than HFU counts, and the
    preset's compute per sample is the executed FLOPs × 64 tokens ÷ (peak × MFU)."""
    cfg = compose_config(["model=tiny_gpt", "cluster=example_gpu_site", "batch.micro=1"])
    work = work_of(cfg)
    assert work.hardware_flops - work.executed_flops == 98_304
    assert work.model_flops == flops.flops_per_token(cfg.model)  # what the MFU column divides by
    model = preset_model(cfg, work, 0.5, preset_fit.load())
    assert model.compute_s_per_sample == pytest.approx(work.executed_flops * 64 / (work.peak.flops * 0.5), rel=1e-12)


def test_the_ring_overlaps_with_the_executed_attention_share():
    """fsdp_cp on tiny_gpt: the ring's attention share is the core's executed forward and backward,
    3 · 65,536 / 2 = 98,304 FLOPs a token, over the executed total (the same figure the compute time
    it is a share of is priced at)."""
    cfg = compose_config(["model=tiny_gpt", "batch.micro=4", "parallel=fsdp_cp", "parallel.cp=2"])
    share = shape_for(cfg, 4).traffic.attention_share
    assert share == pytest.approx(98_304 / flops.executed_flops_per_token(cfg.model), rel=1e-12)
