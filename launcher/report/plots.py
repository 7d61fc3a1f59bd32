"""PNG plots of a results table: throughput, efficiency, cost, prediction, and the two-panel scaling.png.

Every function draws one figure, writes it atomically to `path` and returns `path`. Tables with
nothing to draw (no completed trial, no price) still give a PNG that says so: a report that is
missing a figure reads like a crash, one that says "no completed trials" reads like the result.
(The report writer leaves cost.png out of an unpriced sweep and says NO_PRICE in one line instead.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from launcher.results.scaling import by_size

DPI = 100
NO_TRIALS = "no completed trials"
NO_PRICE = "no price set (cluster.usd_per_device_hour)"
XLABEL = "GPUs (world size)"
LOG_SPAN = 8  # sizes spanning this factor or more get a log2 x axis, so 1, 2, 4 are not squashed together

_SIZE = (6, 4)  # single-panel figures, inches
_SCALING_SIZE = (10, 4)  # scaling.png, as report.md has always shown it


def _pyplot():
    # Lazy: matplotlib costs ~0.5 s to import and only the report writer draws. Sweeps run on
    # headless login nodes, so the Agg backend is chosen before pyplot (lazy too) loads.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy, after the backend is set

    return plt


def _summary(df: pd.DataFrame) -> pd.DataFrame:
    """by_size over the completed trials; an empty frame (not an error) when there are none."""
    if df.empty or "status" not in df or "efficiency" not in df:
        return pd.DataFrame(columns=["variant", "world_size", "tokens_per_s", "efficiency", "speedup", "completed"])
    # Concatenated tables repeat index labels, which by_size's column alignment cannot take.
    df = df.reset_index(drop=True)
    # Older by_size counts repeats with trial_id; hand-made tables may not carry one.
    if "trial_id" not in df:
        df = df.assign(trial_id=range(len(df)))
    if "speedup" not in df:
        df = df.assign(speedup=float("nan"))
    return by_size(df)


def _completed(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "status" not in df:
        return df.iloc[0:0]
    return df[df["status"] == "completed"]


def _scaling_kind(df: pd.DataFrame) -> str:
    done = _completed(df)
    if "scaling" not in done or done["scaling"].dropna().empty:
        return "weak"
    return str(done["scaling"].dropna().iloc[0])


def _name(variant: Any, default: str | None) -> str | None:
    """A legend label; an unswept run (null or "" variant) gets `default`."""
    return default if variant is None or variant == "" or pd.isna(variant) else str(variant)


def _set_sizes(ax, sizes) -> None:
    """Ticks at exactly the measured sizes; log2 when they span LOG_SPAN× or more."""
    # Lazy, as in _pyplot: matplotlib loads only when a plot is drawn.
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    sizes = sorted({int(s) for s in sizes if pd.notna(s) and s > 0})
    if not sizes:
        return
    log = sizes[-1] / sizes[0] >= LOG_SPAN
    if log:
        ax.set_xscale("log", base=2)
        # Log axes add minor ticks and 2^k labels; people asked for ranks, so show the ranks.
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(FixedFormatter([str(s) for s in sizes]))
    # From the sizes, not the lines: autoscale would hide a size that only failed (or keep 0…1
    # when nothing was drawn at all).
    lo, hi = sizes[0], sizes[-1]
    pad = max(0.25, (hi - lo) * 0.05)
    ax.set_xlim((lo / 1.2, hi * 1.2) if log else (lo - pad, hi + pad))


def _world_sizes(df: pd.DataFrame) -> list:
    """Every size in the table, failed ones too: an axis showing 8 with no point says 8 was tried."""
    return df["world_size"].dropna().unique().tolist() if "world_size" in df else []


def _finish(ax) -> None:
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def _message(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="0.4")


def _save(fig, path: Path) -> Path:
    """Write the figure beside its final name, then rename: a reader never sees half a PNG."""
    plt = _pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    try:
        fig.tight_layout()
        fig.savefig(tmp, dpi=DPI, format="png")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return path


def _figure(figsize=_SIZE):
    return _pyplot().subplots(figsize=figsize)


def _band(ax, g: pd.DataFrame, col: str, color, label: str | None = None) -> None:
    """Each size's 90% bootstrap interval of `col` as a shaded band (by_size's `<col>_lo/_hi`);
    nothing where a size's spread is unknown (one repeat)."""
    lo, hi = f"{col}_lo", f"{col}_hi"
    if lo in g and hi in g and (g[lo].notna() & (g[lo] < g[hi])).any():
        ax.fill_between(g["world_size"], g[lo], g[hi], color=color, alpha=0.2, linewidth=0, label=label)


