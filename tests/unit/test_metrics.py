"""Measured-time arithmetic and model FLOPs on literal numbers."""

from __future__ import annotations

import pytest

from launcher.compute.peaks import choose_peak
from launcher.config.schema import ModelConfig
from launcher.train import metrics


def test_step_stats_median_and_interpolated_quantiles():
    s = metrics.step_stats([0.5, 0.1, 0.2, 0.3, 0.4])
    assert s == pytest.approx({"step_time_median_s": 0.3, "step_time_p10_s": 0.14, "step_time_p90_s": 0.46})


def test_throughput_counts_every_device():
    t = metrics.throughput(global_batch=32, seq_len=128, step_time_s=0.5, devices=4)
    assert t == pytest.approx({"samples_per_s": 64.0, "tokens_per_s": 8192.0, "tokens_per_s_per_device": 2048.0})


def test_mfu_null_without_peak_and_ratio_with_it():
    assert metrics.mfu(tokens_per_s=1e5, flops_per_token=6e9, peak_flops_per_device=None, devices=8) is None
    # 1e5 tok/s × 6e9 FLOP/tok = 6e14 FLOP/s over 8 × 312e12 = 0.2404
    assert metrics.mfu(tokens_per_s=1e5, flops_per_token=6e9, peak_flops_per_device=312e12, devices=8) == pytest.approx(
        6e14 / (8 * 312e12)
    )


def test_mfu_divides_by_the_peak_table_figure_of_the_precision_that_ran():
    a100 = "NVIDIA A100-SXM4-80GB"
    bf16 = choose_peak(device_name=a100, dtype="bf16", explicit=None).flops
    tf32 = choose_peak(device_name=a100, dtype="tf32", explicit=None).flops
    assert metrics.mfu(tokens_per_s=1e5, flops_per_token=6e9, peak_flops_per_device=bf16, devices=8) == pytest.approx(
        6e14 / (8 * 312e12)
    )
    # The same run in fp32 (TF32 matmuls) is measured against half that peak: twice the MFU.
    assert metrics.mfu(tokens_per_s=1e5, flops_per_token=6e9, peak_flops_per_device=tf32, devices=8) == pytest.approx(
        6e14 / (8 * 156e12)
    )


@pytest.mark.parametrize("n, factor", [(2, 1.0), (4, 1.5), (8, 1.75)])
def test_busbw_is_algbw_times_ring_factor(n, factor):
    bw = metrics.allreduce_bandwidth(nbytes=1_000_000_000, seconds=0.5, n=n)
    assert bw["algbw_gbps"] == pytest.approx(2.0)
    assert bw["busbw_gbps"] == pytest.approx(2.0 * factor)


def test_one_rank_moves_nothing():
    assert metrics.allreduce_bandwidth(nbytes=100, seconds=0.0, n=1) == {"algbw_gbps": None, "busbw_gbps": None}


def test_ccr_and_spread():
    assert metrics.ccr(comm_s=0.02, compute_s=0.08) == pytest.approx(0.25)
    assert metrics.ccr(comm_s=0.02, compute_s=0.0) is None
    assert metrics.spread([0.10, 0.11, 0.12]) == pytest.approx(0.2)


def test_flops_per_token_formula():
    from launcher.compute.flops import flops_per_token
    from launcher.train.models import build_model, param_counts

    cfg = ModelConfig(arch="gpt", vocab_size=256, seq_len=64, d_model=128, n_layers=2, n_heads=4)
    total, non_emb = param_counts(build_model(cfg))
    assert total - non_emb == 256 * 128 + 64 * 128  # token + position tables
    # 6N + 12·L·H·Q·T with L=2, H=4, Q=32, T=64
    assert flops_per_token(cfg, non_emb) == 6 * non_emb + 12 * 2 * 4 * 32 * 64
    mlp = ModelConfig(arch="mlp", vocab_size=256, seq_len=32, d_model=64, n_layers=2, n_heads=1)
    assert flops_per_token(mlp, 1000) == 6000


@pytest.mark.parametrize("recipe", ["tiny_gpt", "mlp", "gpt_125m", "gpt_1_3b", "tiny_llama", "llama3_8b", "llama3_70b"])
def test_counted_parameters_equal_the_built_model(recipe):
    """launcher plan counts parameters from the config; the payload counts the real model."""
    from pathlib import Path

    import torch
    import yaml

    from launcher.compute import flops
    from launcher.train.models import build_model, param_counts

    doc = yaml.safe_load((Path(__file__).parents[2] / "recipes" / "model" / f"{recipe}.yaml").read_text())
    cfg = ModelConfig(**{k: v for k, v in doc.items() if not k.startswith("_")})
    with torch.device("meta"):  # a 1.3B model costs nothing to count on the meta device
        built = param_counts(build_model(cfg))
    assert flops.param_counts(cfg) == built
