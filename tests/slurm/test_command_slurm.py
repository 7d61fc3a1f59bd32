"""job=command on the dev cluster (issue 22): a user's own DDP program swept at 1 and 2 nodes through
torchrun (one agent per node), the link probe first on the same ranks; each row's tokens/s equals
what the program printed of itself within 2%, and the two-node row has the probe's busbw. Then the
srun launch (one task per rank, the torchrun variables from Slurm's) on 2 nodes, packed."""

from __future__ import annotations

import json
import os
import time

import pytest

from launcher.cli import main
from tests.support.command_job import argv, printed, table

pytestmark = pytest.mark.slurm

STEPS = ["sweep.steps=25", "sweep.warmup_steps=5"]


def _sweep(tmp_path, *overrides: str) -> str:
    name = f"cmd-{os.getpid()}-{int(time.time())}"
    args = ["sweep", "cluster=devcluster", "job=command", *STEPS, *overrides]
    assert main([*args, f"sweep.results_dir={tmp_path}", f"sweep.name={name}", "--quiet"]) == 0
    return name


def test_torchrun_command_at_1_and_2_nodes(devcluster, tmp_path):
    name = _sweep(tmp_path, argv(), "sweep.nodes=[1,2]")
    rows = table(tmp_path / name)
    assert rows["nodes"].tolist() == [1, 2] and rows["world_size"].tolist() == [1, 2]
    assert rows["status"].tolist() == ["completed", "completed"], rows["reason"].tolist()
    for trial_id, tokens_s in zip(rows["trial_id"], rows["tokens_per_s"], strict=True):
        assert tokens_s == pytest.approx(printed(tmp_path / name / "trials" / trial_id), rel=0.02)
    assert rows["busbw_gbps"].iloc[1] > 0
    record = json.loads((tmp_path / name / "trials" / rows["trial_id"].iloc[1] / "record.json").read_text())
    assert sorted(record["hosts"]) == sorted(set(record["hosts"])) and len(record["hosts"]) == 2  # one rank a node


def test_srun_command_packed_on_2_nodes(devcluster, tmp_path):
    name = _sweep(tmp_path, argv(), "job.launch=srun", "sweep.nodes=[1,2]", "sweep.pack=true")
    rows = table(tmp_path / name)
    assert rows["status"].tolist() == ["completed", "completed"], rows["reason"].tolist()
    for trial_id, tokens_s in zip(rows["trial_id"], rows["tokens_per_s"], strict=True):
        assert tokens_s == pytest.approx(printed(tmp_path / name / "trials" / trial_id), rel=0.02)
