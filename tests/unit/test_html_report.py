"""plots.py and html_report.py on a hand-made results table: every PNG is a real PNG of the
promised size, report.html stands alone (images inlined byte for byte, nothing fetched) and
shows table cells as data, never as markup."""

from __future__ import annotations

import base64
import html
import json
import re
import struct
from pathlib import Path

import pandas as pd
import pytest

from launcher.report import plots
from launcher.report.html import write_html
from launcher.report.markdown import write_report
from launcher.report.terminal import display_rows
from launcher.results.policy import Recommendation
from launcher.results.scaling import add_scaling
from launcher.results.table import COLUMNS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EVIL = '<script>alert(1)</script> & "quotes" [bold]'
SINGLE = (600, 400)  # figsize (6, 4) × dpi 100
SCALING = (1000, 400)  # figsize (10, 4) × dpi 100


def _table(*, price: float | None = 2.5, sizes=(1, 2, 4), failed: bool = True) -> pd.DataFrame:
    rows = [
        {
            "trial_id": f"{i:03d}-ws{n}",
            "variant": None,
            "world_size": n,
            "repeat": 0,
            "status": "completed",
            "tokens_per_s": 6000.0 * n**0.8,
            "scaling": "weak",
            "reason": None,
        }
        for i, n in enumerate(sizes)
    ]
    if failed:
        rows.append(
            {
                "trial_id": "099-ws4-r1",
                "variant": None,
                "world_size": 4,
                "repeat": 1,
                "status": "failed",
                "tokens_per_s": None,
                "scaling": "weak",
                "reason": f"rank 3 exited 1: {EVIL}",
            }
        )
    df = add_scaling(pd.DataFrame(rows).reindex(columns=COLUMNS))
    # $ per 1M tokens by hand: the cost code has its own tests, these only need the column.
    usd = float("nan") if price is None else price * df["world_size"] / (df["tokens_per_s"] * 3600) * 1e6
    return df.assign(usd_per_1m_tokens=usd)


