"""A finished `launcher run` (real local processes) says what happened: its figures, checkpoints
and logs."""

from __future__ import annotations

import re

import pytest

from launcher.io import read_json
from tests.support.cli import launch_printed


@pytest.mark.torch_dist
def test_run_prints_its_figures_checkpoints_and_logs(tmp_path):
    rc, out = launch_printed(
        [
            "run",
            "run.world_size=2",
            "run.steps=4",
            "run.warmup_steps=1",
            "run.checkpoint_every=2",
            f"sweep.results_dir={tmp_path}",
            "sweep.name=one",
            "--quiet",
        ]
    )
    assert rc == 0, out
    tdir = tmp_path / "one" / "trials" / "000-ws2"
    metrics = read_json(tdir / "record.json")["metrics"]
    assert "Recommended world size" not in out and "the only size that completed" not in out
    assert out.startswith("run one: completed — tiny_gpt, ddp, 2 ranks on 1 node (cluster local)\n")
    for label, text in [
        ("steps", "4 (3 measured after 1 warm-up)"),
        ("tokens/s", f"{metrics['tokens_per_s']:,.0f} ({metrics['tokens_per_s_per_device']:,.0f} per device)"),
        ("step time", f"{metrics['step_time_median_s']:.4f} s median"),
        ("final loss", f"{metrics['loss_last']:.4f}"),
        ("mfu", "— (set cluster.peak_flops_per_device)"),
        ("$ per 1M tok", "— (set cluster.usd_per_device_hour)"),
    ]:
        assert re.search(rf"^  {re.escape(label)} +{re.escape(text)}", out, re.M), (label, out)
    assert re.search(rf"^checkpoints: {re.escape(str(tdir))}/checkpoint/step-\d+ \(latest, step \d+\)$", out, re.M)
    assert f"logs: {tdir}/ rank0.log, rank1.log\n" in out
    assert f"record: {tdir}/record.json; report: {tmp_path / 'one'}/report.md, report.html\n" in out
