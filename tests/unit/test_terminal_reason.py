"""At 80 columns a failed trial's reason is shown: columns with nothing in them (a CPU sweep's MFU,
a sweep without a price's $/1M tokens) go first, and the reason comes right after the key numbers."""

from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from launcher.report.terminal import print_table
from launcher.results.policy import Recommendation
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS

REASON = "rank 3 log ends: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 32x10)"


def _cpu_sweep(failed: set[int]) -> pd.DataFrame:
    """1, 2 and 4 CPU ranks (no peak: MFU null; no price: $ null); the sizes in `failed` failed."""
    rows = []
    for i, n in enumerate((1, 2, 4)):
        tps = None if n in failed else 15000.0 * n**0.9
        rows.append(
            {
                "trial_id": f"00{i}-ws{n}",
                "world_size": n,
                "nodes": 1,
                "repeat": 0,
                "status": "failed" if n in failed else "completed",
                "scaling": "weak",
                "tokens_per_s": tps,
                "tokens_per_s_per_device": tps and tps / n,
                "samples_per_s": tps and tps / 64,
                "step_time_median_s": tps and 64 * 8 * n / tps,
                "ccr": None if n in failed else 0.01 * n,
                "reason": REASON if n in failed else None,
            }
        )
    return add_scaling(pd.DataFrame(rows).reindex(columns=COLUMNS))


def _render(df: pd.DataFrame, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    print_table(df, Recommendation(world_size=2, reason="a test"), title="cpu sweep", console=console)
    return console.export_text()


def _header(text: str) -> str:
    lines = text.splitlines()
    top, mid = (next(i for i, ln in enumerate(lines) if ln.startswith(c)) for c in "┏┡")
    return " ".join(lines[top + 1 : mid])


def _said(text: str) -> str:
    return " ".join(text.split())  # wrapped cells and footers joined back


def test_at_80_columns_the_reason_outlives_the_empty_columns():
    text = _render(_cpu_sweep(failed={4}))
    assert max(len(line) for line in text.splitlines()) <= 80
    head = _header(text)
    assert "reason" in head and "mfu" not in head and "$/1M" not in head
    table = text[: text.index("└")]
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in _said(table.replace("│", " "))
    footer = _said(text[text.index("└") :])
    assert "not shown at 80 columns:" in footer and "mfu" in footer and "$/1M tok" in footer
    # The empty MFU is still explained, though its column is left out.
    assert "mfu —: the device's peak FLOP/s is unknown" in footer


def test_every_size_failed_the_reasons_still_show_at_80_columns():
    text = _render(_cpu_sweep(failed={1, 2, 4}))
    assert "reason" in _header(text)
    assert _said(text[: text.index("└")].replace("│", " ")).count("RuntimeError: mat1") == 3


def test_when_everything_fits_nothing_is_left_out():
    text = _render(_cpu_sweep(failed={4}), width=300)
    assert "not shown" not in text and "mfu" in _header(text)
