"""The terminal table: compact headers, formatted cells, failures in red, the recommendation.

The table never lies to fit a terminal: rather than let rich shrink columns (cutting 0.35 to
"0.3"), whole columns are chosen by priority for the width, each as wide as its widest cell,
and a footer line names the ones left out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from launcher.report.piped import cut, in_full, piped, reason_room, row_labels, stdout_console
from launcher.results import flags
from launcher.results.confidence import count
from launcher.results.policy import Recommendation
from launcher.results.scaling import variant_key
from launcher.results.table import peak_mismatch_line
from launcher.results.uncertainty import interval_text
from launcher.trials.ends import NOT_STARTED

# Short terminal headers; report.md and the CSV keep the real column names.
SHORT = {
    "world_size": "ranks",
    "tokens_per_s": "tokens/s",
    "tokens_per_s_per_device": "tok/s/dev",
    "samples_per_s": "samples/s",
    "step_time_median_s": "step s",
    "efficiency": "eff",
    "busbw_gbps": "busbw GB/s",
    "usd_per_1m_tokens": "$/1M tok",
    "bubble_measured": "bubble",
    "bubble_theory": "theory",
    "hours_to_budget": "h to budget",
    "device_hours_to_budget": "dev-h to budget",
    "usd_to_budget": "$ to budget",
    "device_hours_per_1m_tokens": "dev-h/1M tok",
    "jobs_per_hour": "runs/h",
    "tokens_per_s_interval": "interval",
    "comm_share": "comm",
    "memory_gib": "mem GiB",
    "flagged": "flags",
}

# Columns shown to people (the CSV/parquet keep them all), with their number formats.
DISPLAY = [
    ("variant", "{}"),
    ("world_size", "{:d}"),
    ("candidate", "{}"),
    ("nodes", "{:d}"),
    ("status", "{}"),
    ("repeats", "{:d}"),
    ("tokens_per_s", "{:,.0f}"),
    ("tokens_per_s_interval", "{}"),
    ("tokens_per_s_per_device", "{:,.0f}"),
    ("comm_share", "{:.0%}"),
    ("memory_gib", "{:.1f}"),
    ("samples_per_s", "{:,.1f}"),
    ("step_time_median_s", "{:.4f}"),
    ("efficiency", "{:.2f}"),
    ("mfu", "{:.3f}"),
    ("ccr", "{:.3f}"),
    ("busbw_gbps", "{:.2f}"),
    ("bubble_measured", "{:.2f}"),
    ("bubble_theory", "{:.2f}"),
    ("hours", "{:,.1f}"),
    ("jobs_per_hour", "{:.4f}"),
    ("usd_per_1m_tokens", "{:.4f}"),
    ("hours_to_budget", "{:,.1f}"),
    ("device_hours_to_budget", "{:,.0f}"),
    ("usd_to_budget", "{:,.0f}"),
    ("flagged", "{}"),
    ("reason", "{}"),
]
FINE = ("completed", "predicted", "skipped", "pending", "running", NOT_STARTED)  # any other is a failure, in red
# Shown only when some row has a value; the rest always (a dash says "not measured").
OPTIONAL = {
    "reason",
    "variant",
    "candidate",
    "nodes",
    "repeats",
    "flagged",
    "tokens_per_s_interval",
    "comm_share",
    "memory_gib",
    "bubble_measured",
    "bubble_theory",
    "hours",
    "jobs_per_hour",
    "hours_to_budget",
    "device_hours_to_budget",
    "usd_to_budget",
}


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    try:
        return fmt.format(int(value) if fmt == "{:d}" else value)
    except (ValueError, TypeError):
        return str(value)


def _shown_cell(row: pd.Series, col: str, fmt: str) -> str:
    """The value, with its size's interval where the row has one: `0.83 [0.76–0.90]`."""
    if col == "reason" and not isinstance(row[col], str):
        return ""  # a row that did not fail has no reason to give: blank, not a dash among the reasons
    tight = row.get("memory_tight")
    if col == "memory_gib" and isinstance(tight, (bool, np.bool_)) and tight:
        return f"{_cell(row[col], fmt)} tight"  # a plan's estimate within 5% of the usable memory (perf/notes.py)
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and pd.notna(row[col]):
        return interval_text(row[col], lo, hi, fmt)
    return _cell(row[col], fmt)


