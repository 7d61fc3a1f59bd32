"""One rule decides whether a sweep's trials can calibrate the performance model, and `launcher plan --from`
and the report both follow it (issue 31, item 4): a command whose model the recipe does not describe, or
trials that recorded rates but no step time, are refused by the plan and drawn by no report, each saying the
same why. A plan's one predicted size is called predicted, and a fit with no degrees of freedom left says so.

The sweeps are made from literal records: the regex ones by the command record itself (command_record.finish
on rank 0's log, as a trial's last step writes it), the meter ones as test_command_model's are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.perf.plan_table import from_sweep_forecast
from launcher.run.sweep import create_sweep_dir, prepare_sweep
from launcher.train.command_record import finish
from tests.support.cli import launch_printed

DESCRIBED = "job.model_describes_program=true"
UNDESCRIBED = (
    "ran job=command without job.model_describes_program, so its program's gradient size is unknown; sweep it "
    "with the program's model described (model=… or model.* overrides matching it, job.model_describes_program=true)"
)
UNTIMED = (
    "recorded no step time in its 2 completed trial(s) (job.metrics=regex reported rates only), and the model is "
    "fitted on step times; add a step_s group (seconds a step) to job.pattern, or report through launcher.meter "
    "(job.metrics=meter), which times each step"
)
RATE = "job.pattern='tok/s: (?P<tokens_per_s>[0-9.]+)'"


def _sweep(tmp_path: Path, sizes: str, *overrides: str) -> tuple[Path, list]:
    over = ["job=command", "job.argv=[python,-c,pass]", f"sweep.world_sizes=[{sizes}]", *overrides]
    over += [f"sweep.results_dir={tmp_path}", "sweep.name=cmd"]
    plan = prepare_sweep(over)
    return create_sweep_dir(plan.cfg, plan.items, over), [t for t, _ in plan.items]


def _regex_sweep(tmp_path: Path, *overrides: str) -> Path:
    """A job=command, metrics=regex sweep at 1 and 2 ranks whose program printed its whole-job rate a line a
    step (30 steps, the first 5 warm-up): completed, tokens/s in every row, no step time."""
    sweep_dir, trials = _sweep(tmp_path, "1,2", "job.metrics=regex", RATE, *overrides)
    for t in trials:
        tdir = sweep_dir / "trials" / t.trial_id
        (tdir / "rank0.log").write_text("".join(f"tok/s: {1000.0 * t.world_size}\n" for _ in range(30)))
        assert finish(tdir, exit_code=0)["status"] == "completed"
    return sweep_dir


def _meter_sweep(tmp_path: Path, sizes: str, *overrides: str) -> Path:
    """A job=command, metrics=meter sweep whose records hold step times (as test_command_model's)."""
    sweep_dir, trials = _sweep(tmp_path, sizes, *overrides)
    config = json.loads((sweep_dir / "sweep.json").read_text())["config"]
    for t in trials:
        step = 0.05 + 0.01 * (t.world_size - 1) + 0.002 * (t.world_size == 2)  # off any 2-parameter line
        metrics = {"tokens_per_s": t.global_batch * 64 / step, "step_time_median_s": step, "tokens_per_sample": 64}
        atomic_write_json(
            sweep_dir / "trials" / t.trial_id / "record.json",
            {"status": "completed", "metrics": metrics, "wall_s": 10.0, "config": config},
        )
    return sweep_dir


def _refusals(sweep: Path, capsys) -> tuple[str, list[str]]:
    """What `plan --from` printed on stderr (exit 2 asserted) and the report's performance-model lines."""
    assert main(["plan", "--from", str(sweep), "--gpus", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert main(["report", str(sweep)]) == 0
    report = (sweep / "report.md").read_text().splitlines()
    at = report.index("Performance model (step = compute + exposed all-reduce + bubble + overhead):")
    return err, report[at + 2 : report.index("", at + 2)]  # a blank line under the heading


@pytest.mark.parametrize(
    ("make", "why"),
    [
        pytest.param(lambda p: _regex_sweep(p), UNDESCRIBED, id="regex-undescribed"),
        pytest.param(lambda p: _meter_sweep(p, "1,2"), UNDESCRIBED, id="meter-undescribed"),
        pytest.param(lambda p: _regex_sweep(p, DESCRIBED), UNTIMED, id="regex-rates-only"),
    ],
)
def test_plan_from_and_the_report_refuse_by_one_rule_with_one_reason(make, why, tmp_path, capsys):
    sweep = make(tmp_path)
    err, model_lines = _refusals(sweep, capsys)
    assert err == f"launcher: error: --from {str(sweep)!r} {why}"
    assert model_lines == [f"- No model: this sweep {why}."]
    assert not (sweep / "predicted.png").exists()


def test_a_sweep_the_plan_calibrates_on_is_the_one_the_report_fits(tmp_path, capsys):
    sweep = _meter_sweep(tmp_path, "1,2,4", DESCRIBED)
    assert main(["plan", "--from", str(sweep), "--gpus", "8"]) == 0
    assert main(["report", str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    assert "- `ddp`: " in report and "No model" not in report and (sweep / "predicted.png").is_file()


def test_one_predicted_size_is_called_predicted_and_an_untested_fit_says_so(tmp_path):
    sweep = _meter_sweep(tmp_path, "1,2", DESCRIBED)
    cfg = compose_config(json.loads((sweep / "sweep.json").read_text())["overrides"])
    fc = from_sweep_forecast(sweep, cfg, [8])
    assert fc.recommendation.reason == "8 GPUs: the only size predicted to run"
    assert fc.notes == (
        "untested fit: 2 trials for 2 fitted parameters leave no degrees of freedom (n ≤ p), so the model passes "
        "through what was measured and nothing tests it; the interval's σ: assumed 10% (too few shapes to hold one "
        "out, no repeats), not measured; measure another size (or repeats, sweep.repeats=3) before trusting these "
        "predictions",
    )
    rc, out = launch_printed(["plan", "--from", str(sweep), "--gpus", "8"])
    said = " ".join(out.split())  # the footer is wrapped at the table's width
    assert rc == 0 and "Recommended GPUs: 8 — 8 GPUs: the only size predicted to run" in said
    assert fc.notes[0] in said and "the only size that completed" not in said


def test_a_fit_with_a_degree_of_freedom_left_has_no_such_line(tmp_path):
    sweep = _meter_sweep(tmp_path, "1,2,4", DESCRIBED)
    cfg = compose_config(json.loads((sweep / "sweep.json").read_text())["overrides"])
    fc = from_sweep_forecast(sweep, cfg, [8, 16])
    assert fc.notes == () and fc.recommendation.world_size is not None


def test_an_adaptive_search_takes_no_model_bound_from_a_sweep_the_rule_refuses(tmp_path):
    from launcher.run.adaptive import run_adaptive  # lazy: only this test drives a search

    over = ["job=command", "job.argv=[python,-c,pass]", "sweep.world_sizes=[1,2,4,8,16]", "sweep.search=adaptive"]
    plan = prepare_sweep([*over, f"sweep.results_dir={tmp_path}", "sweep.name=cmd"])
    sweep_dir = create_sweep_dir(plan.cfg, plan.items, over)
    config = json.loads((sweep_dir / "sweep.json").read_text())["config"]
    eff = {1: 1.0, 2: 0.95, 4: 0.9, 8: 0.6, 16: 0.4}

    def run(batch):
        for t in batch:
            thr = 1000.0 * t.world_size * eff[t.world_size]
            metrics = {"tokens_per_s": thr, "step_time_median_s": t.global_batch * 64 / thr, "tokens_per_sample": 64}
            record = {"status": "completed", "metrics": metrics, "wall_s": 10.0, "config": config}
            atomic_write_json(sweep_dir / "trials" / t.trial_id / "record.json", record)

    doc = run_adaptive(sweep_dir, plan.cfg, [t for t, _ in plan.items], run, log=lambda line: None)
    # Before any trial completed the search had nothing to fit yet; from then on the rule refuses the sweep.
    bounds = [s["model_bound"] for s in doc["steps"]]
    assert bounds[0] == "off: fewer than 2 completed sizes to fit on"
    assert len(bounds) == 4 and set(bounds[1:]) | {doc["final"][""]["model_bound"]} == {
        f"off: this sweep {UNDESCRIBED}"
    }
    # 16 was never needed, and no model prices it: the estimate of the whole grid says why.
    assert doc["cost"]["estimate_note"] == f"this sweep {UNDESCRIBED}"


def test_plan_from_names_the_trials_it_left_out_for_damaged_files(tmp_path, capsys):
    sweep = _meter_sweep(tmp_path, "1,2,4", DESCRIBED)
    cfg = compose_config(json.loads((sweep / "sweep.json").read_text())["overrides"])
    (sweep / "trials" / "002-ws4" / "record.json").write_bytes(b"")
    fc = from_sweep_forecast(sweep, cfg, [8])
    assert fc.notes[-1] == "left out of the fit (damaged files): 002-ws4: record.json is truncated (0 bytes)"
    for tid in ("000-ws1", "001-ws2"):
        (sweep / "trials" / tid / "record.json").write_bytes(b"")
    assert main(["plan", "--from", str(sweep), "--gpus", "8"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"launcher: error: --from {str(sweep)!r} has no completed trial it can read to calibrate on; left out of "
        "the fit (damaged files): 000-ws1: record.json is truncated (0 bytes); 001-ws2: record.json is truncated "
        "(0 bytes); 002-ws4: record.json is truncated (0 bytes)"
    )
