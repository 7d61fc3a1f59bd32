"""Compute that depends on shape (issue 32 item 1): a step's op list, the matmul curve, MFU as an output."""

from __future__ import annotations

import dataclasses

import pytest

from launcher.compute import flops, fp8_casts, shape_rate
from launcher.compute.flops import CAUSAL_EXECUTED_SHARE, model_ops
from launcher.compute.gemm_shape import gemm_share
from launcher.compute.loss_bytes import LOSS_BYTES
from launcher.compute.shape_rate import (
    FLASH_SHARE,
    HEAD_DIM_HALF,
    SEQ_HALF,
    Curve,
    Measured,
    matmul_tflops,
    mem_bw_gbs,
    op_parts,
    step_time,
)
from launcher.config.compose import compose_config
from launcher.perf import preset_fit
from launcher.perf.compute_term import shaped_mfu
from launcher.perf.plan_table import from_presets_forecast, work_of

H200 = "NVIDIA H200"
CURVE, FP8_CURVE = Curve(0.6, 300), Curve(0.5, 500)
WIDTHS = {  # fp8_speedup's three shapes on one H200
    768: ["model=gpt_125m", "batch.micro=8"],
    2048: ["model=gpt_1_3b", "batch.micro=4"],
    4096: ["model=llama3_8b", "model.n_layers=4", "model.seq_len=4096", "batch.micro=2"],
}


@pytest.mark.parametrize("model", ["tiny_gpt", "tiny_llama", "mlp", "gpt_125m", "llama3_8b"])
@pytest.mark.parametrize("ckpt", ["none", "selective", "op", "full"])
def test_the_op_lists_flops_sum_to_the_hardware_flops(model, ckpt):
    m = dataclasses.replace(compose_config([f"model={model}"], None).model, activation_checkpointing=ckpt)
    ops = flops.model_ops(m, tokens=1024, tp=2 if m.n_heads % 2 == 0 else 1)
    assert sum(op.flops for op in ops) == pytest.approx(flops.hardware_flops_per_token(m), rel=1e-12)


def test_a_moes_op_list_prices_its_active_experts():
    m = compose_config(["model=tiny_moe"], None).model
    ops = {op.name: op for op in flops.model_ops(m, tokens=1024)}
    assert sum(op.flops for op in ops.values()) == pytest.approx(flops.hardware_flops_per_token(m), rel=1e-9)
    # Each expert sees the tokens routed to it: experts_per_token of n_experts of the micro-batch's.
    assert ops["expert_w1"].m == 1024 * m.experts_per_token // m.n_experts


