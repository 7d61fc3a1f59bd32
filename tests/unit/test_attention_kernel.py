"""Attention at its kernel's cited rate, and context parallel's ring priced per chunk (issue 32, item 1)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.replay_attention import attention_kernel
from launcher.compute import flops, shape_rate
from launcher.compute.flops import CAUSAL_EXECUTED_SHARE, model_ops
from launcher.compute.shape_rate import MEMORY_SHARE, Curve, attention_tflops, mem_bw_gbs, op_parts
from launcher.config.compose import compose_config

H100 = "NVIDIA H100 80GB HBM3"  # torch's name for the SXM5 part
A100 = "NVIDIA A100-SXM4-80GB"


def _llama(seq: int, **change):
    """Llama 3 8B's shape (32 heads of 128, 8 kv heads), 4 layers."""
    model = compose_config(["model=llama3_8b", "model.n_layers=4", f"model.seq_len={seq}"], None).model
    return dataclasses.replace(model, **change)


def test_the_attention_kernel_runs_at_flashattention_2s_cited_share_of_the_chips_peak():
    """FA2 (arXiv:2307.08691) Figs. 7(d) and 4(d), causal, head dim 128, 16K tokens, forward and backward:
    328 TFLOP/s on an H100 SXM5 (33% of 989.4), 189 on an A100 SXM4 (61% of 312); the H200 is the H100's die.
    A chip with no cited figure, or fp32, has none (the matmul-curve rule prices it)."""
    assert attention_tflops(H100, 16384, 128, "bf16") == pytest.approx(328.0)
    assert attention_tflops(H100, 16384, 128, "bf16") / 989.4 == pytest.approx(0.3315, abs=1e-4)
    assert attention_tflops(A100, 16384, 128, "bf16") == pytest.approx(189.0)
    assert attention_tflops("NVIDIA H200", 16384, 128, "bf16") == pytest.approx(328.0 * 989.5 / 989.4)
    # FA2's own figures at other shapes, within 6%: H100 2K 265, 512 163; head dim 64 at 16K 284.
    assert attention_tflops(H100, 2048, 128, "bf16") == pytest.approx(265, rel=0.06)
    assert attention_tflops(H100, 512, 128, "bf16") == pytest.approx(163, rel=0.06)
    assert attention_tflops(H100, 16384, 64, "bf16") == pytest.approx(284, rel=0.06)
    assert attention_tflops("NVIDIA B200", 16384, 128, "bf16") is None
    assert attention_tflops(H100, 16384, 128, "fp32") is None


def test_on_an_h100_the_attention_core_takes_its_cited_kernels_time_whatever_the_matmul_curve():
    """The core's counted FLOPs, causal-halved, at 3.5 forward-equivalents per 3 counted (FA2's benchmark
    counts backward as 2.5 forwards), over the kernel's 328 TFLOP/s: not a share of the matmul curve."""
    model = _llama(16384)
    ops = model_ops(model, tokens=16384)
    (core,) = [op for op in ops if op.priced == "attention"]
    parts = op_parts(ops, H100, "bf16")
    want = core.flops * CAUSAL_EXECUTED_SHARE * 3.5 / 3 / 328e12
    assert parts.seconds(Curve(0.5, 0)).attention_s == pytest.approx(want, rel=1e-9)
    assert parts.seconds(Curve(0.9, 256)).attention_s == pytest.approx(want, rel=1e-9)


