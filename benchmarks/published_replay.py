"""Replay of published training runs through `launcher plan` (issue 14, deliver 5).

Every row of benchmarks/data/published_scaling.csv becomes a `launcher plan` configuration
(benchmarks/replay_mapping.py: model shape, layout and degrees, precision, checkpointing,
hardware, node and network, batch) and is predicted in-process by the function `launcher plan`
runs on presets (launcher.perf.plan_table.from_presets_forecast), at the row's GPU count.
Rows the tool cannot express are listed as skipped with the reason.

One constant per device family and precision is fitted: the share of peak FLOP/s the compute
achieves (`--assume-mfu`), minimising Σ w·ln²(predicted/published) per-GPU throughput with each
source weighted alike (w = 1 / its rows), so llm-foundry's 79 rows weigh as much as BLOOM's one.
It is fitted on every row (in-sample) and, for each source, on the other sources only
(leave-one-source-out, LOSO: the figures the goals are judged on). A family and precision fewer than
two sources have (MIN_SOURCES) falls back to the constant fitted on every device, in-sample too. The
LOSO errors' 90% quantile of |ln(predicted/published)| (source-weighted) is the preset interval. The
in-sample constants and that interval are written to launcher/perf/preset_fit.json, which `launcher plan` reads.

Each goal is printed beside a baseline that knows nothing of the model's detail, judged alike (LOSO):
throughput from one MFU pooled over every device (fitted on the other sources), and efficiency 1.0 for
every row; the model's margin over each is printed. The interval's coverage on the rows it was set from
tests nothing, so it is judged on held-out sources: for each source, the interval is rebuilt from the
other sources alone (each predicted by constants fitted without it and without the held-out source) and
covers the held-out source's LOSO predictions or not (held_out_coverage).

Truth is the published figure, never the model: tokens/s per GPU as published, else the
published MFU (or HFU) × the source's peak (A100 312, H100 989 TFLOP/s) ÷ the row's FLOPs per
token (launcher.compute.flops on the row's shape, recompute included for HFU).

    .venv/bin/python -m benchmarks.published_replay [--corpus CSV] [--out DIR] [--fit-out JSON]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.replay_case import GOAL_EFF, GOAL_THR, QUANTILE, Case
from benchmarks.replay_curve import case_parts, fit_curves, shaped_mfu
from benchmarks.replay_jitter import fit_jitter, pairs
from benchmarks.replay_mapping import Unexpressible, map_row, num, series_key
from benchmarks.replay_memory import fitted_checkpointing, memory_verdict
from launcher.config.compose import compose_config
from launcher.config.errors import ConfigError
from launcher.config.schema import LauncherConfig
from launcher.perf import preset_fit
from launcher.perf.plan_table import from_presets_forecast, work_of
from launcher.perf.stragglers import straggle

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CORPUS = HERE / "data" / "published_scaling.csv"
GRID = np.array([0.9, 0.7, 0.55, 0.45, 0.35, 0.25, 0.15])
"""Assumed MFUs each row is planned at; 1/throughput is linear in 1/MFU between them (exactly so
while communication does not depend on compute), so the fit interpolates instead of replanning."""
FINE = np.round(np.arange(0.10, 1.0, 0.0025), 4)
SOURCE_PEAK = {"A100": 312e12, "H100": 989e12}
"""The dense bf16 peaks the sources divide by (corpus README), to turn their MFU back into tokens/s."""


def read_corpus(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plan_row(cfg: LauncherConfig, gpus: int, mfu: float) -> dict:
    """`launcher plan`'s row for `gpus`; Unexpressible with plan's reason where it is impossible."""
    # The run did run: its throughput is compared, whatever the memory estimate says of it.
    row = from_presets_forecast(cfg, [gpus], assume_mfu=float(mfu), check_memory=False).table.iloc[0]
    if row["status"] != "predicted":
        raise Unexpressible(f"plan: {row['reason']}")
    return row.to_dict()


def published_figure(row: dict, cfg: LauncherConfig) -> tuple[float, str]:
    """Published tokens/s per GPU, and the column it came from."""
    if (tokens := num(row.get("tokens_per_s_per_gpu"))) is not None:
        return tokens, "tokens_per_s_per_gpu"
    family = "H100" if "H100" in row["hardware"] else "A100"
    work = work_of(cfg)
    if (mfu := num(row.get("mfu"))) is not None:
        return mfu * SOURCE_PEAK[family] / work.model_flops, "mfu"
    if (hfu := num(row.get("hfu"))) is not None:
        return hfu * SOURCE_PEAK[family] / work.hardware_flops, "hfu"
    raise Unexpressible("no published throughput, MFU or HFU")


def prepare(index: int, row: dict) -> Case:
    case = Case(index=index, row=row)
    try:
        case.mapped = map_row(row)
        # Planned without stragglers: the fitted s is applied through the MFU (replay_jitter).
        case.mapped = dataclasses.replace(case.mapped, overrides=[*case.mapped.overrides, "cluster.step_jitter=0"])
        case.mapped, case.cfg = fitted_checkpointing(case.mapped, compose_config(case.mapped.overrides, None))
        case.out["memory"] = memory_verdict(case.mapped, case.cfg)
        case.key = preset_fit.fit_key(case.cfg.cluster.device_name, work_of(case.cfg).dtype)
        case.published, case.published_from = published_figure(row, case.cfg)
        case.inv_grid = np.array([1 / plan_row(case.cfg, case.mapped.gpus, u)["tokens_per_s_per_device"] for u in GRID])
        case.parts = case_parts(case)
    except (Unexpressible, ConfigError) as exc:
        case.skip, case.inv_grid = str(exc), None
    return case


def predicted_log(case: Case, mfu: np.ndarray) -> np.ndarray:
    """ln predicted per-GPU throughput at each `mfu`, linear in 1/MFU through the grid (and beyond its ends)."""
    x, y = 1 / GRID, case.inv_grid
    inv = np.interp(1 / mfu, x, y)
    lo, hi = 1 / mfu < x[0], 1 / mfu > x[-1]
    inv[lo] = y[0] + (1 / mfu[lo] - x[0]) * (y[1] - y[0]) / (x[1] - x[0])
    inv[hi] = y[-1] + (1 / mfu[hi] - x[-1]) * (y[-1] - y[-2]) / (x[-1] - x[-2])
    return -np.log(inv)


def fit_mfu(cases: list[Case], curves: dict[int, np.ndarray]) -> float:
    """The MFU minimising Σ w·ln²(predicted/published), each source weighted alike."""
    per_source = Counter(c.source for c in cases)
    loss = sum((curves[c.index] - math.log(c.published)) ** 2 / per_source[c.source] for c in cases)
    return float(FINE[int(np.argmin(loss))])


MIN_SOURCES = 2
"""Sources a fit key needs for a constant of its own; with fewer it takes the one fitted on every device. One
source's stack is not its device's: the only B200 rows (a Qwen3 MoE run at 15% of peak) would otherwise set
every B200 plan's constant, as a LOSO fold would never test; nor do such a key's rows enter the curve fitted on
every device, which prices it (replay_curve.POOLED_FROM_BACKED)."""


def fit_constants(cases: list[Case], curves: dict[int, np.ndarray], jitter: float = 0.0) -> dict:
    """The shape model's matmul curves (replay_curve), and the one-MFU constants (the baseline, and the
    fallback for a row no curve prices) per fit key backed by MIN_SOURCES sources and over every device;
    `curves` and the curves' fit both at straggler jitter `jitter` (a row at MFU m runs as at m ÷ straggle)."""
    sources: dict[str, set[str]] = {}
    for c in cases:
        sources.setdefault(c.key, set()).add(c.source)
    keys = sorted(k for k, s in sources.items() if len(s) >= MIN_SOURCES)
    return {
        "per_key": {k: fit_mfu([c for c in cases if c.key == k], curves) for k in keys},
        "pooled": fit_mfu(cases, curves),
        "curves": fit_curves(cases, jittered_log(jitter), MIN_SOURCES),
    }


