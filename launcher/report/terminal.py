"""The terminal table: compact headers, formatted cells, failures in red, the recommendation."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from launcher.results.policy import Recommendation

# Short terminal headers; report.md and the CSV keep the real column names.
SHORT = {
    "world_size": "ranks", "tokens_per_s": "tokens/s", "tokens_per_s_per_device": "tok/s/dev",
    "samples_per_s": "samples/s", "step_time_median_s": "step s", "efficiency": "eff", "busbw_gbps": "busbw GB/s",
    "usd_per_1m_tokens": "$/1M tok", "bubble_measured": "bubble", "bubble_theory": "theory",
    "hours_to_budget": "h to budget", "device_hours_to_budget": "dev-h to budget", "usd_to_budget": "$ to budget",
    "device_hours_per_1m_tokens": "dev-h/1M tok", "jobs_per_hour": "runs/h", "tokens_per_s_interval": "interval",
    "comm_share": "comm",
}  # fmt: skip

# Columns shown to people (the CSV/parquet keep them all), with their number formats.
DISPLAY = [
    ("variant", "{}"), ("world_size", "{:d}"), ("nodes", "{:d}"), ("status", "{}"), ("tokens_per_s", "{:,.0f}"),
    ("tokens_per_s_interval", "{}"), ("tokens_per_s_per_device", "{:,.0f}"), ("comm_share", "{:.0%}"),
    ("samples_per_s", "{:,.1f}"), ("step_time_median_s", "{:.4f}"), ("efficiency", "{:.2f}"), ("mfu", "{:.3f}"),
    ("ccr", "{:.3f}"), ("busbw_gbps", "{:.2f}"), ("bubble_measured", "{:.2f}"), ("bubble_theory", "{:.2f}"),
    ("hours", "{:,.1f}"), ("jobs_per_hour", "{:.4f}"), ("usd_per_1m_tokens", "{:.4f}"),
    ("hours_to_budget", "{:,.1f}"), ("device_hours_to_budget", "{:,.0f}"), ("usd_to_budget", "{:,.0f}"),
    ("reason", "{}"),
]  # fmt: skip
FINE = ("completed", "predicted", "skipped", "pending", "running")  # any other status is a failure, shown red
# Shown only when some row has a value; the rest always (a dash says "not measured").
OPTIONAL = {"reason", "variant", "nodes", "tokens_per_s_interval", "comm_share", "bubble_measured", "bubble_theory", "hours", "jobs_per_hour", "hours_to_budget",
            "device_hours_to_budget", "usd_to_budget"}  # fmt: skip


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    try:
        return fmt.format(int(value) if fmt == "{:d}" else value)
    except (ValueError, TypeError):
        return str(value)


def display_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    def shown(c: str) -> bool:
        if c not in df.columns:
            return False
        if c == "nodes":  # only where some trial spans several nodes
            return bool((pd.to_numeric(df[c], errors="coerce").fillna(1) > 1).any())
        return c not in OPTIONAL or bool((df[c].notna() & (df[c] != "")).any())

    cols = [(c, f) for c, f in DISPLAY if shown(c)]
    return [c for c, _ in cols], [[_cell(row[c], f) for c, f in cols] for _, row in df.iterrows()]


def stdout_console():
    """rich console for stdout; piped or redirected output gets wide lines instead of rich's
    80-column guess, which would cut table cells."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def print_table(df: pd.DataFrame, rec: Recommendation, title: str, footer: str = "", unit: str = "rank") -> None:
    header, rows = display_rows(df)
    table = Table(title=title)
    for col in header:
        header = f"{unit}s" if col == "world_size" else SHORT.get(col, col)
        table.add_column(header, justify="left" if col in ("status", "reason") else "right",
                         no_wrap=col != "reason", overflow="fold")  # fmt: skip
    for row, status in zip(rows, df["status"], strict=True):
        # Cells are data (reasons quote logs with [brackets]), never rich markup.
        table.add_row(*map(Text, row), style=None if status in FINE else "red")
    console = stdout_console()
    console.print(table)
    size = "none" if rec.world_size is None else str(rec.world_size)
    if "mfu" in df and df["mfu"].isna().all():
        console.print("mfu —: the device's peak FLOP/s is unknown; set cluster.peak_flops_per_device")
    what = "world size" if unit == "rank" else f"{unit}s"
    console.print(f"[bold]Recommended {what}: {size}[/bold] — {escape(rec.reason)}")
    if footer:
        console.print(footer, markup=False)
