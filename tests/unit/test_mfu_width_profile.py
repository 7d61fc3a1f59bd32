"""benchmarks.mfu_width's section on a GPU's own measured profile (issue 32 item 2: where a GPU is lent, its
profile): the H200 rows priced as `launcher plan cluster.profile=…` prices them, or a line saying no profile was
measured. The profile here is a literal document in the schema `launcher profile` writes (no GPU in the tests)."""

from __future__ import annotations

import json

import pytest

from benchmarks import mfu_width
from launcher.compute.flops import model_ops
from launcher.perf.plan_table import work_of
from launcher.train.profile_plan import SCHEMA, SCHEMA_VERSION

RESULTS = mfu_width.HERE / "results"


def gpu_profile(tmp_path, *, bf16_tflops: float, fp8_tflops: float) -> str:
    """One H200 rank's profile whose matmuls run at one rate per dtype, with memory and attention so fast (and a
    per-op cost so small) that a step is its matmuls alone."""
    doc = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "device": {"name": "NVIDIA H200", "type": "cuda", "threads_per_rank": 1},
        "ranks": 1,
        "nodes": 1,
        "ranks_per_node": 1,
        "hosts": ["gpu1"],
        "matmul": {
            "bf16": [{"m": 4096, "n": 4096, "k": 4096, "tflops": bf16_tflops}],
            "fp8": [{"m": 4096, "n": 4096, "k": 4096, "tflops": fp8_tflops}],
        },
        "attention": {"bf16": [{"seq": 2048, "head_dim": 128, "tflops": 1e9}]},
        "mem_bw_gbs": 1e12,
        "op_us": 1e-9,
        "scopes": {},
        "collectives": {},
        "skipped": [],
        "torch": "2.11.0+cu130",
        "measured_at": "2026-11-29T18:00:00Z",
    }
    path = tmp_path / "gpu_profile.json"
    path.write_text(json.dumps(doc))
    return path


def matmul_bound_mfu(shape: str, precision: str, profile, tflops: float) -> float:
    """The MFU of a step that is only its matmuls, all at `tflops`: model FLOPs over peak × matmul seconds, the
    matmuls summed from the op model (fp8's linear layers and bf16's head each at its own dtype's rate)."""
    cfg = mfu_width.run_config(shape, precision, "compiled", f"cluster.profile={profile}")
    work = work_of(cfg)
    tokens = cfg.batch.micro * cfg.model.seq_len
    ops = [op for op in model_ops(cfg.model, tokens=tokens, compiled=True) if op.priced == "matmul"]
    seconds = sum(op.flops for op in ops) / (tflops * 1e12)
    return work.model_flops / (work.peak.flops * seconds)


@pytest.mark.parametrize("shape", ["gpt_125m", "llama3_8b_4_layers"])
def test_each_row_is_priced_at_the_profiles_measured_rates_not_the_fit(tmp_path, shape):
    """Fails if the section priced the rows from the published fit (bf16: gpt_125m 0.311 and llama 0.381 there,
    0.528 and 0.443 from this profile), or the profile's matmuls at anything but their measured rate."""
    profile = gpu_profile(tmp_path, bf16_tflops=400.0, fp8_tflops=800.0)
    got = mfu_width.profile_predicted(shape, "bf16", profile)
    assert got == pytest.approx(matmul_bound_mfu(shape, "bf16", profile, 400.0), rel=1e-3)
    half = gpu_profile(tmp_path, bf16_tflops=200.0, fp8_tflops=800.0)
    assert mfu_width.profile_predicted(shape, "bf16", half) == pytest.approx(got / 2, rel=1e-3)


def test_the_report_scores_every_measured_row_from_the_profile_or_says_none_was_measured(tmp_path):
    """The benchmark run as mfu_width --profile P: one table row per measured H200 run (7) in the report's profile
    section, each against the ±10% goal; without the file, one line that says how to measure it. Fails if a row is
    dropped, the section is left out of the report, or a missing profile raises."""
    profile = gpu_profile(tmp_path, bf16_tflops=400.0, fp8_tflops=800.0)
    mfu_width.main(["--profile", str(profile), "--out", str(tmp_path)])  # exits 1 while the fit's rows miss
    report = (tmp_path / "mfu_width.md").read_text().split("## From the GPU's own measured profile")[1]
    rows = [line for line in report.splitlines() if line.startswith(("| gpt_", "| llama"))]
    assert len(rows) == len(mfu_width.measured(RESULTS)) == 7
    assert "From the profile, every width within 10%: " in report
    missing = mfu_width.profile_lines(tmp_path / "absent.json", RESULTS)
    assert any("Not measured: no absent.json" in line and "launcher profile --ranks 1" in line for line in missing)