def jittered_log(s: float) -> Callable[[Case, np.ndarray], np.ndarray]:
    """predicted_log with the straggler jitter `s` in it, as every prediction is made (predict_all): a
    curve fitted without it and applied with it would read every multi-node row low by straggle(N, s)."""
    if s == 0:
        return predicted_log
    return lambda case, mfu: predicted_log(case, mfu / straggle(case.mapped.gpus, s))


def mfu_of(case: Case, fit: dict) -> float:
    """The MFU the row is planned at: its Parts under the fitted curves, else its key's constant."""
    shaped = shaped_mfu(case, fit["curves"])
    return shaped if shaped is not None else fit["per_key"].get(case.key, fit["pooled"])


def fold_constants(train: list[Case], done: list[Case], curves: dict[int, np.ndarray]) -> dict:
    """The constants fitted on `train` (fit_constants: MFUs and matmul curves): the straggler jitter s on its
    efficiency pairs (at the constants fitted without it), then the constants with that s; "grid": `train`'s and
    `done`'s throughput curves at s (predicted_log over GRID's MFUs)."""
    first = fit_constants(train, curves)
    mapped = [c for c in train if c.mapped is not None]  # every replayed row is; a test's stand-in may not be
    found = pairs(mapped, _series(mapped, same_micro=True), published_unit)
    s = fit_jitter(found, curves, FINE, lambda c: mfu_of(c, first))
    at_s = curves if s == 0 else {c.index: predicted_log(c, FINE / straggle(c.mapped.gpus, s)) for c in [*train, *done]}
    return fit_constants(train, at_s, s) | {"jitter": s, "grid": at_s}


