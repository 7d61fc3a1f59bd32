"""The three examples (examples/ddp_meter, hf_trainer, lightning) swept on the dev cluster at 1 and 2 nodes
(one rank a node, torchrun one agent a node), from the repository root as their recipes say (issue 22): the
job runs in the folder it was submitted from, which the nodes share. The same rows as locally
(tests/support/example_sweep.py): both completed, each row's tokens/s the program's own printed figure within
2%, the reader the recipe names, one meter line per optimizer step; and two hosts in the two-node row."""

from __future__ import annotations

import json
import os
import time

import pandas as pd
import pytest

from tests.support.example_sweep import METRICS, REPO, check_rows, sweep

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("example", sorted(METRICS))
def test_example_swept_at_1_and_2_nodes(example, devcluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipes' argv paths are from the repository root: sbatch runs the job there
    name = f"{example}-{os.getpid()}-{int(time.time())}"
    out = sweep(example, tmp_path, name, "cluster=devcluster", "sweep.nodes=[1,2]")
    check_rows(out, example)
    rows = pd.read_csv(out / "results.csv")
    assert rows["nodes"].tolist() == [1, 2]
    record = json.loads((out / "trials" / rows["trial_id"].iloc[1] / "record.json").read_text())
    assert len(record["hosts"]) == 2 and len(set(record["hosts"])) == 2  # one rank a node
