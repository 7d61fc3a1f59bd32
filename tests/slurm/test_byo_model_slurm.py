"""Your own model by `_target_` (issue 15) on the dev cluster: the package written outside the
repo sweeps at 1 and 2 ranks with ddp and fsdp, found by the ranks through cluster.env."""

from __future__ import annotations

import os
import time

import pandas as pd
import pytest

from launcher.cli import main
from tests.support.byo import DATA, GPT, MODELS, NET, SWEEP, user_package

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def user_code(tmp_path_factory):
    with user_package(
        tmp_path_factory.mktemp("user"), {"models": MODELS, "data": DATA}, {"byo_net": NET, "byo_gpt": GPT}
    ) as root:
        yield root


def test_sweep_on_the_dev_cluster_finds_the_package_through_cluster_env(user_code, devcluster, tmp_path, monkeypatch):
    """On Slurm the ranks find the package through cluster.env's PYTHONPATH (not this shell's)."""
    monkeypatch.delenv("PYTHONPATH")
    name = f"byo-{os.getpid()}-{int(time.time())}"
    assert (
        main(
            [
                "sweep",
                *SWEEP,
                "cluster=devcluster",
                "sweep.world_sizes=[1,2]",
                "parallel=ddp,fsdp",
                "sweep.pack=true",
                f"cluster.env=['PYTHONPATH={user_code}']",
                f"sweep.results_dir={tmp_path}",
                f"sweep.name={name}",
                "--quiet",
            ]
        )
        == 0
    )
    df = pd.read_csv(tmp_path / name / "results.csv")
    assert (df["status"] == "completed").all() and sorted(df["world_size"]) == [1, 1, 2, 2]
    assert df["efficiency"].notna().all() and df["mfu"].notna().all() and (df["samples_per_s"] > 0).all()
