"""A rank that would abort in torch's teardown (LAUNCHER_FAULT=teardown:1:STEP arms os.abort in
destroy_process_group and at interpreter exit, as gloo's rare "terminate called without an active
exception" did on a loaded 2-core CI machine) ends a completed trial with exit 0 on every rank:
after the closing barrier the trainer leaves without tearing anything down (train/__main__.py `leave`).
On the code that called destroy_process_group and exited normally, rank 1 reads "killed by SIGABRT"."""

from __future__ import annotations

import pytest

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.run.local import run_trial_dir
from launcher.trials.folder import read_record, trial_document
from launcher.trials.spec import make_trial

pytestmark = pytest.mark.torch_dist


@pytest.mark.parametrize("layout", ["ddp", "fsdp"])
def test_a_rank_whose_teardown_would_abort_exits_cleanly_after_the_record(layout, tmp_path, monkeypatch):
    cfg = compose_config(["seed=3", f"parallel={layout}"])
    trial = make_trial(cfg, index=0, world_size=2, steps=4, warmup_steps=1)
    atomic_write_json(tmp_path / "trial.json", trial_document(trial, cfg))
    monkeypatch.setenv("LAUNCHER_FAULT", "teardown:1:2")
    outcome = run_trial_dir(tmp_path, world_size=2, threads=1, timeout_s=300)
    assert [(r["rank"], r["returncode"]) for r in outcome["ranks"]] == [(0, 0), (1, 0)]
    assert outcome["reason"] is None
    assert read_record(tmp_path).doc["status"] == "completed"
