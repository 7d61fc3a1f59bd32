"""A busy host is said under the table, not only recorded: a CPU trial whose ranks keep (nearly)
every core of their machine busy, without oversubscribing it (cpu_contention 1), is flagged, and
the flag is a line under the terminal table and in report.md."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from launcher.report.terminal import print_table
from launcher.results.flags import busy_host
from launcher.results.policy import Recommendation
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS, trial_row
from tests.support.report import write_test_report

TRIAL = {"layout": "ddp", "nodes": 1, "scaling": "weak", "micro": 8, "accum": 1}
BUSY_2 = (
    "busy host: 2 ranks on 2 cores keep 100% of them busy (cpu_contention 1.0), none left for the launcher and "
    "the system: its step times are noisier"
)


def _metrics(**over) -> dict:
    """What the payload records of a CPU trial on one 2-core machine, one thread per rank."""
    return {
        "tokens_per_s": 1000.0,
        "cpu_contention": 1.0,
        "machines": 1,
        "cpus_per_machine": 2,
        "threads_per_rank": 1,
        "cpu_quota_per_rank": [None, None],
        "cuda_device_name": None,
        **over,
    }


def test_ranks_that_fill_the_cores_are_flagged_and_others_are_not():
    assert busy_host(_metrics(), 2) == BUSY_2
    assert busy_host(_metrics(cpus_per_machine=16, threads_per_rank=8), 2) == (
        "busy host: 2 ranks × 8 threads on 16 cores keep 100% of them busy (cpu_contention 1.0), none left for "
        "the launcher and the system: its step times are noisier"
    )
    assert busy_host(_metrics(), 1) is None  # 1 rank on 2 cores: one core free
    assert busy_host(_metrics(cpu_contention=2.0), 4) is None  # oversubscribed says it already
    assert busy_host(_metrics(cuda_device_name="NVIDIA H100 80GB HBM3"), 2) is None  # a GPU trial
    assert busy_host(_metrics(machines=2), 2) is None  # which machine holds which ranks: unknown
    assert busy_host(_metrics(cpu_quota_per_rank=[1.0, 1.0]), 2) is None  # a quota holds them to a share
    assert busy_host({"tokens_per_s": 1.0}, 2) is None  # an older record without the figures


@pytest.mark.parametrize("share, flagged", [(15 / 16, True), (14 / 16, False)])
def test_near_one_is_at_least_nine_tenths_of_the_cores(share, flagged):
    assert (busy_host(_metrics(cpus_per_machine=16, threads_per_rank=int(share * 16)), 1) is not None) == flagged


def _table() -> pd.DataFrame:
    rows = [
        trial_row(
            {**TRIAL, "trial_id": f"00{i}-ws{n}", "world_size": n, "dp": n, "global_batch": 8 * n},
            {"status": "completed", "reason": None, "metrics": _metrics(tokens_per_s=1000.0 * n)},
            None,
        )
        for i, n in enumerate((1, 2))
    ]
    return add_scaling(pd.DataFrame(rows).reindex(columns=COLUMNS))


def test_the_busy_host_is_a_line_under_the_terminal_table_and_in_report_md(tmp_path):
    df = _table()
    assert [f if isinstance(f, str) else None for f in df["flags"]] == [None, BUSY_2]
    console = Console(width=400, record=True, file=io.StringIO())
    print_table(df, Recommendation(world_size=2, reason="a test"), title="t", console=console)
    text = console.export_text()
    assert f"flagged: 2 ranks: {BUSY_2}" in text.splitlines()
    assert text.index(BUSY_2) > text.index("└")
    write_test_report(df, tmp_path, world_size=2)
    assert f"flagged: 2 ranks: {BUSY_2}" in (tmp_path / "report.md").read_text()
