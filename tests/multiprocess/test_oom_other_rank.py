"""A real local 2-rank CPU trial where rank 1 runs out of memory (LAUNCHER_FAULT=oom:1:STEP raises the CUDA
caching allocator's OutOfMemoryError, a stand-in for a GPU) ends as an `oom` row naming rank 1, whatever
rank 0 then recorded (`failed`: the collective rank 1 left broke under it)."""

from __future__ import annotations

import pytest

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.results.table import trial_row
from launcher.run.local import run_trial_dir
from launcher.trials.folder import read_record, trial_document
from launcher.trials.spec import make_trial

pytestmark = pytest.mark.torch_dist


def test_rank1_out_of_memory_makes_an_oom_row_naming_rank1(tmp_path, monkeypatch):
    cfg = compose_config(["seed=3", "parallel=ddp"])
    trial = make_trial(cfg, index=0, world_size=2, steps=6, warmup_steps=1)
    atomic_write_json(tmp_path / "trial.json", trial_document(trial, cfg))
    monkeypatch.setenv("LAUNCHER_FAULT", "oom:1:3")
    outcome = run_trial_dir(tmp_path, world_size=2, threads=1, timeout_s=300)
    record = read_record(tmp_path).doc
    row = trial_row({"trial_id": "t", "world_size": 2, "nodes": 1}, record, outcome)
    assert row["status"] == "oom"
    # Rank 1 fails first on a quiet host; on a busy one rank 0, broken by it, can exit first: either way both say so.
    assert "rank 1 exited with code 1" in row["reason"] and "rank 0 exited with code 1" in row["reason"]
    assert "rank 1 log ends: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in row["reason"]
    # Rank 0 failed in the collective rank 1 left, and said so: `failed`, its own words no OOM.
    assert record["status"] == "failed" and "OutOfMemoryError" not in record["reason"]
