"""`launcher profile cluster=devcluster` (issue 32 item 2): one real sbatch job of 2 nodes × 2 ranks through the
sweep's own render and submit path runs launcher.train.profile_node on every rank (gloo, CPU matmuls); the
profile holds within-node (2 ranks of n1) and across-node (one rank of each node) collectives with positive
figures, and its job script is the usual one running the profile module."""

from __future__ import annotations

import json

import pytest

from launcher.cli import main
from tests.unit.test_site_profile import check_measured

pytestmark = pytest.mark.slurm


def test_profile_on_two_nodes_of_the_dev_cluster(devcluster, tmp_path, capsys):
    out = tmp_path / "site.json"
    args = ["profile", "cluster=devcluster", "cluster.tasks_per_node=2", f"sweep.results_dir={tmp_path}"]
    assert main([*args, "--nodes", "2", "--output", str(out), "--quiet"]) == 0
    assert f"profile written to {out}" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    check_measured(doc, ranks=4, nodes=2, scopes={"intra", "inter"})
    assert doc["scopes"] == {"intra": {"ranks": 2}, "inter": {"ranks": 2}} and doc["skipped"] == []
    (script,) = next(tmp_path.glob("profile-devcluster-*")).glob("jobs/*.sbatch")
    text = script.read_text()
    assert "#SBATCH --nodes=2" in text and "-m launcher.train.profile_node --trial" in text