def test_the_op_list_of_a_small_gpt_split_by_tensor_parallel():
    m = compose_config(["model=tiny_gpt"], None).model
    d, f, v = m.d_model, flops.ffn_width(m), m.vocab_size
    ops = {op.name: op for op in flops.model_ops(m, tokens=512, tp=2)}
    assert [(o.name, o.priced) for o in ops.values()] == [
        ("qkv", "matmul"),
        ("proj", "matmul"),
        ("fc1", "matmul"),
        ("fc2", "matmul"),
        ("attention", "attention"),
        ("elementwise", "memory"),
        ("head", "matmul"),
        ("loss", "memory"),
    ]
    assert (ops["qkv"].m, ops["qkv"].n, ops["qkv"].k) == (512, 3 * d // 2, d)
    assert (ops["fc2"].m, ops["fc2"].n, ops["fc2"].k) == (512, d, f // 2)
    assert (ops["head"].n, ops["head"].k) == (v // 2, d)
    assert ops["attention"].k == d // m.n_heads and ops["attention"].n == m.seq_len
    assert ops["qkv"].flops == 6 * 3 * d * d * m.n_layers  # forward and backward's two, every layer, all of tp's
    assert ops["loss"].nbytes == LOSS_BYTES["torch"] * v + flops.ACT_BYTES * 5 * d  # the built-in trainer's loss


def test_the_rate_rises_with_width_and_saturates_below_the_peak():
    """bf16 at e_max times the GEMM's shape share (gemm_shape: the reduction's and the output's terms), fp8 on the
    curve by its smallest dimension. Fails if bf16 is priced on the curve (8192 × 16384 × 16384: 0.985 of e_max
    by gemm_share, 0.965 by the curve at s_half 300)."""
    rates = [matmul_tflops(H200, 8192, d, d, "bf16", curve=CURVE) for d in (256, 768, 2048, 4096, 16384)]
    assert rates == sorted(rates) and len(set(rates)) == 5
    assert rates[-1] < 989.5 * CURVE.e_max
    assert rates[-1] == pytest.approx(989.5 * CURVE.e_max * gemm_share(8192, 16384, 16384))
    assert matmul_tflops(H200, 8192, 16384, 16384, "fp8", curve=CURVE) == pytest.approx(
        1979 * CURVE.efficiency(8192, 16384, 16384)
    )
    # A skinny matmul is under the roofline: 2mnk FLOPs over its operands' bytes at 4.8 TB/s.
    assert matmul_tflops(H200, 8192, 8192, 8, "bf16", curve=Curve(1.0, 0)) == pytest.approx(
        2 * 8192 * 8192 * 8 / (2 * (8192 * 8 + 8 * 8192 + 8192 * 8192)) * 4800e9 / 1e12
    )


def test_memory_bandwidth_per_device_from_the_datasheets():
    assert mem_bw_gbs("NVIDIA H200") == 4800
    assert mem_bw_gbs("NVIDIA H100 80GB HBM3") == 3350
    assert mem_bw_gbs("NVIDIA H100 PCIe") == 2000
    assert mem_bw_gbs("NVIDIA A100-SXM4-80GB") == 2039
    assert mem_bw_gbs("NVIDIA A100-SXM4-40GB") == 1555
    assert mem_bw_gbs("NVIDIA B200") == 8000 and mem_bw_gbs("NVIDIA GB200") == 8000
    assert mem_bw_gbs("AMD Instinct MI300X") == 5300
    assert mem_bw_gbs("Some GPU") is None


def _seconds_and_mfu(width: int, precision: str) -> tuple[float, float]:
    """(seconds per token, model-FLOPs MFU against the precision's own peak) on one H200."""
    over = [*WIDTHS[width], "cluster.device=cuda", f"cluster.device_name={H200}", f"precision={precision}"]
    cfg = compose_config(over, None)
    work = work_of(cfg)
    t = step_time(
        cfg.model, micro_batch=cfg.batch.micro, device=H200, dtype=work.dtype, curve=CURVE, fp8_curve=FP8_CURVE
    )
    return t.total_s, work.model_flops / (work.peak.flops * t.total_s)


def test_a_wide_models_predicted_mfu_is_above_a_narrow_ones():
    mfu = [_seconds_and_mfu(w, "bf16")[1] for w in WIDTHS]
    assert mfu == sorted(mfu) and mfu[2] / mfu[0] > 1.2


def test_fp8s_gain_over_bf16_grows_with_width():
    """fp8 ÷ bf16 tokens/s of one family widened (gpt_1_3b's depth, head dim 128): fp8's casts are
    memory-bound, ∝ d per token, where its matmuls' savings are ∝ d² (the H200 measured 0.90, 1.06,
    1.13 at d 768, 2048, 4096 over three models: benchmarks/results/fp8_speedup.md)."""
    gain = []
    for d in (768, 2048, 4096, 8192):
        over = ["model=gpt_1_3b", f"model.d_model={d}", f"model.n_heads={d // 128}", "batch.micro=4"]
        cfg = compose_config([*over, "cluster.device=cuda", f"cluster.device_name={H200}"], None)
        bf16, fp8 = (
            step_time(cfg.model, micro_batch=4, device=H200, dtype=p, curve=CURVE, fp8_curve=FP8_CURVE).total_s
            for p in ("bf16", "fp8")
        )
        gain.append(bf16 / fp8)
    assert gain == sorted(gain) and gain[3] - gain[0] > 0.2


def test_plan_on_presets_prices_the_recipes_ops_when_the_fit_has_curves(monkeypatch):
    fit = dataclasses.replace(preset_fit.load(), curves={"H100/bf16": [0.6, 300.0]})
    monkeypatch.setattr(preset_fit, "load", lambda path=None: fit)
    got = {}
    for width in (768, 4096):
        cfg = compose_config([*WIDTHS[width], "cluster.device=cuda", f"cluster.device_name={H200}"], None)
        forecast = from_presets_forecast(cfg, [1], assume_mfu=None)
        got[width] = forecast.table.iloc[0]["mfu"]
        assert (
            "from the recipe's operations, matmuls at e_max 0.60 fitted on H100/bf16 runs, each at its shape's share"
            in forecast.source
        )
    assert got[4096] > 1.2 * got[768]
    # --assume-mfu still sets one constant: the plan's MFU then does not depend on width.
    cfg = compose_config([*WIDTHS[768], "cluster.device=cuda", f"cluster.device_name={H200}"], None)
    assert from_presets_forecast(cfg, [1], assume_mfu=0.4).table.iloc[0]["mfu"] == pytest.approx(
        0.4 * flops.flops_per_token(cfg.model) / flops.executed_flops_per_token(cfg.model)
    )


def _parts(width: int, **how):
    cfg = compose_config([*WIDTHS[width], "cluster.device=cuda", f"cluster.device_name={H200}"], None)
    return cfg, shape_rate.step_parts(cfg.model, micro_batch=cfg.batch.micro, device=H200, **how)


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_an_eager_step_moves_each_memory_bound_op_through_memory_a_compiled_one_fuses(width):
    """Eager, each norm, add, activation and autocast cast is a kernel of its own; compiled, one kernel per
    chain between matmuls: the blocks' bytes are flops.BLOCK_PASS_BYTES' two counts, the rest the same."""
    cfg, eager = _parts(width, dtype="bf16", compiled=False)
    _, fused = _parts(width, dtype="bf16", compiled=True)
    m = cfg.model
    arch = m.arch
    d, f = m.d_model, flops.ffn_width(m)
    qk = d + flops.kv_heads(m) * (d // m.n_heads) if arch == "llama" else 0
    per_block = {c: sum(k * x for k, x in zip(flops.BLOCK_PASS_BYTES[arch, c], (d, f, qk))) for c in (False, True)}
    bw = mem_bw_gbs(H200) * 1e9 * shape_rate.MEMORY_SHARE
    assert eager.memory_s - fused.memory_s == pytest.approx(m.n_layers * (per_block[False] - per_block[True]) / bw)
    assert per_block[False] > 2 * per_block[True]
    assert (eager.matmuls, eager.attention_s) == (fused.matmuls, fused.attention_s)


def test_the_plan_prices_train_compile():
    """gpt_125m on one H200 ran 14% slower eager than compiled (gpu_smoke.json: MFU 0.280 and 0.325): the
    plan's step is slower eager by the bytes the fused kernels do not move."""
    fit = dataclasses.replace(preset_fit.load(), curves={"H100/bf16": [0.6, 300.0]})
    mfu = {}
    for compiled in ("true", "false"):
        over = [*WIDTHS[768], "cluster.device=cuda", f"cluster.device_name={H200}", f"train.compile={compiled}"]
        cfg = compose_config(over, None)
        w = work_of(cfg)
        mfu[compiled] = shaped_mfu(cfg, executed_flops=w.executed_flops, peak_flops=w.peak.flops, dtype="bf16", fit=fit)
    assert 1.05 < mfu["true"][0] / mfu["false"][0] < 1.2
    _, fused = _parts(768, dtype="bf16", compiled=True, optimizer="adamw", tokens_per_step=8 * 2048)
    _, eager = _parts(768, dtype="bf16", compiled=False, optimizer="adamw", tokens_per_step=8 * 2048)
    assert mfu["true"][0] / mfu["false"][0] == pytest.approx(
        eager.seconds(Curve(0.6, 300)).total_s / fused.seconds(Curve(0.6, 300)).total_s
    )


@pytest.mark.parametrize("compiled", [False, True])
def test_a_transformer_engine_fp8_step_has_no_cast_passes_of_its_own(compiled):
    """TE writes the fp8 copy from the kernel that made the tensor (delayed scaling): beside bf16 its step
    moves only the weights' casts; torchao's dynamic scaling reads each operand for its amax and casts it."""
    _, bf16 = _parts(4096, dtype="bf16", compiled=compiled)
    _, te = _parts(4096, dtype="fp8", compiled=compiled, fp8_stack="te")
    _, torchao = _parts(4096, dtype="fp8", compiled=compiled, fp8_stack="torchao")
    cfg = compose_config(WIDTHS[4096], None)
    ops = flops.model_ops(cfg.model, tokens=2 * 4096)
    weights = sum(op.flops / 6 for op in ops if op.priced == "matmul" and op.fp8)
    elements = sum((op.k + op.n) * op.flops / (2 * op.n * op.k) for op in ops if op.priced == "matmul" and op.fp8) / 3
    bw = mem_bw_gbs(H200) * 1e9 * shape_rate.MEMORY_SHARE
    assert te.memory_s - bf16.memory_s == pytest.approx(fp8_casts.FP8_WEIGHT_BYTES["te"] * weights / (2 * 4096) / bw)
    weight_casts = (fp8_casts.FP8_WEIGHT_BYTES["torchao"] - fp8_casts.FP8_WEIGHT_BYTES["te"]) * weights / (2 * 4096)
    assert torchao.memory_s - te.memory_s == pytest.approx(
        (fp8_casts.FP8_CAST_BYTES["torchao"] * elements + weight_casts) / bw
    )
    assert fp8_casts.FP8_CAST_BYTES == {"torchao": 6, "te": 0}
    with pytest.raises(ValueError, match="fp8 stack 'mxfp8' is not one of torchao, te"):
        _parts(4096, dtype="fp8", fp8_stack="mxfp8")


def test_a_torchao_step_moves_the_bytes_of_torchaos_compiled_cast_kernels():
    """torchao 0.17's tensorwise Float8Linear under torch.compile, counted by hand from its source (shape_rate's
    comment cites the lines): input and grad_output each an amax read (bf16, 2 B) and one cast kernel reading
    2 B and writing fp8 in both layouts the three GEMMs need (1 B + 1 B); the weight an amax read and two casts
    (forward, and transposed in backward), 2 + 3 + 3. The old pricing, 8 B per input and grad_output element
    and 6 per weight, counted a separate transposed copy and one weight cast fewer."""
    activation = 2 + (2 + 1 + 1)  # amax; cast read, row-major and column-major fp8 writes
    weight = 2 + (2 + 1) + (2 + 1)  # amax; forward cast; backward cast, transposed
    assert {r: sum(map(sum, k)) for r, k in fp8_casts.TORCHAO_CAST_PASSES.items()} == {
        "input": activation,
        "grad_output": activation,
        "weight": weight,
    }
    assert (fp8_casts.FP8_CAST_BYTES["torchao"], fp8_casts.FP8_WEIGHT_BYTES["torchao"]) == (6, 8)
    # gpt_125m (d 768, 12 layers, micro 8 × 2048 tokens) on one H200: per layer and token the four linears'
    # inputs and output gradients are (768 + 2304) + (768 + 768) + (768 + 3072) + (3072 + 768) = 12,288
    # elements, their weights 7,077,888 cast once per micro-step of 16,384 tokens.
    _, bf16 = _parts(768, dtype="bf16", compiled=True)
    _, fp8 = _parts(768, dtype="fp8", compiled=True, fp8_stack="torchao")
    bw = mem_bw_gbs(H200) * 1e9 * shape_rate.MEMORY_SHARE
    per_token = 12 * (6 * 12_288 + 8 * 7_077_888 / 16_384)
    assert per_token == 926_208
    assert (fp8.memory_s - bf16.memory_s) * bw == pytest.approx(per_token, rel=1e-9)


STACK_CURVES = {"H100/bf16": [0.6, 300.0], "H100/fp8": [0.9, 0.0], "H100/fp8-te": [0.95, 0.0], "*/fp8": [1.0, 0.0]}


def _fp8_mfu(curves: dict) -> tuple[float, str]:
    fit = dataclasses.replace(preset_fit.load(), curves=curves)
    cfg = compose_config([*WIDTHS[4096], "cluster.device=cuda", f"cluster.device_name={H200}", "precision=fp8"], None)
    w = work_of(cfg)
    return shaped_mfu(cfg, executed_flops=w.executed_flops, peak_flops=w.peak.flops, dtype="fp8", fit=fit)


def test_the_launchers_fp8_plans_with_the_torchao_curve():
    """The launcher's fp8 is torchao's: its plan reads `H100/fp8-torchao`, not TE's curve nor the one over
    every stack; without a torchao curve it falls back to the device's over every stack, and says so."""
    mfu, why = _fp8_mfu(STACK_CURVES | {"H100/fp8-torchao": [0.5, 500.0]})
    assert "fp8 matmuls e_max 0.50 fitted on H100/fp8-torchao runs, s_half 500" in why
    cfg = compose_config([*WIDTHS[4096], "cluster.device=cuda", f"cluster.device_name={H200}", "precision=fp8"], None)
    w = work_of(cfg)
    t = step_time(
        cfg.model,
        micro_batch=2,
        device=H200,
        dtype="fp8",
        curve=Curve(0.6, 300),
        fp8_curve=Curve(0.5, 500),
        optimizer="adamw",
        tokens_per_step=2 * 4096,
        fp8_stack="torchao",
    )
    assert mfu == pytest.approx(w.executed_flops / (w.peak.flops * t.total_s))
    fallback, why = _fp8_mfu(STACK_CURVES)
    assert "e_max 0.90 fitted on H100/fp8 runs of every fp8 stack (H100/fp8-torchao has no curve" in why
    assert fallback > mfu
    assert preset_fit.curve_keys("H100/fp8") == ["H100/fp8-torchao", "H100/fp8", "*/fp8"]
    assert preset_fit.curve_keys("H100/fp8", "te")[0] == "H100/fp8-te"
    assert preset_fit.curve_keys("A100/bf16") == ["A100/bf16", "*/bf16"]


def test_measured_rates_stand_in_for_the_peak_table():
    """A site profile's rates (shape_rate.Measured) price the same ops: each matmul at the rate measured for its
    own (m, n, k), no roofline; the memory-bound bytes at the measured bandwidth whole (no datasheet share); the
    attention core at its measured kernel's counted rate, or FLASH_SHARE of the fastest matmul where none."""
    model = compose_config(["model=gpt_125m"]).model
    ops = model_ops(model, tokens=4096)
    rates = {}

    def matmul(m, n, k, dtype):
        rates[(m, n, k)] = 1e12 * (1 + min(m, n, k) / 1024)
        return rates[(m, n, k)]

    measured = Measured(matmul_flops=matmul, peak_flops=lambda dtype: 5e12, mem_bw_gbs=100.0)
    t = op_parts(ops, None, "bf16", extra_bytes=1e3, measured=measured).seconds(Curve(1.0, 0.0))
    mm = sum(op.flops / rates[(op.m, op.n, op.k)] for op in ops if op.priced == "matmul")
    assert t.matmul_s == pytest.approx(mm)
    assert t.memory_s == pytest.approx((1e3 + sum(op.nbytes for op in ops if op.priced == "memory")) / 100e9)
    (core,) = [op for op in ops if op.priced == "attention"]
    shape = core.k / (core.k + HEAD_DIM_HALF) * core.n / (core.n + SEQ_HALF)
    assert t.attention_s == pytest.approx(core.flops * CAUSAL_EXECUTED_SHARE / (5e12 * FLASH_SHARE * shape))
    kernel = Measured(matmul_flops=matmul, peak_flops=lambda d: 5e12, mem_bw_gbs=100.0, attention_flops=lambda *a: 2e12)
    assert op_parts(ops, None, "bf16", measured=kernel).attention_s == pytest.approx(core.flops / 2e12)


def test_an_fp8_gemm_reads_fp8_operands_and_writes_a_bf16_output_at_the_roofline():
    """torch._scaled_mm reads its two fp8 operands (1 B) and writes bf16 (2 B): the roofline's bytes are
    mk + kn + 2mn. Fails with the output counted at 1 B, as the inputs."""
    m, n, k, bw = 64, 8192, 8192, mem_bw_gbs(H200)
    assert shape_rate.roofline(H200, m, n, k, "fp8") == pytest.approx(
        2.0 * m * n * k / (m * k + k * n + 2 * m * n) * bw * 1e9
    )
    assert shape_rate.roofline(H200, m, n, k, "bf16") == pytest.approx(
        2.0 * m * n * k / (2 * (m * k + k * n + m * n)) * bw * 1e9
    )


def test_an_fp32_step_moves_its_activations_at_4_bytes_on_a_profile_and_on_presets_alike():
    """One rule, step_parts, for both paths: an fp32 step's elementwise ops move twice the bf16 bytes, the
    other memory-bound bytes as they are. Fails with the width applied only in site_profile (its old home)."""
    cfg = compose_config([*WIDTHS[768], "cluster.device=cuda", f"cluster.device_name={H200}"], None)
    ops = flops.model_ops(cfg.model, tokens=cfg.batch.micro * cfg.model.seq_len)
    elementwise = sum(op.nbytes for op in ops if op.name == "elementwise")
    bw = mem_bw_gbs(H200) * 1e9 * shape_rate.MEMORY_SHARE
    at = {
        d: shape_rate.step_parts(cfg.model, micro_batch=cfg.batch.micro, device=H200, dtype=d) for d in ("bf16", "fp32")
    }
    assert elementwise > 0
    assert at["fp32"].memory_s - at["bf16"].memory_s == pytest.approx(elementwise / bw, rel=1e-9)


def test_under_tensor_parallel_torchaos_float8_styles_cast_the_gathered_operands_on_their_shard():
    """torchtitan's float8 TP styles (shape_rate's comment cites them) cast the attention's and the feed-forward's
    inputs once on their sequence shard and all-gather them in fp8, and so the row-parallel layers' output
    gradients; the gathered tensor's other layout is a 1 B + 1 B copy. Counted by hand for llama3_8b's shape
    (4 layers, 2 × 4096 tokens a micro-batch) at tp 2, per token over the tp group and per layer."""
    d, kv, f, tp = 4096, 1024, 14336, 2
    gathered = 4 * (5 + 2 * tp) * d  # attention input, feed-forward input, wo's and w2's output gradients
    local = 6 * ((d + 2 * kv) + d + 2 * f + f)  # q, k, v gradients; wo's input; w1, w3 gradients; w2's input
    weights = 8 * (d * (d + 2 * kv) + d * d + 3 * d * f) / (2 * 4096)
    bw = mem_bw_gbs(H200) * 1e9 * shape_rate.MEMORY_SHARE
    _, bf16 = _parts(4096, dtype="bf16", compiled=True, tp=tp)
    _, fp8 = _parts(4096, dtype="fp8", compiled=True, tp=tp)
    assert (fp8.memory_s - bf16.memory_s) * bw == pytest.approx(4 * (gathered + local + weights), rel=1e-9)
    # Without tensor parallel each layer casts its own whole input, as before: 6 B an element.
    _, one = _parts(4096, dtype="fp8", compiled=True, tp=1)
    _, one_bf16 = _parts(4096, dtype="bf16", compiled=True, tp=1)
    whole = 6 * ((3 * d + d + 2 * d + f) + ((d + 2 * kv) + d + 2 * f + d))
    assert (one.memory_s - one_bf16.memory_s) * bw == pytest.approx(4 * (whole + weights), rel=1e-9)
