"""The three examples (examples/ddp_meter, hf_trainer, lightning) swept as a user would sweep them, `launcher
sweep --recipes examples/<name>/recipes job=<name> sweep.world_sizes=[1,2]` from the repository root (issue 22):
both rows complete, each row's tokens/s equals the whole-job figure the program printed in its rank-0 log within
2%, its record names the reader the recipe asks for (meter, the HF Trainer callback, the Lightning callback) and
the program printed once, over the steps after the warm-up; the meter file holds one line per optimizer step
with the whole job's tokens (accumulating 2 micro-steps at 1 rank, 1 at 2 ranks, under a fixed global batch)."""

from __future__ import annotations

import pytest

from tests.support.example_sweep import METRICS, REPO, check_rows, sweep

pytestmark = pytest.mark.torch_dist


@pytest.mark.parametrize("example", sorted(METRICS))
def test_example_swept_at_1_and_2_ranks(example, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipes' argv paths are from the repository root
    out = sweep(example, tmp_path, example, "sweep.world_sizes=[1,2]", "cluster.trial_timeout_s=240")
    check_rows(out, example)