def predict_all(done: list[Case], curves: dict[int, np.ndarray]) -> tuple[dict, dict[str, dict]]:
    """In-sample constants, and the constants fitted without each source; each row predicted with both."""
    fitted = fold_constants(done, done, curves)
    folds = {}
    for source in sorted({c.source for c in done}):
        others = [c for c in done if c.source != source]
        if others:  # a corpus of one source has nothing to hold out against
            folds[source] = fold_constants(others, done, curves)
    for c in done:
        fold = folds.get(c.source)
        for tag, mfu, s in (
            ("in", mfu_of(c, fitted), fitted["jitter"]),
            ("loso", mfu_of(c, fold) if fold else math.nan, fold["jitter"] if fold else 0),
        ):
            if math.isnan(mfu):
                c.out |= {f"{k}_{tag}": math.nan for k in ("mfu_assumed", "predicted", "predicted_mfu")}
                continue
            # straggle(N, s) on the compute is the compute at MFU ÷ straggle(N, s) (replay_jitter).
            r = plan_row(c.cfg, c.mapped.gpus, mfu / straggle(c.mapped.gpus, s))
            c.out |= {
                f"mfu_assumed_{tag}": mfu,
                f"predicted_{tag}": r["tokens_per_s_per_device"],
                f"predicted_mfu_{tag}": r["mfu"],
            }
    constants = {k: v for k, v in fitted.items() if k != "grid"}
    return constants | {"rows_by_key": dict(Counter(c.key for c in done))}, folds


def _on_curve(case: Case, curves: dict[int, np.ndarray], mfu: float) -> float:
    """Predicted tokens/s per GPU at `mfu` from the row's curve over FINE (interpolated: the shape
    model's MFUs fall between FINE's values, fit_mfu's on them)."""
    return math.exp(float(np.interp(mfu, FINE, curves[case.index])))


def baselines(done: list[Case], folds: dict[str, dict], curves: dict[int, np.ndarray]) -> dict:
    """What each goal reads without the model's detail, leave-one-source-out as the goals: throughput from
    one MFU pooled over every device (fitted on the other sources), and efficiency 1.0 for every row."""
    thr = [
        _on_curve(c, folds[c.source].get("grid", curves), folds[c.source]["pooled"]) / c.published - 1
        for c in done
        if c.source in folds
    ]
    eff = [1.0 - c.out["published_eff"] for c in done if "published_eff" in c.out and "predicted_eff_loso" in c.out]
    return {"thr_rows": len(thr), **scored(thr, eff)}