def plot_throughput(df: pd.DataFrame, path: Path) -> Path:
    """tokens/s per size, one line per variant, with the ideal linear line from each smallest size."""
    sizes = _summary(df)
    fig, ax = _figure()
    ax.set(xlabel=XLABEL, ylabel="tokens/s", title="Throughput")
    if sizes.empty:
        _message(ax, NO_TRIALS)
    ideal_labelled = False
    for variant, g in sizes.groupby("variant"):
        line = ax.plot(g["world_size"], g["tokens_per_s"], "o-", label=_name(variant, "measured"))[0]
        _band(ax, g, "tokens_per_s", line.get_color())
        n0, t0 = g["world_size"].iloc[0], g["tokens_per_s"].iloc[0]
        # One legend entry explains every dashed line; each variant's ideal shares its colour.
        label = None if ideal_labelled else "ideal (linear)"
        ideal_labelled = True
        ax.plot(g["world_size"], t0 * g["world_size"] / n0, "--", color=line.get_color(), alpha=0.4, label=label)
    _set_sizes(ax, _world_sizes(df))
    _finish(ax)
    return _save(fig, path)


def _efficiency_top(sizes: pd.DataFrame) -> float:
    """The efficiency axis' top: 1.1, or higher so superlinear runs and wide intervals stay visible."""
    cols = [c for c in ("efficiency", "efficiency_hi") if c in sizes]
    highest = sizes[cols].max().max() if cols and not sizes.empty else 1.0
    return max(1.1, float(highest) * 1.05) if pd.notna(highest) else 1.1


def plot_efficiency(df: pd.DataFrame, threshold: float, path: Path) -> Path:
    """Efficiency per size, one line per variant, with the recommendation threshold."""
    sizes = _summary(df)
    fig, ax = _figure()
    top = _efficiency_top(sizes)
    ax.set(
        xlabel=XLABEL, ylabel="efficiency", title=f"{_scaling_kind(df).capitalize()}-scaling efficiency", ylim=(0, top)
    )
    if sizes.empty:
        _message(ax, NO_TRIALS)
    for variant, g in sizes.groupby("variant"):
        line = ax.plot(g["world_size"], g["efficiency"], "o-", label=_name(variant, None))[0]
        _band(ax, g, "efficiency", line.get_color(), label="90% interval" if not variant else None)
    ax.axhline(threshold, color="red", linestyle=":", label=f"threshold {threshold:.2f}")
    _set_sizes(ax, _world_sizes(df))
    _finish(ax)
    return _save(fig, path)


def _cost(df: pd.DataFrame) -> pd.DataFrame:
    """Median $ per 1M tokens per (variant, size) over completed trials that have a price."""
    done = _completed(df)
    if "usd_per_1m_tokens" not in done:
        return pd.DataFrame(columns=["variant", "world_size", "usd_per_1m_tokens"])
    done = done[done["usd_per_1m_tokens"].notna()]
    variant = done["variant"].fillna("") if "variant" in done else pd.Series("", index=done.index)
    out = done.assign(variant=variant).groupby(["variant", "world_size"], as_index=False)["usd_per_1m_tokens"].median()
    return out.sort_values(["variant", "world_size"]).reset_index(drop=True)