def _prediction() -> pd.DataFrame:
    sizes = [1, 2, 4, 8, 16]
    predicted = [6000.0 * n**0.8 for n in sizes]
    return pd.DataFrame(
        {
            "world_size": sizes,
            "variant": [None] * len(sizes),
            "predicted_tokens_per_s": predicted,
            "low_tokens_per_s": [p * 0.9 for p in predicted],
            "high_tokens_per_s": [p * 1.1 for p in predicted],
            "measured_tokens_per_s": [p * 1.02 for p in predicted[:3]] + [float("nan")] * 2,
        }
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"  # the first chunk, right after the signature and its length
    return struct.unpack(">II", data[16:24])


def _all_plots(df: pd.DataFrame, pred: pd.DataFrame, folder: Path) -> list[tuple[str, Path, tuple[int, int]]]:
    return [
        ("Throughput", plots.plot_throughput(df, folder / "throughput.png"), SINGLE),
        ("Efficiency", plots.plot_efficiency(df, 0.8, folder / "efficiency.png"), SINGLE),
        ("Cost", plots.plot_cost(df, folder / "cost.png"), SINGLE),
        ("Predicted", plots.plot_predicted(pred, folder / "predicted.png"), SINGLE),
        ("Scaling", plots.plot_scaling(df, 0.8, folder / "scaling.png"), SCALING),
    ]


def _assert_pngs(made) -> None:
    for _, path, size in made:
        assert path.is_file()
        assert _png_size(path) == size, path.name
    # Atomic writes leave no temporary files behind.
    assert not [p for p in made[0][1].parent.iterdir() if p.name.startswith(".")]


def test_plots_and_html_report(tmp_path):
    df = _table()
    made = _all_plots(df, _prediction(), tmp_path)
    _assert_pngs(made)

    header, rows = display_rows(df)
    display = pd.DataFrame(rows, columns=header)
    recommendation = "Recommended world size: 2 — 2 ranks: efficiency ≥ 0.80 (1.74× the throughput of 1 rank) <b>"
    out = write_html(
        path=tmp_path / "report.html",
        title="Sweep <test>",
        summary="Model `tiny_gpt` & friends",
        recommendation=recommendation,
        table=display,
        images=[(c, p) for c, p, _ in made],
        notes=["mfu —: peak FLOP/s unknown"],
    )
    assert out == tmp_path / "report.html"
    page = out.read_text(encoding="utf-8")

    assert '<meta charset="utf-8">' in page
    assert "<title>Sweep &lt;test&gt;</title>" in page

    # One inlined image per plot, in order, decoding to exactly the file's bytes.
    srcs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(srcs) == len(made) == page.count("<img")
    for src, (caption, path, _) in zip(srcs, made, strict=True):
        assert base64.b64decode(src, validate=True) == path.read_bytes()
        assert f"<figcaption>{caption}</figcaption>" in page

    # Self-contained: nothing is fetched from anywhere.
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<(link|script)\b", page, re.IGNORECASE)
    assert not re.search(r"""(src|href)\s*=\s*(?!["']?data:)""", page, re.IGNORECASE)

    # The failed row's reason is data: escaped, highlighted, never raw markup.
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;quotes&#34; [bold]" in page
    assert EVIL not in page and "<script>" not in page
    assert page.count('<tr class="bad">') == 1
    bad = re.search(r'<tr class="bad">(.*?)</tr>', page, re.DOTALL).group(1)
    assert "failed" in bad and "&lt;script&gt;" in bad

    # The recommendation and every size are there; numeric columns are right-aligned.
    assert recommendation in html.unescape(page) and "&lt;b&gt;" in page
    assert "<code>tiny_gpt</code> &amp; friends" in page
    body = re.search(r"<tbody>(.*)</tbody>", page, re.DOTALL).group(1)
    for n in (1, 2, 4):
        assert f'<td class="num">{n}</td>' in body
    assert '<th class="num">tokens_per_s</th>' in page and "<th>reason</th>" in page


@pytest.mark.parametrize(
    "df",
    [
        pytest.param(_table(sizes=()), id="only-failed"),
        pytest.param(pd.DataFrame(columns=COLUMNS), id="no-rows"),
    ],
)
def test_empty_table_still_gives_pngs(tmp_path, df):
    empty_pred = _prediction().iloc[0:0]
    _assert_pngs(_all_plots(df, empty_pred, tmp_path))


def test_no_price_and_wide_span(tmp_path):
    """No price: the cost plot says where to set one. Sizes 1…16: the log2 axis path."""
    df = _table(price=None, sizes=(1, 2, 4, 8, 16), failed=False)
    assert df["usd_per_1m_tokens"].isna().all()
    _assert_pngs(_all_plots(df, _prediction(), tmp_path))


def test_variants_get_one_line_each(tmp_path):
    a, b = _table(failed=False).assign(variant="accum=1"), _table(failed=False).assign(variant="accum=2")
    b["tokens_per_s"] *= 0.9
    df = pd.concat([a, b], ignore_index=True).assign(trial_id=lambda d: [f"t{i}" for i in range(len(d))])
    pred = pd.concat([_prediction().assign(variant="accum=1"), _prediction().assign(variant="accum=2")])
    _assert_pngs(_all_plots(df, pred, tmp_path))


# --- the reports: every PNG written, and one line instead of an unpriced cost plot ---------------


def _write_report(df: pd.DataFrame, folder: Path, **kwargs) -> tuple[str, str]:
    rec = Recommendation(world_size=2, reason="2 ranks: a test")
    write_report(df, rec, sweep_id="test", summary="Model `tiny_gpt`", threshold=0.8, sweep_dir=folder, **kwargs)
    return (folder / "report.md").read_text(), (folder / "report.html").read_text()


def _shown_in_both(md: str, page: str, folder: Path) -> None:
    """Every PNG in the folder is in report.md (as an image) and inlined in report.html, byte for byte."""
    pngs = sorted(p for p in folder.glob("*.png"))
    assert sorted(re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)) == sorted(p.name for p in pngs)
    inlined = {base64.b64decode(s) for s in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)}
    assert inlined == {p.read_bytes() for p in pngs} and page.count("<img") == len(pngs)


def test_priced_report_shows_every_png_scaling_and_cost_included(tmp_path):
    md, page = _write_report(_table(price=2.5), tmp_path, has_price=True)
    assert {p.name for p in tmp_path.glob("*.png")} == {"throughput.png", "efficiency.png", "cost.png", "scaling.png"}
    _shown_in_both(md, page, tmp_path)
    assert plots.NO_PRICE not in md and plots.NO_PRICE not in page


def test_unpriced_report_says_so_in_one_line_and_writes_no_cost_plot(tmp_path):
    (tmp_path / "cost.png").write_bytes(PNG_SIGNATURE)  # an earlier report's: removed, never shown stale
    (tmp_path / "sweep.json").write_text(
        json.dumps({"config": {"cluster": {"usd_per_device_hour": None}}, "trials": []})
    )
    md, page = _write_report(_table(price=None), tmp_path)  # the price read from sweep.json
    assert not (tmp_path / "cost.png").exists()
    assert "scaling.png" in md
    _shown_in_both(md, page, tmp_path)
    assert plots.NO_PRICE == "no price set (cluster.usd_per_device_hour)"
    assert [ln for ln in md.splitlines() if plots.NO_PRICE in ln] == [f"$ per 1M tokens: {plots.NO_PRICE}"]
    assert page.count(plots.NO_PRICE) == 1 and f'<p class="figure-note">$ per 1M tokens: {plots.NO_PRICE}</p>' in page


def test_price_comes_from_the_sweep_folder_even_before_any_trial_completed(tmp_path):
    (tmp_path / "sweep.json").write_text(
        json.dumps({"config": {"cluster": {"usd_per_device_hour": 2.0}}, "trials": []})
    )
    md, _ = _write_report(_table(sizes=()), tmp_path)  # nothing completed: no $ in the table yet
    assert (tmp_path / "cost.png").exists() and "(cost.png)" in md and plots.NO_PRICE not in md