def scored(thr: list[float], eff: list[float]) -> dict:
    """Relative throughput errors `thr` and efficiency errors `eff` against the goals: how many are
    within each, and the median of each's size (the model's goals and its baselines, one rule)."""
    return {
        "thr_within": sum(abs(e) <= GOAL_THR for e in thr),
        "thr_median_abs": float(np.median(np.abs(thr))) if thr else math.nan,
        "eff_rows": len(eff),
        "eff_within": sum(abs(e) <= GOAL_EFF for e in eff),
        "eff_median_abs": float(np.median(np.abs(eff))) if eff else math.nan,
    }


def held_out_coverage(done: list[Case], curves: dict[int, np.ndarray]) -> dict:
    """The interval judged on sources it never saw: for each source s, the interval is rebuilt from the
    other sources alone (each of them predicted by constants fitted without s and without itself, the
    QUANTILE of those errors), and covers s's leave-one-source-out predictions or not."""
    covered, sources = [], []
    for s in sorted({c.source for c in done}):
        others = [c for c in done if c.source != s]
        logs, whose = [], []
        for t in sorted({c.source for c in others}):
            train = [c for c in others if c.source != t]
            if not train:
                continue
            fold = fold_constants(train, [c for c in others if c.source == t], curves)
            for c in (c for c in others if c.source == t):
                logs.append(abs(math.log(_on_curve(c, fold["grid"], mfu_of(c, fold)) / c.published)))
                whose.append(t)
        if not logs:
            continue
        q = weighted_quantile(logs, whose, QUANTILE)
        for c in (c for c in done if c.source == s and not math.isnan(c.out["predicted_loso"])):
            covered.append(abs(math.log(c.out["predicted_loso"] / c.published)) <= q)
            sources.append(s)
    n = Counter(sources)
    weighted = sum(ok / n[s] for ok, s in zip(covered, sources)) / len(n) if n else math.nan
    return {"rows": len(covered), "covers": sum(covered), "sources": len(n), "weighted_share": weighted}


def published_unit(row: dict) -> tuple[float | None, str]:
    """The row's published figure in its own unit, for ratios within a series (no FLOPs needed)."""
    for col in ("tokens_per_s_per_gpu", "mfu", "hfu"):
        if (v := num(row.get(col))) is not None:
            return v, col
    return None, ""


def _series(cases: list[Case], *, same_micro: bool) -> list[list[Case]]:
    series: dict[tuple, list[Case]] = {}
    for c in cases:
        series.setdefault(series_key(c.row, same_micro=same_micro), []).append(c)
    return list(series.values())


def cross_micro(cases: list[Case]) -> dict:
    """The pairs the one-recipe series leave out: a row whose series' smallest GPU count ran another
    micro batch (LOSO predictions). Reported beside the goal, not in it: such a baseline changes
    the per-GPU work, and a ratio above 1 there (seen in MPT's tables) is not scaling."""
    errors = []
    for members in _series(cases, same_micro=False):
        counts = sorted({int(c.row["gpus"]) for c in members})
        base = [c for c in members if int(c.row["gpus"]) == counts[0]]
        if len(counts) < 2 or len(base) != 1 or base[0].skip is not None:
            continue
        b = base[0]
        b_value, b_unit = published_unit(b.row)
        for c in members:
            value, unit = published_unit(c.row)
            if c is b or c.skip is not None or c.row.get("micro_batch") == b.row.get("micro_batch") or unit != b_unit:
                continue
            errors.append(c.out["predicted_loso"] / b.out["predicted_loso"] - value / b_value)
    return {
        "rows": len(errors),
        "within": sum(abs(e) <= GOAL_EFF for e in errors),
        "median_abs": float(np.median(np.abs(errors))) if errors else math.nan,
    }


def efficiencies(cases: list[Case]) -> None:
    """Per-GPU throughput relative to the series' smallest GPU count: published (from the published
    figures alone) and predicted (from the predictions of both rows, in-sample and LOSO)."""
    for members in _series(cases, same_micro=True):
        counts = sorted({int(c.row["gpus"]) for c in members})
        base = [c for c in members if int(c.row["gpus"]) == counts[0]]
        if len(counts) < 2 or len(base) != 1:
            continue
        b = base[0]
        b_value, b_unit = published_unit(b.row)
        for c in members:
            if c is b:
                continue
            value, unit = published_unit(c.row)
            c.out |= {"baseline_gpus": counts[0], "baseline_micro": b.row.get("micro_batch", "")}
            if unit == b_unit and value is not None:
                c.out["published_eff"] = value / b_value
            for tag in ("in", "loso"):
                if c.skip is None and b.skip is None:
                    c.out[f"predicted_eff_{tag}"] = c.out[f"predicted_{tag}"] / b.out[f"predicted_{tag}"]