def display_rows(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of the table people read: a size's repeats folded into one row
    (fold_repeats), its figures shown with their intervals."""
    df = fold_repeats(df)

    def shown(c: str) -> bool:
        if c not in df.columns:
            return False
        if c in ("nodes", "repeats"):  # only where some trial spans several nodes / some size repeats
            return bool((pd.to_numeric(df[c], errors="coerce").fillna(1) > 1).any())
        return c not in OPTIONAL or bool((df[c].notna() & (df[c] != "")).any())

    cols = [(c, f) for c, f in DISPLAY if shown(c)]
    return [c for c, _ in cols], [[_shown_cell(row, c, f) for c, f in cols] for _, row in df.iterrows()]


def _folded(rows: pd.DataFrame) -> dict[str, Any]:
    """One row for a size's repeats: medians of the numbers over its completed trials (the
    intervals are the size's already), its distinct flags and reasons."""
    done = rows[rows["status"] == "completed"]
    out: dict[str, Any] = {}
    for c in rows.columns:
        numeric = pd.api.types.is_numeric_dtype(done[c]) and not pd.api.types.is_bool_dtype(done[c])
        out[c] = done[c].median() if numeric else done[c].iloc[0]
    out["flags"] = flags.join(done["flags"]) if "flags" in done else None
    reasons = list(dict.fromkeys(r for r in done.get("reason", []) if isinstance(r, str) and r))
    out.update(status="completed", repeats=len(done), reason="; ".join(reasons) or None)
    return out


def fold_repeats(df: pd.DataFrame) -> pd.DataFrame:
    """A size's completed repeats (and the repeats sweep.repeats=auto closed as not needed) as one
    row, with `repeats` counting its completed trials; every other row stays as it is, so a
    failed repeat still shows. Adds `flagged`, the kinds of flag a row carries. results.csv keeps
    every trial."""
    if df.empty or not {"world_size", "status"} <= set(df.columns) or "repeats" in df.columns:
        return df  # nothing to fold, or folded already
    df = df.reset_index(drop=True)
    variant = variant_key(df)
    key = list(zip(variant, df["world_size"], strict=True))
    done = df["status"] == "completed"
    sizes = {k for k, d in zip(key, done, strict=True) if d}
    member = [k in sizes and (d or s == "skipped") for k, d, s in zip(key, done, df["status"], strict=True)]
    rows, seen = [], set()
    for i, row in df.iterrows():
        if not member[i]:
            rows.append({**row.to_dict(), "repeats": None})
        elif key[i] not in seen:
            seen.add(key[i])
            mine = df[[member[j] and key[j] == key[i] for j in range(len(df))]]
            rows.append(_folded(mine) if len(mine) > 1 else {**row.to_dict(), "repeats": 1})
    out = pd.DataFrame(rows, columns=[*df.columns, "repeats"])
    cells = out["flags"] if "flags" in out else [None] * len(out)
    return out.assign(flagged=[", ".join(flags.kinds(c)) or None for c in cells])


def flag_lines(df: pd.DataFrame, unit: str = "rank") -> list[str]:
    """One line per size and kind of flag: the first such flag in full, and in how many of the
    size's trials it was raised."""
    if "flags" not in df or "world_size" not in df:
        return []
    lines = []
    variant = variant_key(df)
    for (v, n), rows in df.groupby([variant, "world_size"], sort=False):
        raised = [f for cell in rows["flags"] for f in flags.split(cell)]
        for kind in flags.kinds(flags.join(rows["flags"])):
            mine = [f for f in raised if flags.kinds(f) == [kind]]
            where = f"{v}, " if v else ""
            times = f" (in {len(mine)} of {len(rows)} trials)" if len(rows) > 1 else ""
            lines.append(f"{where}{count(int(n), unit)}: {mine[0]}{times}")
    return lines


# What a reader deciding "how many GPUs" needs first; every other column follows in DISPLAY
# order. `reason` is shown only where a row failed, and then says more than the figures after it
# (tokens/s per device and step time follow from tokens/s), so it comes right after the key numbers.
PRIORITY = (
    "variant",
    "world_size",
    "candidate",
    "status",
    "tokens_per_s",
    "efficiency",
    "memory_gib",
    "nodes",
    "reason",
    "tokens_per_s_per_device",
    "step_time_median_s",
    "mfu",
    "usd_per_1m_tokens",
)
PLAN_PRIORITY = ("variant", "world_size", "tokens_per_s", "memory_gib", "status", "efficiency", "candidate", "nodes")
"""A plan's order (`launcher plan`, `--search`): the predicted tokens/s and the memory they need first, so
that at 80 columns the recommended size's figures stay; a search's long candidate label gives way (the
footer's `Recommended:` line names the candidate). Every other column follows PRIORITY's order."""
REASON_MIN = 20  # narrower than this a wrapped reason is a column of word fragments: leave it out instead
_TEXT = ("variant", "candidate", "status", "reason")  # left-aligned; every other column is a number, right-aligned
_BORDER = 3  # rich's default box: one rule and a space of padding either side per column (+1 for the last rule)


@dataclass(frozen=True)
class Fit:
    """The columns shown at a width (in DISPLAY order) with their widths, and the ones left out."""

    columns: list[str]
    widths: list[int]
    dropped: list[str]


def header_name(col: str, unit: str = "rank") -> str:
    return f"{unit}s" if col == "world_size" else SHORT.get(col, col)


def _two_lines(header: str) -> int:
    """The narrowest width that wraps a header onto at most two lines (rich wraps greedily, which
    needs no more room than the best split)."""
    words = header.split()
    return min(max(cell_len(" ".join(words[:i])), cell_len(" ".join(words[i:]))) for i in range(1, len(words) + 1))


def _needs(header: Sequence[str], rows: Sequence[Sequence[str]], unit: str, compact: bool) -> list[int]:
    """Each column's narrowest honest width: its widest cell, and its header (compact: the header
    on two lines; a header may wrap, a number never)."""
    needs = []
    for i, col in enumerate(header):
        name = header_name(col, unit)
        head = _two_lines(name) if compact else cell_len(name)
        cells = max((cell_len(r[i]) for r in rows), default=0)
        needs.append(max(head, min(cells, REASON_MIN)) if col == "reason" else max(head, cells))
    return needs


def _greedy(header: Sequence[str], needs: Sequence[int], width: int, priority: Sequence[str] = PRIORITY) -> list[int]:
    """Indices of the columns that fit, taken in `priority` order (then PRIORITY's, then DISPLAY's); one
    that does not fit is skipped, and a later, narrower one may still take the room it left."""
    order = list(dict.fromkeys([*priority, *PRIORITY, *(c for c, _ in DISPLAY)]))
    rank = {c: i for i, c in enumerate(order)}
    used, keep = 1, []
    for i in sorted(range(len(header)), key=lambda i: rank.get(header[i], len(rank))):
        if used + needs[i] + _BORDER <= width:
            keep.append(i)
            used += needs[i] + _BORDER
    return sorted(keep)


def fit_columns(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    unit: str = "rank",
    priority: Sequence[str] = PRIORITY,
) -> Fit:
    """The columns of display_rows() that fit in `width` terminal columns, none cut. Columns with
    nothing in them (all "—") go first: none outlives one that says something (a failure's reason)."""
    fit = _fit(header, rows, width, unit, priority)
    empty = {c for i, c in enumerate(header) if rows and all(r[i] == "—" for r in rows)}
    if not empty or not set(fit.dropped) - empty:
        return fit
    keep = [i for i, c in enumerate(header) if c not in empty]
    fit = _fit([header[i] for i in keep], [[r[i] for i in keep] for r in rows], width, unit, priority)
    return Fit(fit.columns, fit.widths, [c for c in header if c not in fit.columns])


def _fit(
    header: Sequence[str], rows: Sequence[Sequence[str]], width: int, unit: str, priority: Sequence[str] = PRIORITY
) -> Fit:
    """Full headers first; only when that drops a column are long headers allowed to wrap to save room."""
    for compact in (False, True):
        needs = _needs(header, rows, unit, compact)
        keep = _greedy(header, needs, width, priority)
        if len(keep) == len(header):
            break
    widths = [needs[i] for i in keep]
    if "reason" in (cols := [header[i] for i in keep]):
        # The reason takes what is left, up to its longest cell; it wraps inside that.
        r = cols.index("reason")
        room = width - 1 - sum(w + _BORDER for w in widths) + widths[r]
        longest = max((cell_len(row[header.index("reason")]) for row in rows), default=0)
        widths[r] = min(room, max(needs[r], longest))
    return Fit(cols, widths, [c for i, c in enumerate(header) if i not in keep])


def _cut_reasons(fit: Fit, header: list[str], rows: list[list[str]], df: pd.DataFrame, unit: str):
    """Piped (report/piped.py): the reason column narrowed to keep the table within PIPED_MAX, longer
    reasons cut with "…" on their one line; returns the fit, the rows and the lines giving those whole."""
    r, i = fit.columns.index("reason"), header.index("reason")
    longest = max((cell_len(row[i]) for row in rows), default=0)
    width = reason_room(fit.widths, r, max(cell_len(header_name("reason", unit)), min(longest, REASON_MIN)), longest)
    full = in_full(row_labels(df, unit), [row[i] for row in rows], width)
    rows = [[*row[:i], cut(row[i], width), *row[i + 1 :]] for row in rows]
    return Fit(fit.columns, [width if k == r else w for k, w in enumerate(fit.widths)], fit.dropped), rows, full


def _table(fit: Fit, header: list[str], rows: list[list[str]], statuses: Sequence[Any], title: str, unit: str) -> Table:
    table = Table(title=title)
    for col, width in zip(fit.columns, fit.widths, strict=True):
        # An explicit width is one rich never shrinks; fit_columns made it hold every cell whole.
        table.add_column(
            header_name(col, unit), justify="left" if col in _TEXT else "right", width=width, overflow="fold"
        )
    shown = [header.index(c) for c in fit.columns]
    for row, status in zip(rows, statuses, strict=True):
        # Cells are data (reasons quote logs with [brackets]), never rich markup.
        table.add_row(*(Text(row[i]) for i in shown), style=None if status in FINE else "red")
    return table


def _left_out(width: int, names: list[str], where: str) -> str:
    """The footer naming the columns left out, wrapped by hand so that no name ("step s") is
    split across two lines the way rich's word wrap would."""
    words = [*f"not shown at {width} columns:".split(), *(f"{n}," for n in names[:-1]), names[-1], "—", *where.split()]
    lines = [words[0]]
    for word in words[1:]:
        if cell_len(lines[-1]) + 1 + cell_len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def print_table(
    df: pd.DataFrame,
    rec: Recommendation,
    title: str,
    footer: str = "",
    unit: str = "rank",
    *,
    console: Console | None = None,
    everything: str | None = "results.csv",
    priority: Sequence[str] = PRIORITY,
) -> None:
    """The table at the console's width, then its notes and the recommendation. `everything`
    names where the columns left out can be read (None: nowhere but a wider terminal); `priority`: which
    columns a narrow terminal keeps first (PLAN_PRIORITY for a plan)."""
    console = console or stdout_console()
    trials, df = df, fold_repeats(df)
    header, rows = display_rows(df)
    fit = fit_columns(header, rows, console.width, unit, priority)
    full: list[str] = []
    if piped(console) and "reason" in fit.columns:
        fit, rows, full = _cut_reasons(fit, header, rows, df, unit)
    table = _table(fit, header, rows, df["status"], title, unit)
    # Piped: the table as wide as it is (its title centred over it, not over PIPED_WIDTH); each line after it
    # whole, however long (a file has no edge: `Recommended: … <overrides>` stays one line for scripts).
    console.print(table, width=console.measure(table).maximum if piped(console) else None)
    for line in full:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if fit.dropped:
        where = f"all columns are in {everything}" if everything else "a wider terminal shows them"
        names = [header_name(c, unit) for c in fit.dropped]
        console.print(_left_out(console.width, names, where), markup=False, highlight=False)
    if mismatch := peak_mismatch_line(df):
        console.print(mismatch, markup=False, highlight=False)
    if "mfu" in header and df["mfu"].isna().all():  # its dashes shown, or the column left out as empty
        console.print("mfu —: the device's peak FLOP/s is unknown; set cluster.peak_flops_per_device")
    for line in flag_lines(trials, unit):
        console.print(f"flagged: {line}", markup=False, highlight=False)
    size = "none" if rec.world_size is None else str(rec.world_size)
    what = "world size" if unit == "rank" else f"{unit}s"
    console.print(f"[bold]Recommended {what}: {size}[/bold] — {escape(rec.reason)}")
    if rec.confidence:
        console.print(f"Confidence: {rec.confidence}", markup=False, highlight=False)
    if footer:
        console.print(footer, markup=False)
