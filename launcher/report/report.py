"""What people read: the terminal table, report.md, and a throughput/efficiency plot."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from launcher.results.policy import Recommendation
from launcher.io import atomic_write_text, read_json

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


def print_table(df: pd.DataFrame, rec: Recommendation, title: str, footer: str = "", unit: str = "rank") -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

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


@dataclass(kw_only=True, frozen=True)
class ModelSummary:
    predictions: pd.DataFrame
    """calibrate.predictions(): per variant and size, predicted vs measured tokens/s."""
    lines: list[str]
    """One line per layout: the fitted parameters and where each came from."""


def model_summary(sweep_dir: Path, cfg) -> ModelSummary | None:
    """Fit the performance model on the sweep's completed trials and predict the grid's sizes
    plus 2× and 4× the largest; None when nothing completed (or the fit is impossible)."""
    from launcher.model.calibrate import fit_layouts, load_measured, mape, predictions

    measured = load_measured(sweep_dir)
    if not measured:
        return None
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link)
    except ValueError:
        return None
    largest = max(m.trial["world_size"] for m in measured)
    grid = {t["world_size"] for t in (read_json(sweep_dir / "sweep.json").get("trials") or [])}
    pred = predictions(measured, models, sorted(grid | {2 * largest, 4 * largest}))
    lines = []
    for layout, m in models.items():
        inter, intra = m.inter, m.intra
        lines.append(
            f"`{layout}`: {m.compute_s_per_sample * 1e3:.3g} ms of compute per sample, "
            f"{m.overhead_s * 1e3:.3g} ms overhead per step, {m.exposed_comm:.0%} of the all-reduce exposed; "
            f"inter-node {inter.bandwidth_gbps:.3g} GB/s, α {inter.latency_s * 1e6:.3g} µs ({m.source('inter')}); "
            f"intra-node {intra.bandwidth_gbps:.3g} GB/s ({m.source('intra')}); "
            + (f"oversubscribed CPU compute × contention^{m.contention_exponent:.2f}; " if m.contention_exponent != 1 else "")
            + f"fitted on {m.n_observations} trials, residual {m.rel_sigma:.1%}"
        )
    lines.append(f"In-sample error (MAPE) of predicted tokens/s: {mape(pred):.1f}%.")
    return ModelSummary(predictions=pred, lines=lines)


def write_report(df: pd.DataFrame, rec: Recommendation, *, sweep_id: str, summary: str, threshold: float,
                 sweep_dir: Path, model: ModelSummary | None = None, notes: Sequence[str] = ()) -> None:  # fmt: skip
    """report.md and a self-contained report.html, with the PNG plots beside them."""
    from launcher.report import plots
    from launcher.report.html import write_html

    images = [
        ("Throughput vs GPUs, with the ideal linear line", plots.plot_throughput(df, sweep_dir / "throughput.png")),
        ("Scaling efficiency vs GPUs, with the threshold", plots.plot_efficiency(df, threshold, sweep_dir / "efficiency.png")),
        ("$ per 1M tokens vs GPUs", plots.plot_cost(df, sweep_dir / "cost.png")),
    ]  # fmt: skip
    plots.plot_scaling(df, threshold, sweep_dir / "scaling.png")
    model_lines: list[str] = []
    if model is not None:
        images.append(("Measured vs predicted throughput (calibrated model, interval shaded)",
                       plots.plot_predicted(model.predictions, sweep_dir / "predicted.png")))  # fmt: skip
        model_lines = ["Performance model (step = compute + exposed all-reduce + bubble + overhead):", *model.lines]
    size = "none" if rec.world_size is None else str(rec.world_size)
    recommendation = f"Recommended world size: {size} — {rec.reason}"
    text = "\n".join([
        f"# Sweep {sweep_id}", "", summary, "",
        f"**Recommended world size: {size}** — {rec.reason}", "",
        markdown_table(df), "",
        *[f"{n}\n" for n in notes],
        *[f"- {line}" if i else f"{line}\n" for i, line in enumerate(model_lines)], "",
        *[f"![{caption}]({path.name})" for caption, path in images], "",
        "Every column, per trial: `results.csv` / `results.parquet`. Per-trial records and logs: `trials/`. "
        "The same report as one file: `report.html`.", "",
    ])  # fmt: skip
    atomic_write_text(sweep_dir / "report.md", text)
    header, rows = display_rows(df)
    short = [c if c == "status" else SHORT.get(c, c) for c in header]  # the terminal's compact headers
    write_html(path=sweep_dir / "report.html", title=f"Sweep {sweep_id}", summary=summary, recommendation=recommendation,
               table=pd.DataFrame(rows, columns=short), images=images, notes=[*notes, *model_lines])  # fmt: skip
