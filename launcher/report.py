"""What people read: the terminal table, report.md, and a throughput/efficiency plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from .analysis import Recommendation
from .io import atomic_write_text

# Short terminal headers; report.md and the CSV keep the real column names.
SHORT = {
    "world_size": "ranks", "tokens_per_s": "tokens/s", "tokens_per_s_per_device": "tok/s/dev",
    "samples_per_s": "samples/s", "step_time_median_s": "step s", "efficiency": "eff", "busbw_gbps": "busbw GB/s",
    "usd_per_1m_tokens": "$/1M tok", "bubble_measured": "bubble", "bubble_theory": "theory",
}  # fmt: skip

# Columns shown to people (the CSV/parquet keep them all), with their number formats.
DISPLAY = [
    ("variant", "{}"), ("world_size", "{:d}"), ("status", "{}"), ("tokens_per_s", "{:,.0f}"), ("tokens_per_s_per_device", "{:,.0f}"),
    ("samples_per_s", "{:,.1f}"), ("step_time_median_s", "{:.4f}"), ("efficiency", "{:.2f}"), ("mfu", "{:.3f}"),
    ("ccr", "{:.3f}"), ("busbw_gbps", "{:.2f}"), ("bubble_measured", "{:.2f}"), ("bubble_theory", "{:.2f}"),
    ("usd_per_1m_tokens", "{:.4f}"), ("reason", "{}"),
]  # fmt: skip


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    try:
        return fmt.format(int(value) if fmt == "{:d}" else value)
    except (ValueError, TypeError):
        return str(value)


def display_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    optional = ("reason", "variant", "bubble_measured", "bubble_theory")  # shown only when some row has one
    cols = [(c, f) for c, f in DISPLAY
            if c in df.columns and (c not in optional or (df[c].notna() & (df[c] != "")).any())]  # fmt: skip
    return [c for c, _ in cols], [[_cell(row[c], f) for c, f in cols] for _, row in df.iterrows()]


def markdown_table(df: pd.DataFrame) -> str:
    header, rows = display_rows(df)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def stdout_console():
    """rich console for stdout; piped or redirected output gets wide lines instead of rich's
    80-column guess, which would cut table cells."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


def print_table(df: pd.DataFrame, rec: Recommendation, title: str, footer: str = "") -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    header, rows = display_rows(df)
    table = Table(title=title)
    for col in header:
        table.add_column(SHORT.get(col, col), justify="left" if col in ("status", "reason") else "right",
                         no_wrap=col != "reason", overflow="fold")  # fmt: skip
    for row, status in zip(rows, df["status"], strict=True):
        # Cells are data (reasons quote logs with [brackets]), never rich markup.
        table.add_row(*map(Text, row), style=None if status == "completed" else "red")
    console = stdout_console()
    console.print(table)
    size = "none" if rec.world_size is None else str(rec.world_size)
    if df["mfu"].isna().all():
        console.print("mfu —: the device's peak FLOP/s is unknown; set cluster.peak_flops_per_device")
    console.print(f"[bold]Recommended world size: {size}[/bold] — {escape(rec.reason)}")
    if footer:
        console.print(footer, markup=False)


def plot(df: pd.DataFrame, threshold: float, path: Path) -> None:
    """Throughput vs world size with the ideal line, and efficiency with the threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .analysis import by_size

    sizes = by_size(df)
    done = df[df["status"] == "completed"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for variant, g in sizes.groupby("variant"):
        name = variant or "measured"
        line = ax1.plot(g["world_size"], g["tokens_per_s"], "o-", label=name)[0]
        n0, t0 = g["world_size"].iloc[0], g["tokens_per_s"].iloc[0]
        ideal = "ideal (linear)" if not variant else None
        ax1.plot(g["world_size"], t0 * g["world_size"] / n0, "--", color=line.get_color(), alpha=0.4, label=ideal)
        ax2.plot(g["world_size"], g["efficiency"], "o-", color=line.get_color(), label=variant or None)
    ax2.axhline(threshold, color="red", linestyle=":", label=f"threshold {threshold:.2f}")
    scaling = done["scaling"].iloc[0] if not done.empty else "weak"
    ax1.set(xlabel="world size (ranks)", ylabel="tokens/s", title="Throughput")
    ax2.set(xlabel="world size (ranks)", ylabel="efficiency", title=f"{scaling.capitalize()}-scaling efficiency",
            ylim=(0, 1.1))  # fmt: skip
    for ax in (ax1, ax2):
        ax.set_xticks(sorted(df["world_size"].unique()))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def write_report(df: pd.DataFrame, rec: Recommendation, *, sweep_id: str, summary: str, threshold: float,
                 sweep_dir: Path) -> None:  # fmt: skip
    plot(df, threshold, sweep_dir / "scaling.png")
    size = "none" if rec.world_size is None else str(rec.world_size)
    text = "\n".join([
        f"# Sweep {sweep_id}", "", summary, "",
        f"**Recommended world size: {size}** — {rec.reason}", "",
        markdown_table(df), "",
        "![throughput and efficiency](scaling.png)", "",
        "Every column, per trial: `results.csv` / `results.parquet`. Per-trial records and logs: `trials/`.", "",
    ])  # fmt: skip
    atomic_write_text(sweep_dir / "report.md", text)
