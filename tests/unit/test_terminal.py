"""The terminal table never lies to fit a width: whole columns are left out (and named), a number
is never cut, folded or re-rounded, and no line is wider than the terminal."""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from rich.cells import cell_len
from rich.console import Console

from launcher.report.terminal import DISPLAY, FINE, display_rows, header_name, print_table
from launcher.results.policy import Recommendation
from launcher.results.table import COLUMNS

KEY = ("variant", "world_size", "status", "tokens_per_s", "efficiency")  # shown at 60 columns and wider
FMT = dict(DISPLAY)
BY_HEADER = {header_name(c): c for c, _ in DISPLAY}
PRICE = 2.5  # $ per device-hour
BUDGET = 1e9  # tokens
NODE_FAIL = "a node failed (Slurm NODE_FAIL on gpu-node-07) while rank 9 was in all_reduce [NCCL watchdog]"
OOM = "out of memory (infeasible at this size and layout): rank 0 raised RuntimeError: CUDA out of memory"

# A layout × accumulation sweep on 8-GPU nodes: (variant, ranks, status, tokens/s, step s, eff,
# mfu, ccr, busbw GB/s, bubble measured, bubble theory, reason).
TRIALS = [
    ("ddp-accum1", 4, "completed", 131072.4, 0.0625, 1.0, 0.412, 0.081, 181.37, None, None, None),
    ("ddp-accum1", 8, "completed", 229015.8, 0.07154, 0.8736, 0.359, 0.142, 176.05, None, None, None),
    ("ddp-accum1", 16, "completed", 182994.5, 0.17907, 0.349, 0.1437, 0.6149, 23.904, None, None, None),
    ("ddp-accum4", 4, "completed", 139810.1, 0.23437, 1.0, 0.4391, 0.022, 179.5, None, None, None),
    ("ddp-accum4", 8, "completed", 268435.5, 0.24414, 0.96, 0.4215, 0.04, 177.99, None, None, None),
    ("ddp-accum4", 16, "node_fail", None, None, None, None, None, None, None, None, NODE_FAIL),
    ("fsdp-accum1", 4, "completed", 98304.7, 0.08333, 1.0, 0.309, 0.2055, 97.125, None, None, None),
    ("fsdp-accum1", 8, "completed", 171966.3, 0.09527, 0.8747, 0.2703, 0.3004, 95.5, None, None, None),
    ("fsdp-accum1", 16, "oom", None, None, None, None, None, None, None, None, OOM),
    ("fsdp-accum4", 4, "completed", 110376.2, 0.29687, 1.0, 0.3469, 0.061, 98.0, None, None, None),
    ("fsdp-accum4", 8, "completed", 214748.4, 0.30517, 0.9728, 0.3375, 0.1, 96.75, None, None, None),
    (
        "fsdp-accum4",
        16,
        "corrupt",
        401001.9,
        0.32689,
        0.9083,
        0.3151,
        0.133,
        95.0,
        None,
        None,
        "record.json is truncated (212 bytes); the outcome says completed",
    ),
    ("pipeline-accum1", 4, "completed", 65536.0, 0.125, 1.0, 0.206, 0.01, 12.5, 0.4021, 0.6, None),
    ("pipeline-accum1", 8, "completed", 104857.6, 0.15625, 0.8, 0.1648, 0.012, 11.75, 0.5519, 0.7778, None),
    ("pipeline-accum4", 4, "completed", 123361.9, 0.26562, 1.0, 0.3878, 0.004, 12.0, 0.2044, 0.2727, None),
    ("pipeline-accum4", 8, "completed", 213995.1, 0.30623, 0.8673, 0.3364, 0.005, 11.5, 0.3014, 0.4667, None),
    (
        "pipeline-accum4",
        16,
        "skipped",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        "impossible: model.n_layers=12 is not divisible by pipeline stages pp(16) × v(1) = 16",
    ),
]


