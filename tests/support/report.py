"""Write a sweep's report.md/report.html from a table alone, as the tests of what a report shows
need it: one call instead of write_report's nine keyword arguments in each test."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from launcher.report.markdown import write_report
from launcher.results.policy import Recommendation


def write_test_report(df: pd.DataFrame, folder: Path, *, world_size: int) -> str:
    """report.md and report.html of `df` in `folder`, recommending `world_size`; report.md's text."""
    write_report(
        df,
        Recommendation(world_size=world_size, reason="a test"),
        sweep_id="t",
        summary="s",
        threshold=0.8,
        sweep_dir=folder,
        has_price=False,
    )
    return (folder / "report.md").read_text()
