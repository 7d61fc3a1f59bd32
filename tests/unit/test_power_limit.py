"""`cluster.power_limit_w` (issue 32: torchtitan's H100s ran at 500 W of 700 W): a board held below its TDP
runs compute at the cube root of the limit's share (launcher/compute/power.py), in `launcher plan` on presets;
a limit the device cannot take is one line and exit 2."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.compute.power import clock_share, tdp_w
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.perf.plan_table import from_presets_forecast

pytestmark = pytest.mark.usefixtures("one_mfu_presets")  # pins the one-MFU presets (conftest)

H100 = ["cluster=example_gpu_site", "cluster.device_name=H100-SXM", "cluster.peak_flops_per_device=null"]
ONE_GPU = [*H100, "model=gpt_1_3b", "parallel=ddp", "cluster.step_jitter=0"]


def test_a_power_limit_keeps_the_cube_root_of_its_share_of_the_tdp():
    assert tdp_w("NVIDIA H100 80GB HBM3") == 700 and tdp_w("H100-SXM-96GB-HBM2e-500W") == 700
    assert tdp_w("A100-SXM4-80GB") == 400 and tdp_w("A100-80GB") is None  # a bare A100: SXM 400 W or PCIe 300 W
    assert clock_share("H100-SXM", 500) == pytest.approx(0.8939, abs=1e-4)
    assert clock_share("H100-SXM", 700) == 1.0 and clock_share("H100-SXM", None) == 1.0


def test_the_plan_runs_compute_at_the_clock_a_power_limit_leaves():
    """One GPU, no communication: the whole step is compute, so its rate falls by exactly the clock share
    (fails without it: the two plans read the same)."""

    def per_gpu(*extra: str) -> float:
        table = from_presets_forecast(compose_config([*ONE_GPU, *extra]), [1], assume_mfu=0.4).table
        return float(table.iloc[0]["tokens_per_s_per_device"])

    assert per_gpu("cluster.power_limit_w=500") / per_gpu() == pytest.approx((500 / 700) ** (1 / 3), rel=1e-9)
    assert per_gpu("cluster.power_limit_w=700") == pytest.approx(per_gpu(), rel=1e-12)


def test_a_power_limit_the_device_cannot_take_is_one_line_and_exit_2(capsys):
    with pytest.raises(ConfigError) as raised:
        compose_config([*ONE_GPU, "cluster.power_limit_w=0"])
    assert str(raised.value) == (
        "cluster.power_limit_w=0 must be > 0 W (the board power limit, nvidia-smi -pl); "
        "set e.g. cluster.power_limit_w=500, or null for the device's TDP"
    )
    assert main(["plan", *ONE_GPU, "cluster.power_limit_w=800", "--gpus", "1"]) == 2
    assert capsys.readouterr().err == (
        "launcher: error: cluster.power_limit_w=800 is not in (0, 700] W, the TDP of 'H100-SXM' (a board cannot "
        "be held above it); set e.g. cluster.power_limit_w=500, or null\n"
    )
    assert main(["plan", *ONE_GPU, "cluster.device_name=A100-80GB", "cluster.power_limit_w=300", "--gpus", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "launcher: error: cluster.power_limit_w=300 needs the TDP of cluster.device_name='A100-80GB', which "
        "compute/power.py does not know; name one of A100 SXM4 (400 W), H100 SXM5 (700 W)"
    )
    assert err.endswith(", or set cluster.power_limit_w=null\n") and err.count("\n") == 1
