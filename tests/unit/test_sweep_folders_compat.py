"""A sweep folder written before the house moved (issue 21) still collects and reports the same table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from launcher.cli import main

KEPT = Path(__file__).resolve().parents[1] / "data" / "sweeps_before_house"


@pytest.mark.parametrize("name", ["before-house", "before-house-slurm"])
def test_an_old_sweep_folder_collects_and_reports_the_same_table(tmp_path, name, capsys):
    folder = tmp_path / name
    shutil.copytree(KEPT / name, folder)
    for written in ("results.csv", "results.parquet", "report.md"):
        (folder / written).unlink()

    assert main(["collect", str(folder)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(folder / "results.csv"), pd.read_csv(KEPT / name / "results.csv"))
    pd.testing.assert_frame_equal(
        pd.read_parquet(folder / "results.parquet"), pd.read_parquet(KEPT / name / "results.parquet")
    )

    assert main(["report", str(folder)]) == 0
    assert (folder / "report.md").read_text() == (KEPT / name / "report.md").read_text()
    assert "Recommended world size: 1" in capsys.readouterr().out
