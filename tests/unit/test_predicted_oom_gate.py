"""The sweep's predicted-OOM gate (launcher/perf/memory.py predicted_oom, launcher/run/sweep.py): it keeps
MEMORY_MARGIN (the memory the fullest published run left free, benchmarks/results/memory_published.md;
the one `launcher plan` keeps) free, says each size it skips on the console and in the row's
reason, and `sweep.force_sizes` runs a skipped size all the same."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.io import read_json
from launcher.perf import memory_limit
from launcher.perf.memory import GIB, MEMORY_MARGIN, estimate, predicted_oom
from launcher.run import sweep as sweep_mod
from launcher.trials.spec import make_trial

GPU = ["model=gpt_125m", "cluster.device=cuda", "batch.micro=2"]


def _gpu_trial(device_gb: float | None = None):
    cfg = compose_config(GPU + ([f"cluster.device_memory_gb={device_gb}"] if device_gb else []))
    return cfg, make_trial(cfg, index=0, world_size=1, steps=4, warmup_steps=1)


def test_a_size_within_the_margin_is_skipped_with_the_numbers():
    need = estimate(*_gpu_trial(), "cuda").total
    device_gb = need / 0.97 / GIB  # the estimate fills 97% of the device: over the 95% the margin leaves
    cfg, t = _gpu_trial(device_gb)
    reason = predicted_oom(cfg, t, gpu=True, host_bytes=None)
    assert reason is not None and reason.startswith(
        f"oom (predicted): estimate {need / GIB:.1f} GiB > {device_gb:.1f} GiB × (1 − 5% margin) "
        "(cluster.device_memory_gb); needs ~"
    )
    roomy = _gpu_trial(need / 0.94 / GIB)  # 94%: inside the margin
    assert predicted_oom(*roomy, gpu=True, host_bytes=None) is None


def test_one_margin_for_plan_and_sweep():
    assert memory_limit.MEMORY_MARGIN is MEMORY_MARGIN == 0.05


BIG = ["model=gpt_1_3b", "cluster.host_memory_gb=23.5", "sweep.world_sizes=[1,2]"]


def test_a_skipped_size_is_said_on_the_console_and_in_the_rows_reason(tmp_path, capsys):
    assert main(["sweep", *BIG, f"sweep.results_dir={tmp_path}", "sweep.name=big", "--quiet"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "000-ws1: not launched: oom (predicted): estimate 90.1 GiB > 23.5 GiB × (1 − 5% margin)" in err
    assert "(run it anyway: sweep.force_sizes)" in err
    outcome = read_json(tmp_path / "big" / "trials" / "001-ws2" / "outcome.json")
    assert outcome["reason"].startswith("oom (predicted): estimate 90.1 GiB > 11.8 GiB × (1 − 5% margin)")


def test_force_sizes_runs_a_predicted_size(tmp_path, monkeypatch, capsys):
    plan = sweep_mod.prepare_sweep(BIG + ["sweep.force_sizes=[2]", f"sweep.results_dir={tmp_path}"])
    assert list(plan.predicted_oom) == ["000-ws1"] and list(plan.forced) == ["001-ws2"]
    launched = []
    monkeypatch.setattr(sweep_mod, "execute", lambda sweep_dir, cfg, trials, **kw: launched.append(sweep_dir))
    sweep_mod.run_sweep(plan, BIG, progress_bars=False)
    err = " ".join(capsys.readouterr().err.split())
    assert "001-ws2: launched as sweep.force_sizes asks, though oom (predicted): estimate 90.1 GiB" in err
    (sweep_dir,) = launched
    assert not (sweep_dir / "trials" / "001-ws2" / "outcome.json").exists()  # left to the executor
    assert read_json(sweep_dir / "trials" / "000-ws1" / "outcome.json")["status"] == "oom"


def test_a_forced_size_must_be_a_swept_one():
    with pytest.raises(ConfigError, match=r"sweep.force_sizes=\[8\] holds \[8\], not among sweep.world_sizes=\[1, 2\]"):
        compose_config(["sweep.force_sizes=[8]"])
