"""report.html: one self-contained file (plots inlined as data URIs, styles inline) that can be
mailed, attached to a ticket or opened from a cluster's scratch without the sweep folder."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment
from markupsafe import Markup, escape

from launcher.io import atomic_write_text

# Cells that read as numbers (1, 6,150, -0.0832, 1.2e-05, 95%, 1.30×, 0.83 [0.76–0.90]), and the ways a
# table says "no value".
_NUM = r"[-+]?(\d{1,3}(,\d{3})+|\d*)(\.\d+)?([eE][-+]?\d+)?[%×]?"
_NUMBER = re.compile(rf"^{_NUM}( \[{_NUM}–{_NUM}\])?$")
_MISSING = ("", "—", "-", "nan", "NaN", "None")

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; }
.recommendation { font-size: 1.1em; padding: 0.6em 0.9em; background: #eef6ee; border-left: 4px solid #3a7d3a; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.bad td { background: #fde8e8; color: #8a1010; }
figure { display: inline-block; margin: 1em 1em 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #555; text-align: center; }
code { background: #f3f3f3; padding: 0 0.2em; }
.notes { font-size: 0.9em; color: #555; }
.figure-note { color: #555; font-style: italic; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="summary">{{ summary | inline_code }}</p>
<p class="recommendation"><strong>{{ recommendation }}</strong></p>
{% if confidence %}<p class="confidence">{{ confidence }}</p>
{% endif %}<div class="table-wrap">
<table>
<thead><tr>
{%- for col in columns %}<th{% if col.numeric %} class="num"{% endif %}>{{ col.name }}</th>{% endfor -%}
</tr></thead>
<tbody>
{% for row in rows %}<tr{% if row.bad %} class="bad"{% endif %}>
{%- for cell, col in zip(row.cells, columns) -%}
<td{% if col.numeric %} class="num"{% endif %}>{{ cell }}</td>
{%- endfor -%}
</tr>
{% endfor %}</tbody>
</table>
</div>
{% for image in images %}<figure>
<img src="data:image/png;base64,{{ image.data }}" alt="{{ image.caption }}">
<figcaption>{{ image.caption }}</figcaption>
</figure>
{% endfor %}{% for note in figure_notes %}<p class="figure-note">{{ note | inline_code }}</p>
{% endfor %}{% if inside %}<h2>Inside the trials</h2>
<ul class="inside">
{% for t in inside %}<li><code>{{ t.trial_id }}</code>:
{%- if t.trace %} <a href="{{ t.trace }}">profiler trace</a>{% endif %}
{%- if t.trace and t.gpu %} ·{% endif %}{% if t.gpu %} {{ t.gpu }}{% endif %}</li>
{% endfor %}</ul>
{% if inside_note %}<p class="notes">{{ inside_note | inline_code }}</p>
{% endif %}{% endif %}{% if notes %}<ul class="notes">
{% for note in notes %}<li>{{ note | inline_code }}</li>
{% endfor %}</ul>
{% endif %}</body>
</html>
"""


def _inline_code(text: str) -> Markup:
    """Escape, then show `backticked` names (the summaries are written for report.md) as <code>."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


def _environment() -> Environment:
    env = Environment(autoescape=True, keep_trailing_newline=True)
    env.filters["inline_code"] = _inline_code
    env.globals["zip"] = zip
    return env


def _numeric(values: pd.Series) -> bool:
    """A column is right-aligned when every value it has reads as a number. A column of dashes
    only is a metric nobody could measure (mfu without a peak): it aligns like the numbers."""
    present = [str(v) for v in values if str(v).strip() not in _MISSING]
    return all(_NUMBER.match(v.strip()) and any(c.isdigit() for c in v) for v in present)


def _rows(table: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    columns = [{"name": str(c), "numeric": _numeric(table.iloc[:, i])} for i, c in enumerate(table.columns)]
    status = list(table.columns).index("status") if "status" in table.columns else None
    rows = []
    for values in table.itertuples(index=False, name=None):
        cells = ["" if v is None else str(v) for v in values]
        # Failed, cancelled, pending, …: anything short of completed is what a reader must see.
        rows.append({"cells": cells, "bad": status is not None and cells[status] != "completed"})
    return columns, rows


def _image(caption: str, png: Path) -> dict:
    return {"caption": caption, "data": base64.b64encode(Path(png).read_bytes()).decode("ascii")}


def render_html(
    *,
    title: str,
    summary: str,
    recommendation: str,
    table: pd.DataFrame,
    images: Sequence[tuple[str, Path]],
    notes: Sequence[str] = (),
    figure_notes: Sequence[str] = (),
    confidence: str = "",
    inside: Sequence[Any] = (),
    inside_note: str = "",
) -> str:
    """The page as a string (see write_html)."""
    columns, rows = _rows(table)
    return (
        _environment()
        .from_string(_TEMPLATE)
        .render(
            title=title,
            summary=summary,
            recommendation=recommendation,
            confidence=confidence,
            columns=columns,
            rows=rows,
            images=[_image(caption, png) for caption, png in images],
            notes=list(notes),
            figure_notes=list(figure_notes),
            inside=list(inside),
            inside_note=inside_note,
        )
    )


def write_html(
    *,
    path: Path,
    title: str,
    summary: str,
    recommendation: str,
    table: pd.DataFrame,
    images: Sequence[tuple[str, Path]],
    notes: Sequence[str] = (),
    figure_notes: Sequence[str] = (),
    confidence: str = "",
    inside: Sequence[Any] = (),
    inside_note: str = "",
) -> Path:
    """Write report.html atomically. `table` is the display table (strings; headers are column
    names); its cells are data and are escaped. A row whose `status` is not "completed" is
    highlighted. `images` are (caption, PNG path) pairs, inlined so the file stands alone;
    `figure_notes` are one line each, after them, for a plot left out (e.g. no price set);
    `confidence` a line under the recommendation saying how sure it is; `inside` each trial's
    profiler trace (linked relative to the page: the trial folders stay beside it) and NVML
    figures (markdown.Inside), `inside_note` a line under them."""
    text = render_html(
        title=title,
        summary=summary,
        recommendation=recommendation,
        table=table,
        images=images,
        notes=notes,
        figure_notes=figure_notes,
        confidence=confidence,
        inside=inside,
        inside_note=inside_note,
    )
    # Non-ASCII (—, ×, ≥) as character references: atomic_write_text writes in the locale's
    # encoding, and the page must read the same whatever that was.
    atomic_write_text(path, text.encode("ascii", "xmlcharrefreplace").decode("ascii"))
    return Path(path)