def plot_cost(df: pd.DataFrame, path: Path) -> Path:
    """$ per 1M tokens per size; says where the price is set when none is known."""
    cost = _cost(df)
    fig, ax = _figure()
    ax.set(xlabel=XLABEL, ylabel="$ per 1M tokens", title="Cost")
    if _completed(df).empty:
        _message(ax, NO_TRIALS)
    elif cost.empty:
        _message(ax, NO_PRICE)
    for variant, g in cost.groupby("variant"):
        ax.plot(g["world_size"], g["usd_per_1m_tokens"], "o-", label=_name(variant, None))
    _set_sizes(ax, _world_sizes(df))
    _finish(ax)
    return _save(fig, path)


def plot_predicted(pred: pd.DataFrame, path: Path) -> Path:
    """Predicted tokens/s with its interval as a band, and what was measured as markers."""
    fig, ax = _figure()
    ax.set(xlabel=XLABEL, ylabel="tokens/s", title="Measured vs predicted throughput")
    rows = pred[pred["predicted_tokens_per_s"].notna()] if "predicted_tokens_per_s" in pred else pred.iloc[0:0]
    if rows.empty:
        _message(ax, NO_TRIALS)
    variant = rows["variant"].fillna("") if "variant" in rows else pd.Series("", index=rows.index)
    several = variant.nunique() > 1
    for name, g in rows.assign(variant=variant).sort_values("world_size").groupby("variant"):
        # With one variant the legend names the series; with several it must name the variant too.
        prefix = f"{name}: " if several else ""
        line = ax.plot(g["world_size"], g["predicted_tokens_per_s"], "-", label=f"{prefix}predicted")[0]
        if {"low_tokens_per_s", "high_tokens_per_s"} <= set(g.columns):
            ax.fill_between(
                g["world_size"],
                g["low_tokens_per_s"],
                g["high_tokens_per_s"],
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
                label=f"{prefix}interval",
            )
        if "measured_tokens_per_s" in g:
            m = g[g["measured_tokens_per_s"].notna()]
            if not m.empty:
                ax.plot(
                    m["world_size"], m["measured_tokens_per_s"], "o", color=line.get_color(), label=f"{prefix}measured"
                )
    _set_sizes(ax, _world_sizes(pred))
    _finish(ax)
    return _save(fig, path)


def plot_scaling(df: pd.DataFrame, threshold: float, path: Path) -> Path:
    """Throughput vs world size with the ideal line, and efficiency with the threshold (scaling.png)."""
    plt = _pyplot()
    sizes = _summary(df)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=_SCALING_SIZE)
    for variant, g in sizes.groupby("variant"):
        name = variant or "measured"
        line = ax1.plot(g["world_size"], g["tokens_per_s"], "o-", label=name)[0]
        n0, t0 = g["world_size"].iloc[0], g["tokens_per_s"].iloc[0]
        ideal = "ideal (linear)" if not variant else None
        ax1.plot(g["world_size"], t0 * g["world_size"] / n0, "--", color=line.get_color(), alpha=0.4, label=ideal)
        ax2.plot(g["world_size"], g["efficiency"], "o-", color=line.get_color(), label=variant or None)
        _band(ax1, g, "tokens_per_s", line.get_color())
        _band(ax2, g, "efficiency", line.get_color())
    ax2.axhline(threshold, color="red", linestyle=":", label=f"threshold {threshold:.2f}")
    scaling = _scaling_kind(df)
    ax1.set(xlabel="world size (ranks)", ylabel="tokens/s", title="Throughput")
    ax2.set(
        xlabel="world size (ranks)",
        ylabel="efficiency",
        title=f"{scaling.capitalize()}-scaling efficiency",
        ylim=(0, _efficiency_top(sizes)),
    )
    for ax in (ax1, ax2):
        if sizes.empty:
            _message(ax, NO_TRIALS)
        if "world_size" in df:
            ax.set_xticks(sorted(df["world_size"].unique()))
        _finish(ax)
    return _save(fig, path)
