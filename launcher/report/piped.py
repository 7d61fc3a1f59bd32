"""Tables printed to a pipe or a file: read by scripts and pagers, one row per line.

A terminal's width is the terminal's; piped output takes `COLUMNS` when it is set (as `ls` and rich do),
else every column at its natural width, except that a long failure reason never stretches a table past
PIPED_MAX: its cell is cut with "…" and the reason follows the table whole, one line each, so nothing is
dropped (results.csv and the trial's files keep it too)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd
from rich.console import Console
from rich.text import Text

from launcher.results.confidence import count

PIPED_WIDTH = 100_000  # piped or redirected without COLUMNS: as wide as the table is (a file has no edge)
PIPED_MAX = 160  # …but a reason column takes no more than this table width leaves it
_BORDER = 3  # rich's default box: one rule and a space of padding either side per column (+1 for the last rule)


def columns_asked() -> int | None:
    """The width `COLUMNS` asks for (a positive whole number), else None."""
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def stdout_console() -> Console:
    """rich console for stdout: a terminal's width; piped or redirected, `COLUMNS` when set, else the
    whole table at its natural width (not an 80-column guess)."""
    console = Console()  # rich reads COLUMNS itself
    return console if console.is_terminal or columns_asked() else Console(width=PIPED_WIDTH)


def piped(console: Console) -> bool:
    """The console is stdout_console's for a pipe or file without COLUMNS: no edge to fit to."""
    return console.width >= PIPED_WIDTH


def reason_room(widths: Sequence[int], reason: int, need: int, longest: int) -> int:
    """The width of the reason column (index `reason` of the shown `widths`) in a piped table: what keeps
    the table within PIPED_MAX, never under `need` (its header, or REASON_MIN), never over its `longest` cell."""
    others = 1 + sum(w + _BORDER for i, w in enumerate(widths) if i != reason) + _BORDER
    return max(need, min(longest, PIPED_MAX - others))


def cut(cell: str, width: int) -> str:
    """`cell` on one line of `width` cells, its end replaced by "…" where it is longer."""
    text = Text(" ".join(cell.split()))
    text.truncate(width, overflow="ellipsis")
    return text.plain


def row_labels(df: pd.DataFrame, unit: str) -> list[str]:
    """What names each row of a table in the lines after it: its combination or candidate, and its size."""
    labels = []
    for _, row in df.iterrows():
        named = [str(row[c]) for c in ("variant", "candidate") if isinstance(row.get(c), str) and row.get(c)]
        size = [count(int(row["world_size"]), unit)] if pd.notna(row.get("world_size")) else []
        labels.append(", ".join([*named, *size]) or "a row")
    return labels


def in_full(labels: Sequence[str], reasons: Sequence[str], width: int) -> list[str]:
    """The lines after a piped table: each reason its cell had to cut, whole, after its row's label."""
    lines = [
        f"  {lab}: {why}" for lab, why in zip(labels, reasons, strict=True) if cut(why, width) != " ".join(why.split())
    ]
    return [f"reasons in full (cut above to keep the table within {PIPED_MAX} columns):", *lines] if lines else []
