"""A sweep folder written before the house moved (issue 21) still collects and reports the same table.

One column may say more than it did then: `flags`, which since issue 25 calls a CPU trial that keeps
every core of its host busy a "busy host" (both folders ran 2 ranks on 2 cores, locally and as the
dev cluster's 2 nodes). Every other cell, and the report without that flag, is as it was written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from launcher.cli import main

KEPT = Path(__file__).resolve().parents[1] / "data" / "sweeps_before_house"
BUSY = "busy host: 2 ranks on 2 cores keep 100% of them busy"


def _without_flags(report: str) -> str:
    """report.md less the `flagged` column and the flag lines below the table."""
    lines = [ln for ln in report.splitlines() if not ln.startswith("**flagged:")]
    out = []
    for ln in lines:
        if ln.startswith("| variant |") or ln.startswith("| world_size |") or ln.startswith("| ranks |"):
            has_flag = ln.rstrip().endswith("| flagged |")
        if ln.startswith("|") and "has_flag" in locals() and has_flag:
            ln = re.sub(r"\|[^|]*\|$", "|", ln.rstrip())
        out.append(ln)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


@pytest.mark.parametrize("name", ["before-house", "before-house-slurm"])
def test_an_old_sweep_folder_collects_and_reports_the_same_table(tmp_path, name, capsys):
    folder = tmp_path / name
    shutil.copytree(KEPT / name, folder)
    for written in ("results.csv", "results.parquet", "report.md"):
        (folder / written).unlink()

    assert main(["collect", str(folder)]) == 0
    got, kept = pd.read_csv(folder / "results.csv"), pd.read_csv(KEPT / name / "results.csv")
    pd.testing.assert_frame_equal(got.drop(columns="flags"), kept.drop(columns="flags"))
    assert kept["flags"].isna().all()
    busy = got["flags"].fillna("").str.startswith(BUSY)
    assert got.loc[busy, "world_size"].tolist() == (
        [2, 2] if name == "before-house" else [2]
    )  # the dev cluster's nodes share this machine's 2 cores too
    assert got.loc[~busy, "flags"].isna().all()
    parquet = pd.read_parquet(folder / "results.parquet").drop(columns="flags")
    pd.testing.assert_frame_equal(parquet, pd.read_parquet(KEPT / name / "results.parquet").drop(columns="flags"))

    assert main(["report", str(folder)]) == 0
    assert _without_flags((folder / "report.md").read_text()) == _without_flags((KEPT / name / "report.md").read_text())
    assert "Recommended world size: 1" in capsys.readouterr().out
