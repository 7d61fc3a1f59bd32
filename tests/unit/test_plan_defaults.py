"""`launcher plan`'s silent defaults made loud (issue 31, item 8): a GPU planned on the local cluster
(one device per node) is refused naming `cluster=`, and `cluster.device_name` on the command line
sets the peak and the fitted MFU unless `cluster.peak_flops_per_device` is given there too."""

from __future__ import annotations

import pandas as pd
import pytest

from launcher.cli import main
from launcher.compute.peaks import find_device
from launcher.perf import preset_fit

pytestmark = pytest.mark.usefixtures("one_mfu_presets")  # pins the one-MFU presets (conftest)


def test_a_gpu_on_the_local_cluster_is_one_line_naming_cluster(capsys):
    """Fails without plan.check_nodes: the plan exits 0 with 64 GPUs as 64 one-GPU nodes."""
    assert main(["plan", "model=gpt_1_3b", "cluster.device_name=H100-SXM", "--gpus", "64"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "launcher: error: launcher plan --gpus 64 of cluster.device_name=H100-SXM plans 64 GPUs as 64 one-GPU "
        "nodes (cluster=local: one device per node); name your site's cluster, e.g. cluster=example_gpu_site, "
        "or set cluster.gpus_per_node\n"
    )
    # The same refusal before a search spends its time on 64 nodes.
    assert main(["plan", "--search", "model=gpt_1_3b", "cluster.device_name=H100-SXM", "--gpus", "8,64"]) == 2
    assert "plans 64 GPUs as 64 one-GPU nodes (cluster=local" in capsys.readouterr().err


def test_the_local_cluster_still_plans_what_it_describes(tmp_path):
    """One GPU, or GPUs per node said: nothing to refuse (fails if check_nodes refused every local GPU plan)."""
    base = ["plan", "model=gpt_1_3b", "cluster.device_name=H100-SXM"]
    assert main([*base, "--gpus", "1"]) == 0
    out = tmp_path / "plan.csv"
    assert main([*base, "cluster.gpus_per_node=8", "--gpus", "8,16", "--output", str(out)]) == 0
    assert pd.read_csv(out)["nodes"].tolist() == [1, 2]


def test_device_overrides_null_the_recipes_peak_only_when_the_command_line_names_no_peak():
    """Fails if device_overrides ignored either key, or a `+`/`++` spelling of it."""
    from launcher.perf.plan import device_overrides  # here: the other tests run on the code before it

    assert device_overrides(["cluster=example_gpu_site", "cluster.device_name=H100-SXM"]) == [
        "cluster=example_gpu_site",
        "cluster.device_name=H100-SXM",
        "cluster.peak_flops_per_device=null",
    ]
    given = ["cluster.device_name=H100-SXM", "++cluster.peak_flops_per_device=8e14"]
    assert device_overrides(given) == given
    assert device_overrides(["cluster=example_gpu_site"]) == ["cluster=example_gpu_site"]


def test_device_name_on_the_command_line_sets_the_peak_and_the_fitted_mfu(tmp_path, capsys):
    """example_gpu_site's recipe says peak 3.12e14 (its A100); naming an H100 on the command line plans
    at the H100's table peak and its fitted MFU. Fails without plan.device_overrides in main: the A100
    peak stays, the every-device MFU is assumed and the H100 plan comes out ~3x slow."""
    fit = preset_fit.load()
    h100 = find_device("H100-SXM")
    mfu, said = fit.mfu_for("H100-SXM", "bf16")
    base = ["plan", "model=gpt_1_3b", "cluster=example_gpu_site", "cluster.device_name=H100-SXM"]
    named, explicit = tmp_path / "named.csv", tmp_path / "explicit.csv"
    assert main([*base, "--gpus", "8", "--output", str(named)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"H100-SXM at {h100.bf16:.3g} FLOP/s (bf16) × MFU {mfu:.2f} ({said})" in out
    assert main([*base, "cluster.peak_flops_per_device=null", "--gpus", "8", "--output", str(explicit)]) == 0
    row, same = pd.read_csv(named).iloc[0], pd.read_csv(explicit).iloc[0]
    assert row["tokens_per_s"] == same["tokens_per_s"]
    assert row["mfu"] == pytest.approx(row["tokens_per_s_per_device"] * 9.08e9 / h100.bf16, rel=1e-3)


def test_a_peak_given_on_the_command_line_still_wins_over_the_named_device(capsys):
    """`cluster.peak_flops_per_device` given with the device name is the user's word: kept (fails if
    device_overrides nulled it regardless)."""
    argv = ["plan", "model=gpt_1_3b", "cluster=example_gpu_site", "cluster.device_name=H100-SXM"]
    assert main([*argv, "cluster.peak_flops_per_device=5e14", "--gpus", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "H100-SXM at 5e+14 FLOP/s (bf16)" in out and "no device's own fit applies" in out
