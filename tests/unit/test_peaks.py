"""The peak table and the precision that MFU is measured against: device names as torch reports
them, an explicit peak that does not fit the precision flagged in the report, unknown → null."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from launcher.compute import peaks
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.validate import validate
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS, peak_mismatch_line, trial_row
from launcher.train import measure, metrics
from tests.support.report import write_test_report

REQUIRED = ["A100 SXM4", "A100 PCIe", "H100 SXM5", "H100 PCIe", "H200 SXM", "B200 (HGX)", "L40S", "MI300X"]


def test_every_required_device_has_a_row_with_a_named_vendor_source():
    rows = {row.device: row for row in peaks.PEAKS}
    assert set(REQUIRED) <= set(rows)
    for row in rows.values():
        # Tensor-core rates rank bf16 ≥ tf32 ≥ plain fp32, and the document is named.
        assert row.bf16 >= row.tf32 >= row.fp32 > 0, row.device
        assert ("NVIDIA" in row.source or "AMD" in row.source) and any(
            w in row.source.lower() for w in ("datasheet", "data sheet", "whitepaper", "specifications")
        ), row.source


@pytest.mark.parametrize(
    "name, row",
    [
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("A100-80GB", "A100"),
        ("a100-sxm4-80gb", "A100 SXM4"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
        ("H100-SXM5-80GB", "H100 SXM5"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA B200", "B200 (HGX)"),
        ("NVIDIA L40S", "L40S"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_names_as_torch_reports_them_find_their_row(name, row):
    assert peaks.find_device(name).device == row


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "unknown",
        "auto",
        "",
        None,
        "H100",
        "NVIDIA L40",
        "NVIDIA GB300",
        "NVIDIA GH200 480GB",
        "AMD Instinct MI300A",
        "Tesla V100-SXM2-16GB",
    ],
)
def test_a_device_the_table_does_not_know_has_no_peak_and_no_mfu(name):
    """A bare "H100" could be SXM (989 TF) or PCIe (756 TF); GB300's B300 runs hotter than HGX's: no guess."""
    choice = peaks.choose_peak(device_name=name, dtype="bf16", explicit=None)
    assert (choice.flops, choice.source, choice.mismatch) == (None, None, None)
    assert metrics.mfu(tokens_per_s=1e5, flops_per_token=6e8, peak_flops_per_device=choice.flops, devices=1) is None


def test_the_peak_follows_the_precision_matmuls_ran_in():
    h100 = "NVIDIA H100 80GB HBM3"
    assert peaks.choose_peak(device_name=h100, dtype="bf16", explicit=None).flops == 989.4e12
    assert peaks.choose_peak(device_name=h100, dtype="fp16", explicit=None).flops == 989.4e12
    assert peaks.choose_peak(device_name=h100, dtype="tf32", explicit=None).flops == 494.7e12
    assert peaks.choose_peak(device_name=h100, dtype="fp32", explicit=None).flops == 66.9e12
    source = peaks.choose_peak(device_name=h100, dtype="bf16", explicit=None).source
    assert source.startswith("H100 SXM5 dense bf16: NVIDIA H100")


def test_precision_auto_is_bf16_on_cuda_and_fp32_on_cpu_and_fp32_on_cuda_means_tf32():
    assert peaks.resolve_precision("auto", "cuda") == "bf16"
    assert peaks.resolve_precision("auto", "cpu") == "fp32"
    assert peaks.resolve_precision("fp16", "cuda") == "fp16" and peaks.resolve_precision("bf16", "cpu") == "bf16"
    assert peaks.math_dtype("fp32", tf32=True) == "tf32" and peaks.math_dtype("fp32", tf32=False) == "fp32"
    assert peaks.math_dtype("bf16", tf32=True) == "bf16"


def test_an_explicit_peak_wins_and_one_that_does_not_fit_the_precision_is_flagged():
    h100 = "NVIDIA H100 80GB HBM3"
    fits = peaks.choose_peak(device_name=h100, dtype="bf16", explicit=9.89e14)
    assert (fits.flops, fits.source, fits.mismatch) == (9.89e14, "cluster.peak_flops_per_device", None)
    # H100's bf16 peak for an fp32 run (TF32 matmuls, 494.7 TF): exactly 2× off, and the bf16 figure.
    wrong = peaks.choose_peak(device_name=h100, dtype="tf32", explicit=9.89e14)
    assert wrong.flops == 9.89e14
    assert wrong.mismatch.startswith(
        "peak/precision mismatch: cluster.peak_flops_per_device=9.89e+14 (the H100 SXM5 "
        "bf16 peak) but the trials' matmuls ran in tf32 on H100 SXM5"
    )
    assert "\n" not in wrong.mismatch
    # Plain fp32 (no TF32, e.g. ROCm): 15× off.
    assert peaks.choose_peak(device_name=h100, dtype="fp32", explicit=9.89e14).mismatch is not None
    # More than 2× off without matching another row's figure.
    assert peaks.choose_peak(device_name="NVIDIA A100-SXM4-80GB", dtype="bf16", explicit=1e15).mismatch is not None
    # Close enough (a rounded or boost-clock figure) is no mismatch; an unknown device is never judged.
    assert peaks.choose_peak(device_name="NVIDIA A100-SXM4-80GB", dtype="bf16", explicit=3e14).mismatch is None
    assert peaks.choose_peak(device_name="cpu", dtype="fp32", explicit=9.89e14).mismatch is None


def test_on_cpu_no_table_row_applies_even_under_a_gpu_name():
    cpu = torch.device("cpu")
    named = compose_config(["cluster.device_name=NVIDIA H100 80GB HBM3", "precision=fp32"])
    assert measure.peak_of(named, cpu).flops is None
    explicit = compose_config(["cluster.device_name=NVIDIA H100 80GB HBM3", "cluster.peak_flops_per_device=1e12"])
    assert measure.peak_of(explicit, cpu) == peaks.PeakChoice(
        flops=1e12, source="cluster.peak_flops_per_device", device=None, mismatch=None
    )
    assert measure.matmul_dtype(named, cpu) == "fp32"


def test_config_accepts_auto_and_refuses_a_peak_beyond_any_device():
    assert compose_config(["precision=auto"]).precision == "auto"
    with pytest.raises(ConfigError, match=r"cluster.peak_flops_per_device=8e\+17 is more than any one device"):
        validate(compose_config(["cluster.peak_flops_per_device=8e17"]))
    validate(compose_config(["cluster.peak_flops_per_device=2.25e15"]))


RECORD_METRICS = {
    "tokens_per_s": 1000.0,
    "mfu": 0.2,
    "precision": "fp32",
    "peak_flops_per_device": 9.89e14,
    "peak_source": "cluster.peak_flops_per_device",
    "peak_mismatch": "peak/precision mismatch: x",
}


def test_the_table_carries_precision_and_peak_and_its_footer_flags_a_mismatch():
    trial = {"trial_id": "000-ws1", "world_size": 1, "nodes": 1, "layout": "ddp", "scaling": "weak"}
    row = trial_row(trial, {"status": "completed", "reason": None, "metrics": RECORD_METRICS}, None)
    assert {k: row[k] for k in ("precision", "peak_flops_per_device", "peak_source", "peak_mismatch")} == {
        k: RECORD_METRICS[k] for k in ("precision", "peak_flops_per_device", "peak_source", "peak_mismatch")
    }
    df = pd.DataFrame([row, {**row, "trial_id": "001-ws2"}]).reindex(columns=COLUMNS)
    assert peak_mismatch_line(df) == "MFU peak/precision mismatch: x"  # one line for the same note twice
    assert peak_mismatch_line(df.assign(peak_mismatch=None)) is None


def test_report_md_and_html_show_the_mismatch_line_under_the_table(tmp_path):
    rows = [
        {
            "trial_id": f"00{i}-ws{n}",
            "variant": None,
            "world_size": n,
            "repeat": 0,
            "status": "completed",
            "scaling": "weak",
            "tokens_per_s": 1000.0 * n,
            "mfu": 0.1,
            "peak_mismatch": "peak/precision mismatch: x",
        }
        for i, n in enumerate((1, 2))
    ]
    df = add_scaling(pd.DataFrame(rows).reindex(columns=COLUMNS))
    write_test_report(df, tmp_path, world_size=2)
    md = (tmp_path / "report.md").read_text()
    assert md.count("MFU peak/precision mismatch: x") == 1
    table_end = md.rindex("| 2 |")
    assert md.index("MFU peak/precision mismatch: x") > table_end
    assert "MFU peak/precision mismatch: x" in (tmp_path / "report.html").read_text()
    clean = df.assign(peak_mismatch=None)
    write_test_report(clean, tmp_path, world_size=2)
    assert "mismatch" not in (tmp_path / "report.md").read_text()