def weighted_quantile(values: list[float], sources: list[str], q: float) -> float:
    """The q quantile with each source's rows sharing one unit of weight."""
    n = Counter(sources)
    order = np.argsort(values)
    w = np.array([1 / n[s] for s in sources])[order]
    cum = np.cumsum(w) / w.sum()
    return float(np.asarray(values)[order][int(np.searchsorted(cum, q))])


def summary(done: list[Case]) -> dict:
    """Shares of rows inside the goals, in-sample and LOSO; the interval from the LOSO residuals
    (in-sample only where nothing could be held out) and how many rows it holds."""
    out: dict = {}
    for tag in ("in", "loso"):
        held = [c for c in done if not math.isnan(c.out[f"predicted_{tag}"])]
        err = [c.out[f"predicted_{tag}"] / c.published - 1 for c in held]
        eff = [
            c.out[f"predicted_eff_{tag}"] - c.out["published_eff"]
            for c in held
            if "published_eff" in c.out and f"predicted_eff_{tag}" in c.out
        ]
        out[tag] = {"rows": len(err), **scored(err, eff)}
    tag = "loso" if out["loso"]["rows"] else "in"
    held = [c for c in done if not math.isnan(c.out[f"predicted_{tag}"])]
    logs = [abs(math.log(c.out[f"predicted_{tag}"] / c.published)) for c in held]
    q = weighted_quantile(logs, [c.source for c in held], QUANTILE)
    out |= {
        "interval_log": q,
        "interval_from": tag,
        "interval_covers": sum(v <= q for v in logs),
        "interval_rows": len(logs),
    }
    return out


def made_by(argv: list[str]) -> str:
    """Command, commit and date, for the result files and preset_fit.json."""
    import subprocess  # lazy: only to name the commit the replay ran on

    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    command = " ".join([".venv/bin/python -m benchmarks.published_replay", *argv])
    return f"`{command}` at commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="published rows (CSV)")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="folder for published_replay.{md,csv,json,png}")
    ap.add_argument("--fit-out", type=Path, default=preset_fit.PACKAGED, help="where the fitted constants go")
    ap.add_argument("--no-figure", action="store_true", help="skip the matplotlib scatter")
    args = ap.parse_args(argv)
    if not args.corpus.is_file():
        print(
            f"published_replay: --corpus {str(args.corpus)!r} is not a file; pass the published rows CSV "
            f"(default {CORPUS.relative_to(ROOT)})",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    cases = [prepare(i, r) for i, r in enumerate(read_corpus(args.corpus))]
    done = [c for c in cases if c.skip is None]
    if not done:
        print(f"published_replay: no row of {args.corpus} could be replayed", file=sys.stderr)
        return 1
    curves = {c.index: predicted_log(c, FINE) for c in done}
    constants, folds = predict_all(done, curves)
    efficiencies(cases)
    stats = summary(done) | {"cross_micro": cross_micro(cases)}
    stats |= {"baseline": baselines(done, folds, curves), "held_out": held_out_coverage(done, curves)}
    who = made_by(sys.argv[1:] if argv is None else argv)
    fit = preset_fit.PresetFit(
        mfu=constants["per_key"],
        mfu_any_device=constants["pooled"],
        interval_log=stats["interval_log"],
        quantile=QUANTILE,
        rows=len(done),
        sources=len({c.source for c in done}),
        made_by=who,
        rows_by_key=constants["rows_by_key"],
        curves=constants["curves"],
        jitter=constants["jitter"],
    )
    preset_fit.save(fit, args.fit_out)
    from benchmarks.replay_report import (
        write_results,  # lazy: the report (and matplotlib) only once there is something to say
    )

    write_results(
        args.out,
        cases=cases,
        constants=constants,
        folds=folds,
        stats=stats,
        made_by=who,
        seconds=time.monotonic() - started,
        figure=not args.no_figure,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