def test_a_context_parallel_rings_kernel_runs_on_its_chunk_of_seq_over_cp():
    """torch's ring attention calls the kernel once per step on seq/cp keys: the rate is the chunk's."""
    model = _llama(32768)
    ops = {op.name: op for op in model_ops(model, tokens=32768 // 4, cp=4)}
    core = ops["attention"]
    assert (core.m, core.n, core.k) == (8192, 8192, 128)
    want = core.flops * CAUSAL_EXECUTED_SHARE * 3.5 / 3 / (attention_tflops(H100, 8192, 128, "bf16") * 1e12)
    assert op_parts(list(ops.values()), H100, "bf16").seconds(Curve(0.6, 0)).attention_s == pytest.approx(want)
    # The chunk of 8K runs below the whole 32K sequence's rate.
    assert attention_tflops(H100, 8192, 128, "bf16") < 0.97 * attention_tflops(H100, 32768, 128, "bf16")


@pytest.mark.parametrize(("ckpt", "forward_runs"), [("none", 1), ("selective", 2), ("full", 2)])
def test_a_context_parallel_rings_merges_and_sends_move_their_counted_bytes(ckpt, forward_runs):
    """Per token of one block at cp 4 (32 query heads of 128: 4096 output elements; 8 kv heads: 2048 k and v
    elements): forward, 12 B once + 3 merges of 38 B per output element and 3 sends of 4 B per k, v element;
    backward, 4 steps of 10 B per query-gradient element and 18 B per k, v gradient element, and 3 sends.
    A rerun forward merges again. They run at the memory-bound ops' bandwidth."""
    model = _llama(32768, activation_checkpointing=ckpt)
    forward = 12 * 4096 + 3 * (38 * 4096 + 4 * 2048)
    backward = 4 * (10 * 4096 + 18 * 2048) + 3 * 4 * 2048
    assert flops.ring_bytes(model, 4) == forward_runs * forward + backward
    assert (forward, backward) == (540672, 335872)
    ops = model_ops(model, tokens=8192, cp=4)
    (ring,) = [op for op in ops if op.name == "ring_merge"]
    assert (ring.priced, ring.nbytes) == ("memory", 4 * (forward_runs * forward + backward))
    without = [op for op in ops if op.name != "ring_merge"]
    added = op_parts(ops, H100, "bf16").memory_s - op_parts(without, H100, "bf16").memory_s
    assert added == pytest.approx(ring.nbytes / (mem_bw_gbs(H100) * 1e9 * MEMORY_SHARE))
    assert not [op for op in model_ops(model, tokens=8192) if op.name == "ring_merge"]
    assert flops.ring_bytes(model, 1) == 0.0


def test_transformer_engines_cudnn_attention_runs_at_its_cited_rate_on_hopper_and_nemo_rows_use_it():
    """cuDNN's fused attention on an H100 (FlashAttention-3, arXiv:2407.08608, Figs. 5(d) and 6: forward 539,
    backward 516 TFLOP/s at head dim 128, 16K): 3.5 / (1/539 + 2.5/516) = 522 forward and backward, 1.6x FA2's.
    Below Hopper TE runs flash-attn: sdpa's figure. The replay prices Megatron-Core and NeMo sources on it."""
    assert 3.5 / (1 / 539 + 2.5 / 516) == pytest.approx(522, abs=0.5)
    assert attention_tflops(H100, 16384, 128, "bf16", "cudnn") == pytest.approx(522.0)
    assert attention_tflops(A100, 16384, 128, "bf16", "cudnn") == pytest.approx(189.0)
    model = _llama(16384)
    sdpa = shape_rate.step_parts(model, micro_batch=1, device=H100, dtype="bf16")
    cudnn = shape_rate.step_parts(model, micro_batch=1, device=H100, dtype="bf16", attention_kernel="cudnn")
    assert sdpa.kernel_s / cudnn.kernel_s == pytest.approx(522 / 328)
    with pytest.raises(ValueError, match="attention kernel 'fa3' is not one of sdpa, cudnn, unfused"):
        shape_rate.step_parts(model, micro_batch=1, device=H100, dtype="bf16", attention_kernel="fa3")
    kernels = {
        s: attention_kernel({"source": s}) for s in ("nemo_perf_2407", "megatron_core_2024", "torchtitan_h100_2024")
    }
    assert kernels == {"nemo_perf_2407": "cudnn", "megatron_core_2024": "cudnn", "torchtitan_h100_2024": "sdpa"}


def test_megatrons_unfused_attention_runs_two_gemms_on_the_curve_and_moves_its_score_square_through_memory():
    """Before flash attention (2021-22) Megatron's CoreAttention materialised the whole score square: two batched
    GEMMs (no causal skipping, seq as their tile width, the head dim's short side left to the roofline) and a
    fused scale-mask-softmax and dropout on the square, UNFUSED_BYTES (20/3) per score element per run. The replay
    prices the 2021-22 Megatron sources on it; later ones keep their kernel."""
    model = compose_config(["model=gpt_1_3b", "model.n_layers=2", "model.seq_len=2048"], None).model
    sdpa = shape_rate.step_parts(model, micro_batch=4, device=A100, dtype="bf16")
    unfused = shape_rate.step_parts(model, micro_batch=4, device=A100, dtype="bf16", attention_kernel="unfused")
    assert sdpa.kernel_s > 0 and unfused.kernel_s == 0 and unfused.attention_s == 0
    (core,) = [op for op in model_ops(model, tokens=4 * 2048) if op.priced == "attention"]
    extra = [m for m in unfused.matmuls if m not in sdpa.matmuls]
    assert [(f, s) for f, s, *_ in extra] == [(core.flops, 2048)]  # every counted FLOP runs: the square whole
    elements = model.n_layers * model.n_heads * 2048 * (core.flops / flops.attention_forward_flops_per_token(model))
    bandwidth = mem_bw_gbs(A100) * 1e9 * MEMORY_SHARE
    assert unfused.memory_s - sdpa.memory_s == pytest.approx(elements * 20 / 3 / bandwidth)
    # Its GEMMs' short side (head dim 128 of a 2048 square) caps them at their arithmetic intensity's rate.
    intensity = 2 * 2048 * 2048 * 128 / (2 * (2 * 2048 * 128) + 2 * 2048 * 2048)
    assert extra[0][3] == pytest.approx(intensity * mem_bw_gbs(A100) * 1e9) and extra[0][3] < 0.75 * 312e12
    kernels = {
        s: attention_kernel({"source": s})
        for s in ("megatron_narayanan_2021", "mtnlg_2022", "bloom_2022", "torchtitan_a100_2024", "llmfoundry_mpt")
    }
    assert kernels == {
        "megatron_narayanan_2021": "unfused",
        "mtnlg_2022": "unfused",
        "bloom_2022": "unfused",
        "torchtitan_a100_2024": "sdpa",
        "llmfoundry_mpt": "sdpa",
    }
