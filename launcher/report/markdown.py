"""report.md and report.html: the table, the recommendation, the model's fit and the plots."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from launcher.io import atomic_write_text
from launcher.report import plots
from launcher.report.html import write_html
from launcher.report.terminal import SHORT, display_rows, flag_lines
from launcher.results.policy import Recommendation
from launcher.results.table import peak_mismatch_line
from launcher.trials.folder import read_record, read_sweep_spec, trial_dirs


@dataclass(kw_only=True, frozen=True)
class ModelSummary:
    """What the report shows of the performance model (built by launcher/perf/summary.py, above this
    package: the report defines what it renders and the model fills it in)."""

    predictions: pd.DataFrame | None
    """calibrate.predictions(): per variant and size, predicted vs measured tokens/s; None when
    no model could be fitted (the lines say why)."""
    lines: list[str]
    """One line per layout: the fitted parameters and where each came from; then the in-sample error."""


def markdown_table(df: pd.DataFrame) -> str:
    header, rows = display_rows(df)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def priced(df: pd.DataFrame, sweep_dir: Path) -> bool:
    """Whether the sweep has a price: its sweep.json's cluster.usd_per_device_hour, else any $ in the table."""
    spec = read_sweep_spec(sweep_dir)
    cluster = ((spec.doc or {}).get("config") or {}).get("cluster") or {}
    if isinstance(cluster, dict) and "usd_per_device_hour" in cluster:
        return cluster["usd_per_device_hour"] is not None
    return "usd_per_1m_tokens" in df and bool(df["usd_per_1m_tokens"].notna().any())


def draw_plots(
    df: pd.DataFrame, *, threshold: float, sweep_dir: Path, model: ModelSummary | None, has_price: bool
) -> tuple[list[tuple[str, Path]], list[str]]:
    """Every PNG of the sweep as (caption, path), and a line for each plot left out (no price:
    no cost.png, and an earlier one is removed so no folder shows a stale or empty cost plot)."""
    images = [
        ("Throughput vs GPUs, with the ideal linear line", plots.plot_throughput(df, sweep_dir / "throughput.png")),
        (
            "Scaling efficiency vs GPUs, with the threshold",
            plots.plot_efficiency(df, threshold, sweep_dir / "efficiency.png"),
        ),
    ]
    left_out = []
    if has_price:
        images.append(("$ per 1M tokens vs GPUs", plots.plot_cost(df, sweep_dir / "cost.png")))
    else:
        (sweep_dir / "cost.png").unlink(missing_ok=True)
        left_out.append(f"$ per 1M tokens: {plots.NO_PRICE}")
    images.append(
        (
            "Throughput and efficiency side by side (scaling.png)",
            plots.plot_scaling(df, threshold, sweep_dir / "scaling.png"),
        )
    )
    if model is not None and model.predictions is not None:
        images.append(
            (
                "Measured vs predicted throughput (calibrated model, interval shaded)",
                plots.plot_predicted(model.predictions, sweep_dir / "predicted.png"),
            )
        )
    return images, left_out


TRACE_VIEWERS = (
    "Profiler traces open in Perfetto (ui.perfetto.dev) or chrome://tracing, or in TensorBoard's "
    "profiler plugin with `tensorboard --logdir trials`."
)


@dataclass(kw_only=True, frozen=True)
class Inside:
    """What the report says of the inside of one trial: its profiler trace, its GPUs as NVML saw them."""

    trial_id: str
    """The trial folder's name."""
    trace: str | None
    """The trace, relative to the sweep folder (where the report is); None: none was written."""
    gpu: str | None
    """NVML's figures of the timed window in words, or why there are none (GPU trials only)."""


def insides(sweep_dir: Path) -> list[Inside]:
    """Every trial whose record names a trace that is there, or whose GPUs NVML read (or failed to)."""
    out = []
    for tdir in trial_dirs(sweep_dir):
        record = read_record(tdir)
        if not record.ok:
            continue
        profile = record.doc.get("profile")
        name = profile.get("trace") if isinstance(profile, dict) else None
        # A plain file name only: a record is data, and its trace must not point out of its folder.
        plain = isinstance(name, str) and re.fullmatch(r"[\w.-]+", name) is not None and name not in (".", "..")
        trace = f"trials/{tdir.name}/{name}" if plain and (tdir / name).is_file() else None
        gpu = gpu_words(record.doc) if record.doc.get("device") == "cuda" else None
        if trace or gpu:
            out.append(Inside(trial_id=tdir.name, trace=trace, gpu=gpu))
    return out