def _table() -> pd.DataFrame:
    fields = [
        "variant",
        "world_size",
        "status",
        "tokens_per_s",
        "step_time_median_s",
        "efficiency",
        "mfu",
        "ccr",
        "busbw_gbps",
        "bubble_measured",
        "bubble_theory",
        "reason",
    ]
    df = pd.DataFrame([dict(zip(fields, t, strict=True)) for t in TRIALS])
    df["trial_id"] = [f"{i:03d}-{v}-ws{n}" for i, (v, n) in enumerate(zip(df["variant"], df["world_size"]))]
    df["layout"], df["accum"] = df["variant"].str.split("-accum", expand=True).T.values
    df["nodes"] = -(-df["world_size"] // 8)
    df["tokens_per_s_per_device"] = df["tokens_per_s"] / df["world_size"]
    df["samples_per_s"] = df["tokens_per_s"] / 1024
    device_hours = df["world_size"] * BUDGET / df["tokens_per_s"] / 3600
    df["usd_per_1m_tokens"] = PRICE * device_hours / (BUDGET / 1e6)
    df["hours_to_budget"] = BUDGET / df["tokens_per_s"] / 3600
    df["device_hours_to_budget"] = device_hours
    df["usd_to_budget"] = PRICE * device_hours
    return df.reindex(columns=COLUMNS)


@pytest.fixture(scope="module")
def csv(tmp_path_factory) -> pd.DataFrame:
    """The table as results.csv holds it: what every printed number must agree with."""
    path = tmp_path_factory.mktemp("sweep") / "results.csv"
    _table().to_csv(path, index=False)
    return pd.read_csv(path)


def render(width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    rec = Recommendation(world_size=8, reason="ddp-accum4, 8 ranks: largest size with efficiency ≥ 0.80 (0.96)")
    print_table(_table(), rec, title="sweep mix", footer="results: results/mix/results.csv", console=console)
    return console.export_text()


def parse(text: str) -> tuple[dict[str, list[str]], list[str]]:
    """The printed table as {DISPLAY column: cells}, a wrapped cell joined back into one; and the
    lines printed after it."""
    lines = text.splitlines()
    top, mid, bottom = (next(i for i, ln in enumerate(lines) if ln.startswith(c)) for c in "┏┡└")
    heads = [" ".join(parts).strip() for parts in zip(*(_cells(ln, "┃") for ln in lines[top + 1 : mid]))]
    rows: list[list[str]] = []
    ranks = heads.index(header_name("world_size"))
    for ln in lines[mid + 1 : bottom]:
        cells = _cells(ln, "│")
        if cells[ranks]:
            rows.append(cells)
        else:  # a wrapped reason's next line: every other cell is blank
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    columns = {BY_HEADER[h]: [r[i] for r in rows] for i, h in enumerate(heads)}
    return columns, lines[bottom + 1 :]


def _cells(line: str, rule: str) -> list[str]:
    return [c.strip() for c in line.split(rule)[1:-1]]


def _agrees(cell: str, value, fmt: str) -> bool:
    """The printed cell is the CSV value rounded as DISPLAY's format says, digits and all."""
    if pd.isna(value):
        return cell == "—"
    if fmt == "{}":
        return cell == str(value)
    if fmt == "{:d}":
        return cell == str(int(value))
    places = int(re.search(r"\.(\d+)", fmt)[1])
    number, percent = (value * 100, "%") if fmt.endswith("%}") else (value, "")
    shown = re.fullmatch(rf"(-?[\d,]+(?:\.\d{{{places}}})?){percent}", cell)
    return bool(shown) and float(shown[1].replace(",", "")) == round(number, places)


def _dropped(after: list[str], width: int) -> list[str]:
    footer = " ".join(" ".join(after).split())  # wrapped onto several lines, maybe
    said = re.search(rf"not shown at {width} columns: (.*?) — all columns are in results\.csv", footer)
    return said[1].split(", ") if said else []


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_cell_is_whole_and_every_number_true(width, csv):
    text = render(width)
    assert max(map(cell_len, text.splitlines())) <= width
    assert "…" not in text
    columns, after = parse(text)
    for col, cells in columns.items():
        assert len(cells) == len(csv)
        for cell, value in zip(cells, csv[col], strict=True):
            if col == "reason":  # wrapped onto several lines: the words are the CSV's, in order
                assert cell.split() == ([] if pd.isna(value) else value.split())
            else:
                assert _agrees(cell, value, FMT[col]), (col, cell, value)
    if width <= 80:
        assert set(KEY) <= set(columns)
    header, _ = display_rows(_table())
    assert _dropped(after, width) == [header_name(c) for c in header if c not in columns]


def test_at_80_columns_every_efficiency_is_the_csv_value_rounded_to_2_places(csv):
    columns, _ = parse(render(80))
    printed = [None if cell == "—" else float(cell) for cell in columns["efficiency"]]
    expected = [None if pd.isna(e) else round(e, 2) for e in csv["efficiency"]]
    assert printed == expected
    assert printed[2] == 0.35  # 0.349: rounded, never cut to "0.3"


def test_narrow_widths_drop_columns_and_say_so(csv):
    for width in range(30, 201, 17):
        text = render(width)
        assert max(map(cell_len, text.splitlines())) <= width and "…" not in text
        columns, after = parse(text)
        header, _ = display_rows(_table())
        assert _dropped(after, width) == [header_name(c) for c in header if c not in columns]
        for col, cells in columns.items():
            if col != "reason":
                assert all(_agrees(c, v, FMT[col]) for c, v in zip(cells, csv[col], strict=True)), col


def test_piped_output_keeps_every_column(capsys, monkeypatch, csv):
    """Every column, one line a row; its other columns already past 160, the reasons are cut to the
    narrowest reason column (REASON_MIN) and follow the table whole (test_terminal_reason.py: the cut)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    rec = Recommendation(world_size=8, reason="8 ranks")
    print_table(_table(), rec, title="sweep mix")  # capsys's stdout is no terminal
    out = capsys.readouterr().out
    header, _ = display_rows(_table())
    columns, after = parse(out)
    assert list(columns) == [c for c in header if c in columns] and set(columns) == set(header)
    assert "not shown" not in " ".join(after)
    assert all(_agrees(c, v, FMT[k]) for k in columns if k != "reason" for c, v in zip(columns[k], csv[k]))
    cut = [(c, r) for c, r in zip(columns["reason"], csv["reason"], strict=True) if c.endswith("…")]
    assert cut and all(r.startswith(c[:-1]) for c, r in cut)  # cut, never changed
    assert after[0] == "reasons in full (cut above to keep the table within 160 columns):"
    assert [ln.split(": ", 1)[1] for ln in after[1 : 1 + len(cut)]] == [r for _, r in cut]


def test_failures_are_red_and_cells_are_never_markup():
    assert "corrupt" not in FINE
    console = Console(width=200, record=True, file=io.StringIO(), force_terminal=True, color_system="standard")
    print_table(_table(), Recommendation(world_size=None, reason="none"), title="t", console=console)
    styled = console.export_text(styles=True).splitlines()
    plain = {re.sub(r"\x1b\[[\d;]*m", "", ln): ln for ln in styled}  # the text of each line → its styled line
    for status in ("corrupt", "oom", "node_fail"):
        line = next(ln for ln in plain if re.search(rf"│ {status} +│", ln))
        assert "\x1b[31m" in plain[line], status
    assert "\x1b[31m" not in plain[next(ln for ln in plain if "131,072" in ln)]  # ddp-accum1, 4 ranks: completed
    assert "[NCCL" in "".join(plain)  # a reason's [brackets] are text, not rich markup
