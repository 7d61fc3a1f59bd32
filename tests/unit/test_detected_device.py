"""MFU is measured against the GPU torch detects: when `cluster.device_name` names a device of other
peaks (the bundled example site says A100; the run is on an H100), the detected device's peak wins,
and the mismatch is one line under the table; `launcher plan`, which runs nothing, does not assume
the named device's fitted MFU when only the peak is overridden."""

from __future__ import annotations

import io

import pandas as pd
import pytest
import torch
from rich.console import Console

from launcher.compute import peaks
from launcher.config.compose import compose_config
from launcher.perf import preset_fit
from launcher.perf.plan import from_presets_forecast
from launcher.report.terminal import print_table
from launcher.results.policy import Recommendation
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS, trial_row
from launcher.train import measure
from tests.support.report import write_test_report

pytestmark = pytest.mark.usefixtures("one_mfu_presets")  # pins the one-MFU presets (conftest)

H100 = "NVIDIA H100 80GB HBM3"
SITE = ["cluster=example_gpu_site", "precision=bf16"]  # device_name A100-80GB, peak 3.12e14 (A100 bf16)


@pytest.fixture
def on_gpu(monkeypatch):
    """torch reports `name` for every GPU (no GPU needed)."""

    def detect(name: str) -> torch.device:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        return torch.device("cuda", 0)

    return detect


def test_the_detected_h100_peak_wins_over_the_sites_a100_and_says_so(on_gpu):
    gpu = on_gpu(H100)
    choice = measure.peak_of(compose_config(SITE), gpu)
    assert (choice.flops, choice.device) == (989.4e12, "H100 SXM5")
    assert choice.source.startswith("H100 SXM5 dense bf16: ")
    assert choice.mismatch == (
        "device mismatch: cluster.device_name='A100-80GB' but torch detected 'NVIDIA H100 80GB HBM3': "
        "MFU uses the H100 SXM5 dense bf16 peak 9.89e+14, not cluster.peak_flops_per_device=3.12e+14; "
        "set cluster.device_name to the device that runs"
    )
    # Without the site's explicit peak the table's A100 figure would have been taken the same way.
    bare = measure.peak_of(compose_config([*SITE, "cluster.peak_flops_per_device=null"]), gpu)
    assert (bare.flops, bare.mismatch.split(":")[0]) == (989.4e12, "device mismatch")


def test_a_name_of_the_same_device_or_an_unknown_gpu_keeps_the_configured_peak(on_gpu):
    # A100-80GB and A100-SXM4-80GB share their peaks: the site's explicit figure stands, nothing to say.
    same = measure.peak_of(compose_config(SITE), on_gpu("NVIDIA A100-SXM4-80GB"))
    assert (same.flops, same.source, same.mismatch) == (3.12e14, "cluster.peak_flops_per_device", None)
    # A GPU the table does not know: the configured peak is all there is, and the line says so.
    unknown = measure.peak_of(compose_config(SITE), on_gpu("NVIDIA L40"))
    assert unknown.flops == 3.12e14
    assert unknown.mismatch == (
        "device mismatch: cluster.device_name='A100-80GB' but torch detected 'NVIDIA L40', which the peak "
        "table does not know: MFU uses cluster.peak_flops_per_device=3.12e+14 as configured"
    )
    # The recipe's default name ("cpu") says nothing about the GPU: the detected one is taken silently.
    default = measure.peak_of(compose_config(["precision=bf16"]), on_gpu(H100))
    assert (default.flops, default.mismatch) == (989.4e12, None)


def _record_row(on_gpu, name: str) -> dict:
    """A results row built from the record fields the payload writes on a GPU torch calls `name`."""
    gpu = on_gpu(name)
    cfg = compose_config(SITE)
    metrics = {
        "tokens_per_s": 1000.0,
        "mfu": 0.3,
        **measure.precision_metrics(cfg, gpu, measure.peak_of(cfg, gpu), timing="cuda_events"),
    }
    assert metrics["cuda_device_name"] == name
    trial = {"trial_id": "000-ws1", "world_size": 1, "nodes": 1, "layout": "ddp", "scaling": "weak"}
    return trial_row(trial, {"status": "completed", "reason": None, "metrics": metrics}, None)


def test_the_mismatch_is_one_line_under_the_terminal_table_and_in_report_md(on_gpu, tmp_path):
    row = _record_row(on_gpu, H100)
    df = add_scaling(pd.DataFrame([row, {**row, "trial_id": "001-ws2", "world_size": 2}]).reindex(columns=COLUMNS))
    console = Console(width=400, record=True, file=io.StringIO())
    print_table(df, Recommendation(world_size=1, reason="a test"), title="t", console=console)
    text = console.export_text()
    lines = [line for line in text.splitlines() if "device mismatch" in line]
    assert lines == ["MFU " + row["peak_mismatch"]]  # once, for both trials
    assert text.index("device mismatch") > text.index("└")  # under the table
    write_test_report(df, tmp_path, world_size=1)
    md = (tmp_path / "report.md").read_text()
    assert md.count("MFU device mismatch: cluster.device_name='A100-80GB'") == 1
    # The run on the device the site names has nothing to say.
    clean = _record_row(on_gpu, "NVIDIA A100-SXM4-80GB")
    assert clean["peak_mismatch"] is None


def test_plan_does_not_assume_the_named_devices_mfu_for_a_peak_that_is_not_its_own():
    fit = preset_fit.load()
    a100, _ = fit.mfu_for("A100-80GB", "bf16")
    assert a100 != fit.mfu_any_device
    # The site as shipped: its peak is the A100's own bf16 figure, so the A100 fit applies.
    assert f"× MFU {a100:.2f} (fitted on " in from_presets_forecast(compose_config(SITE), [8], assume_mfu=None).source
    # Only the peak overridden, to a figure within 2× of the A100's (so no precision mismatch is flagged):
    # the device's own fit no longer applies, and the footer says why.
    cfg = compose_config([*SITE, "cluster.peak_flops_per_device=5e14"])
    assert peaks.choose_peak(device_name="A100-80GB", dtype="bf16", explicit=5e14).mismatch is None
    assert (
        f"A100-80GB at 5e+14 FLOP/s (bf16) × MFU {fit.mfu_any_device:.2f} (fitted on {fit.rows} published runs of "
        "every device; cluster.peak_flops_per_device is not A100-80GB's, so no device's own fit applies)"
    ) in from_presets_forecast(cfg, [8], assume_mfu=None).source
    # A rounded figure of the A100's own peak still is the A100's.
    near = compose_config([*SITE, "cluster.peak_flops_per_device=3.1e14"])
    assert f"× MFU {a100:.2f} (fitted on " in from_presets_forecast(near, [8], assume_mfu=None).source