def gpu_words(record: dict[str, Any]) -> str | None:
    """`GPU busy 87% (max 99%), 412 W (max 455 W), 61.2 GiB used at most` from the record's
    `metrics.nvml`, or `no NVML figures: <reason>`."""
    nvml = (record.get("metrics") or {}).get("nvml")
    if not isinstance(nvml, dict):
        return None
    parts = []
    if nvml.get("gpu_util_pct_mean") is not None:
        parts.append(f"GPU busy {nvml['gpu_util_pct_mean']:.0f}% (max {nvml['gpu_util_pct_max']:.0f}%)")
    if nvml.get("power_w_mean") is not None:
        parts.append(f"{nvml['power_w_mean']:.0f} W (max {nvml['power_w_max']:.0f} W)")
    if nvml.get("memory_used_bytes_max") is not None:
        parts.append(f"{nvml['memory_used_bytes_max'] / 2**30:.1f} GiB used at most")
    said = nvml.get("reason")
    if parts:
        return ", ".join(parts) + (f" ({said})" if said else "")
    return f"no NVML figures: {said}" if said else None


def inside_lines(found: Sequence[Inside]) -> list[str]:
    """report.md's section on the inside of the trials (nothing when no trial has anything to show)."""
    if not found:
        return []
    lines = ["## Inside the trials", ""]
    for t in found:
        bits = [f"[profiler trace]({t.trace})" if t.trace else None, t.gpu]
        lines.append(f"- `{t.trial_id}`: " + " · ".join(b for b in bits if b))
    if any(t.trace for t in found):
        lines += ["", TRACE_VIEWERS]
    return [*lines, ""]


def write_report(
    df: pd.DataFrame,
    rec: Recommendation,
    *,
    sweep_id: str,
    summary: str,
    threshold: float,
    sweep_dir: Path,
    model: ModelSummary | None = None,
    notes: Sequence[str] = (),
    has_price: bool | None = None,
) -> None:
    """report.md and a self-contained report.html, both showing every PNG written beside them.
    `has_price` None: read from the sweep folder (see priced)."""
    has_price = priced(df, sweep_dir) if has_price is None else has_price
    images, left_out = draw_plots(df, threshold=threshold, sweep_dir=sweep_dir, model=model, has_price=has_price)
    model_lines: list[str] = []
    if model is not None:
        model_lines = ["Performance model (step = compute + exposed all-reduce + bubble + overhead):", *model.lines]
    size = "none" if rec.world_size is None else str(rec.world_size)
    recommendation = f"Recommended world size: {size} — {rec.reason}"
    confidence = [f"Confidence: {rec.confidence}"] if rec.confidence else []
    # The table's footer: an MFU not to trust, and trials whose figures are not what they seem.
    flags = [line for line in [peak_mismatch_line(df)] if line] + [f"flagged: {line}" for line in flag_lines(df)]
    inside = insides(sweep_dir)
    text = "\n".join(
        [
            f"# Sweep {sweep_id}",
            "",
            summary,
            "",
            f"**Recommended world size: {size}** — {rec.reason}",
            "",
            *[f"{line}\n" for line in confidence],
            markdown_table(df),
            "",
            *[f"**{line}**\n" for line in flags],
            *[f"{n}\n" for n in notes],
            *[f"- {line}" if i else f"{line}\n" for i, line in enumerate(model_lines)],
            "",
            *[f"![{caption}]({path.name})" for caption, path in images],
            "",
            *[f"{line}\n" for line in left_out],
            *inside_lines(inside),
            "Every column, per trial: `results.csv` / `results.parquet`. Per-trial records and logs: `trials/`. "
            "The same report as one file: `report.html`.",
            "",
        ]
    )
    atomic_write_text(sweep_dir / "report.md", text)
    header, rows = display_rows(df)
    short = [c if c == "status" else SHORT.get(c, c) for c in header]  # the terminal's compact headers
    write_html(
        path=sweep_dir / "report.html",
        title=f"Sweep {sweep_id}",
        summary=summary,
        recommendation=recommendation,
        table=pd.DataFrame(rows, columns=short),
        images=images,
        notes=[*flags, *notes, *model_lines],
        figure_notes=left_out,
        confidence=" ".join(confidence),
        inside=inside,
        inside_note=TRACE_VIEWERS if any(t.trace for t in inside) else "",
    )
