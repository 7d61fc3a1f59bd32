"""One real trial whose loss explodes records `nan` at its step, end to end. The windowed loop
itself, on a 1-rank gloo group in this process: tests/unit/test_timing.py."""

from __future__ import annotations

import pytest

from launcher.config.compose import compose_config
from launcher.io import read_json
from launcher.run.local import run_local
from launcher.trials.folder import write_trial
from launcher.trials.spec import make_trial


@pytest.mark.torch_dist
def test_a_real_trial_whose_loss_explodes_records_nan_at_a_step(tmp_path):
    cfg = compose_config(["optim=sgd", "optim.lr=1e30", "batch.micro=4"])
    write_trial(tmp_path, make_trial(cfg, index=0, world_size=2, steps=12, warmup_steps=1), cfg)
    out = run_local(tmp_path, world_size=2, threads=1, timeout_s=300)
    record = read_json(tmp_path / "record.json")
    assert out.ok and record["status"] == "nan", (out.reason(), record.get("reason"))
    assert 1 <= record["stopped_at_step"] <= 12
    assert record["reason"] == f"loss became NaN/inf at step {record['stopped_at_step']} of 12; stopped early"
