"""The sweep's calibrated model as a report shows it: one model per layout fitted on the
completed trials, its predictions at the grid's sizes and beyond, and one line per layout saying
what was fitted and where each figure came from. The report only renders what this returns."""

from __future__ import annotations

from pathlib import Path

from launcher.config.schema import LauncherConfig
from launcher.perf.calibrate import NOTHING, calibration, fit_layouts, mape, predictions
from launcher.perf.step import PerfModel
from launcher.report.markdown import ModelSummary
from launcher.trials.folder import read_sweep_spec


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def residual_phrase(model: PerfModel) -> str:
    """The fit's residual as measured, or that there was none to measure: with no more trials
    than parameters the intervals rest on an assumed scatter, which must not read as a measurement."""
    if model.rel_sigma_measured is None:
        n, p = model.n_observations, model.n_parameters
        return f"no residual (n ≤ p: {_count(n, 'trial')}, {_count(p, 'parameter')})"
    return f"residual {model.rel_sigma_measured:.1%}"


def no_dof_line(model: PerfModel) -> str | None:
    """A fit with no degrees of freedom left (no more trials than parameters) passes through what was
    measured, so nothing tests it and its interval rests on a scatter it did not measure: `plan --from` says
    so on its own line, not only in the source's "no residual" (None: the fit has spare trials, or is presets)."""
    if model.level is None or model.rel_sigma_measured is not None:
        return None
    n, p = _count(model.n_observations, "trial"), _count(model.n_parameters, "fitted parameter")
    leave = "leaves" if model.n_observations == 1 else "leave"
    return (
        f"untested fit: {n} for {p} {leave} no degrees of freedom (n ≤ p), so the model passes through what was "
        f"measured and nothing tests it; the interval's σ: {model.source('interval')}, not measured; measure "
        "another size (or repeats, sweep.repeats=3) before trusting these predictions"
    )


def interval_phrase(model: PerfModel) -> str:
    """What a fitted model's intervals rest on, e.g. "90% intervals ±2.35σ, σ from held-out error
    5.1% (leave one shape out, t on 3 dof)"; empty for presets, whose interval is a stated
    uncertainty and claims no coverage."""
    if model.level is None:
        return ""
    return f"{model.level:.0%} intervals ±{model.z:.2f}σ, σ from {model.source('interval')}"


def layout_line(layout: str, m: PerfModel) -> str:
    """One layout's fitted parameters and their sources, for report.md."""
    inter, intra = m.inter, m.intra
    # Dedicated compute fits no exponent (γ stays 1), so the line says nothing about contention.
    contention = f"oversubscribed CPU compute × contention^{m.contention_exponent:.2f}; "
    interval = interval_phrase(m)
    return (
        f"`{layout}`: {m.compute_s_per_sample * 1e3:.3g} ms of compute per sample, "
        f"{m.overhead_s * 1e3:.3g} ms overhead per step, {m.exposed_comm:.0%} of the communication the overlap "
        f"model hides exposed after all ({m.source('exposed_comm')}); "
        f"inter-node {inter.bandwidth_gbps:.3g} GB/s, α {inter.latency_s * 1e6:.3g} µs ({m.source('inter')}); "
        f"intra-node {intra.bandwidth_gbps:.3g} GB/s ({m.source('intra')}); "
        + (contention if m.contention_exponent != 1 else "")
        + f"fitted on {_count(m.n_observations, 'trial')}, {residual_phrase(m)}"
        + (f"; {interval}" if interval else "")
    )


def model_summary(sweep_dir: Path, cfg: LauncherConfig) -> ModelSummary | None:
    """Fit the performance model on the sweep's completed trials and predict the grid's sizes
    plus 2× and 4× the largest; None when nothing completed. A sweep `plan --from` refuses
    (calibrate.calibration, the one rule for both) has no model here either, and says why; trials
    left out for damaged files and a fit that failed are said in the lines, never dropped in silence."""
    found = calibration(sweep_dir)
    measured = found.measured
    skipped = [f"Left out of the fit (damaged files): {'; '.join(found.unreadable)}."] if found.unreadable else []
    if found.refusal == NOTHING:  # nothing completed: no model to speak of, as the table shows
        return None
    if found.refusal:
        return ModelSummary(predictions=None, lines=[f"No model: this sweep {found.refusal}.", *skipped])
    try:
        models = fit_layouts(measured, cfg.cluster.intra_link, cfg.cluster.inter_link)
    except ValueError as exc:
        return ModelSummary(predictions=None, lines=[f"No model: the fit failed ({exc}).", *skipped])
    largest = max(m.trial["world_size"] for m in measured)
    spec = read_sweep_spec(sweep_dir)
    grid = {t["world_size"] for t in ((spec.doc or {}).get("trials") or [])}
    pred = predictions(measured, models, sorted(grid | {2 * largest, 4 * largest}))
    lines = [layout_line(layout, m) for layout, m in models.items()]
    lines.append(f"In-sample error (MAPE) of predicted tokens/s: {mape(pred):.1f}%.")
    return ModelSummary(predictions=pred, lines=[*lines, *skipped])
