"""At 80 columns a failed trial's reason is shown: columns with nothing in them (a CPU sweep's MFU,
a sweep without a price's $/1M tokens) go first, and the reason comes right after the key numbers.
Piped or redirected, a table takes COLUMNS when it is set; without it every column shows at its natural
width, one line a row, and a long reason is cut in its row (the table within 160 columns) and printed whole
below it (issue 31, item 12)."""

from __future__ import annotations

import io

import pandas as pd
from rich.cells import cell_len
from rich.console import Console

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.report.terminal import display_rows, header_name, print_table
from launcher.results.policy import Recommendation
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS
from launcher.run.sweep import create_sweep_dir
from launcher.trials.folder import trial_dir, write_outcome
from launcher.trials.spec import sweep_trials

REASON = "rank 3 log ends: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 32x10)"


def _cpu_sweep(failed: set[int], reason: str = REASON) -> pd.DataFrame:
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
                "reason": reason if n in failed else None,
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


# A reason as long as a rank's log line can be (meaningful_line keeps 160) joined to the executor's words.
LONG = "rank 3 exited with code 1; rank 3 log ends: RuntimeError: " + " ".join(f"word{i}" for i in range(70))


def _rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines if ln.startswith("│")]


def test_piped_a_long_reason_is_cut_in_its_row_and_printed_whole_below(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    df = _cpu_sweep(failed={4}, reason=LONG)
    print_table(df, Recommendation(world_size=2, reason="a test"), title="cpu sweep")  # capsys: not a terminal
    lines = capsys.readouterr().out.splitlines()
    bottom = next(i for i, ln in enumerate(lines) if ln.startswith("└"))
    assert max(cell_len(ln) for ln in lines[: bottom + 1]) <= 160
    header, _ = display_rows(df)
    assert " ".join(lines).count("not shown") == 0 and all(header_name(c) in _header("\n".join(lines)) for c in header)
    rows = _rows(lines[:bottom])
    assert [r[0] for r in rows] == ["1", "2", "4"]  # one line a row: a parser splitting on │ reads each whole
    cell = rows[2][-1]
    assert cell.endswith("…") and LONG.startswith(cell[:-1]) and len(cell) > 40
    assert lines[bottom + 1 : bottom + 3] == [
        "reasons in full (cut above to keep the table within 160 columns):",
        f"  4 ranks: {LONG}",
    ]


def test_piped_output_takes_the_width_columns_asks_for(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    print_table(_cpu_sweep(failed={4}, reason=LONG), Recommendation(world_size=2, reason="a test"), title="cpu sweep")
    text = capsys.readouterr().out
    assert max(cell_len(ln) for ln in text.splitlines()) <= 90
    assert "not shown at 90 columns:" in _said(text[text.index("└") :])
    assert LONG in _said(text[: text.index("└")].replace("│", " "))  # wrapped in its cell, as on a terminal


def test_piped_status_cuts_a_long_reason_and_prints_it_whole_below(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    cfg = compose_config([f"sweep.results_dir={tmp_path}", "sweep.name=long", "sweep.world_sizes=[1,2]"])
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in sweep_trials(cfg)], [])
    write_outcome(trial_dir(sweep_dir, "001-ws2"), {"executor": "local", "final": True, "reason": LONG})
    assert main(["status", str(sweep_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    bottom = next(i for i, ln in enumerate(lines) if ln.startswith("└"))
    assert max(cell_len(ln) for ln in lines[: bottom + 1]) <= 160
    rows = _rows(lines[:bottom])
    assert [(r[0], r[4]) for r in rows] == [("000-ws1", "not started"), ("001-ws2", "failed")]
    assert rows[1][-1].endswith("…") and LONG.startswith(rows[1][-1][:-1])
    assert lines[bottom + 1 :] == [
        "reasons in full (cut above to keep the table within 160 columns):",
        f"  001-ws2: {LONG}",
    ]
