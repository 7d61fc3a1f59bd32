"""`launcher sweep` end to end on the embedded default: real ranks, the table, the report."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from launcher.cli import main
from launcher.results.table import COLUMNS

pytestmark = pytest.mark.torch_dist

PUBLIC_COLUMNS = [
    "world_size",
    "nodes",
    "status",
    "tokens_per_s",
    "tokens_per_s_per_device",
    "samples_per_s",
    "step_time_median_s",
    "efficiency",
    "mfu",
    "ccr",
]


def test_sweep_writes_table_with_one_row_per_size(default_sweep):
    csv = pd.read_csv(default_sweep / "results.csv")
    parquet = pd.read_parquet(default_sweep / "results.parquet")
    assert list(csv.columns) == COLUMNS and list(parquet.columns) == COLUMNS
    assert set(PUBLIC_COLUMNS) <= set(csv.columns)
    assert csv["world_size"].tolist() == [1, 2]
    assert csv["status"].tolist() == ["completed", "completed"]
    assert csv["nodes"].tolist() == [1, 1]
    assert csv["global_batch"].tolist() == [8, 16]  # weak scaling: per-rank batch fixed
    assert (csv["scaling"] == "weak").all()
    assert (csv["tokens_per_s"] > 0).all()
    assert csv["tokens_per_s_per_device"].tolist() == pytest.approx((csv["tokens_per_s"] / csv["world_size"]).tolist())
    assert csv["tokens_per_s"].tolist() == pytest.approx((csv["samples_per_s"] * 64).tolist())
    assert csv["efficiency"].iloc[0] == 1.0
    assert csv["efficiency"].iloc[1] == pytest.approx(csv["tokens_per_s"].iloc[1] / (2 * csv["tokens_per_s"].iloc[0]))
    assert csv["mfu"].isna().all()  # cluster=local has no known peak
    assert csv["ccr"].iloc[0] == 0.0 and csv["ccr"].iloc[1] > 0
    # CSV has no null but the empty cell (read back as NaN); parquet keeps None.
    pd.testing.assert_frame_equal(csv, parquet.astype(object).where(parquet.notna(), float("nan")), check_dtype=False)


def test_report_states_the_recommendation(default_sweep):
    csv = pd.read_csv(default_sweep / "results.csv")
    report = (default_sweep / "report.md").read_text()
    expected = 2 if csv["efficiency"].iloc[1] >= 0.8 else 1
    assert f"**Recommended world size: {expected}**" in report
    assert "| world_size | status | tokens_per_s |" in report
    assert (default_sweep / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    spec = json.loads((default_sweep / "sweep.json").read_text())
    assert [t["world_size"] for t in spec["trials"]] == [1, 2]
    assert spec["config"]["model"]["name"] == "tiny_gpt"


def test_killed_rank_is_a_failed_row_and_other_rows_are_intact(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHER_FAULT", "kill:1:5")  # rank 1 exists only in the 2-rank trial
    assert (
        main(["sweep", "model=mlp", f"sweep.results_dir={tmp_path}", "sweep.name=faulty", "sweep.steps=12", "--quiet"])
        == 0
    )
    df = pd.read_csv(tmp_path / "faulty" / "results.csv")
    assert df["world_size"].tolist() == [1, 2]
    ok, bad = df.iloc[0], df.iloc[1]
    assert ok["status"] == "completed" and ok["tokens_per_s"] > 0 and pd.isna(ok["reason"])
    assert bad["status"] == "failed" and pd.isna(bad["tokens_per_s"]) and pd.isna(bad["efficiency"])
    assert bad["reason"].startswith("rank 1 was killed by SIGKILL; then rank 0 exited with code 1")
    out = capsys.readouterr().out
    assert "Recommended world size: 1" in out and "the only size that completed" in out
