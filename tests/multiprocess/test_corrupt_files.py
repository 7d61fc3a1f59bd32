"""A damaged trial file is a row that says so: status `corrupt` and the file named in the reason,
never a missing row and never a traceback. Real files throughout: one real 1-rank sweep per
module, copied for each test and then damaged."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.perf.calibrate import load_measured
from launcher.results.table import build_table
from launcher.run.adaptive import run_adaptive, summary
from launcher.run.sweep import create_sweep_dir, prepare_sweep
from launcher.trials.folder import is_done, read_record, read_submission, read_trial
from launcher.trials.spec import Trial

pytestmark = pytest.mark.torch_dist

TRIAL_ID = "000-ws1"
FILES = ("trial.json", "record.json", "outcome.json")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """One completed 1-rank sweep, run for real once for the whole module."""
    root = tmp_path_factory.mktemp("built")
    argv = [
        "sweep",
        "sweep.world_sizes=[1]",
        "sweep.steps=6",
        "sweep.warmup_steps=2",
        f"sweep.results_dir={root}",
        "--quiet",
    ]
    assert main(argv) == 0
    (sweep_dir,) = [p for p in root.iterdir() if p.is_dir()]
    assert {p.name for p in (sweep_dir / "trials" / TRIAL_ID).glob("*.json")} == set(FILES)
    return sweep_dir


@pytest.fixture
def sweep(built, tmp_path) -> Path:
    """A private copy of the completed sweep, free to damage."""
    return Path(shutil.copytree(built, tmp_path / built.name))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "emptied": (lambda p: p.write_bytes(b""), "{} is truncated (0 bytes)"),
    "cut in half": (_cut, "{} is truncated ("),
    "garbage": (
        lambda p: p.write_text("}{ not JSON at all"),
        "{} is corrupt: Expecting value: line 1 column 1 (char 0)",
    ),
    "wrong shape": (lambda p: p.write_text("[1, 2, 3]\n"), "{} is corrupt: holds a JSON array, not an object"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_file_is_a_corrupt_row_naming_it(sweep, name, damage, capsys):
    spoil, expected = DAMAGE[damage]
    spoil(sweep / "trials" / TRIAL_ID / name)
    df = build_table(sweep)
    assert df["trial_id"].tolist() == [TRIAL_ID]
    row = df.iloc[0]
    assert row["status"] == "corrupt"
    assert row["reason"].startswith(expected.format(name)), row["reason"]
    # Even with trial.json unreadable the row keeps the planned size: sweep.json says it.
    assert (row["world_size"], row["layout"]) == (1, "ddp")

    assert main(["collect", str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    line = next(ln for ln in out.splitlines() if "corrupt" in ln)
    assert f"{name} is " in line
    assert "Recommended world size: none" in out
    csv_row = (sweep / "results.csv").read_text().splitlines()[1]
    assert "corrupt" in csv_row and name in csv_row


@pytest.mark.parametrize("name", FILES)
def test_status_shows_the_damaged_file(sweep, name, capsys):
    (sweep / "trials" / TRIAL_ID / name).write_bytes(b"")
    assert main(["status", str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    line = next(ln for ln in out.splitlines() if TRIAL_ID in ln)
    assert "corrupt" in line and f"{name} is truncated (0 bytes)" in line


@pytest.mark.parametrize("verb", ["collect", "status", "report"])
def test_a_damaged_sweep_json_is_one_line_and_exit_2(sweep, verb, capsys):
    (sweep / "sweep.json").write_text('{"config": {"model": ')
    assert main([verb, str(sweep)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"launcher: error: {sweep}: sweep.json is truncated (")


def test_a_missing_record_after_ranks_exited_0_is_failed_with_a_clear_reason(sweep):
    tdir = sweep / "trials" / TRIAL_ID
    (tdir / "record.json").unlink()
    assert [r["returncode"] for r in json.loads((tdir / "outcome.json").read_text())["ranks"]] == [0]
    row = build_table(sweep).iloc[0]
    assert row["status"] == "failed"
    assert row["reason"] == "no record written, though all 1 rank(s) exited with code 0"


def test_a_deleted_trial_folder_is_still_a_row(sweep):
    shutil.rmtree(sweep / "trials" / TRIAL_ID)
    row = build_table(sweep).iloc[0]
    assert (row["trial_id"], row["status"], row["world_size"]) == (TRIAL_ID, "corrupt", 1)
    assert row["reason"] == f"trials/{TRIAL_ID}/ is missing (sweep.json plans it)"


def test_the_readers_say_missing_or_corrupt_and_never_raise(sweep):
    tdir = sweep / "trials" / TRIAL_ID
    assert read_trial(tdir).ok and read_record(tdir).doc["status"] == "completed"
    sub = read_submission(tdir)
    assert (sub.state, sub.doc, sub.reason) == ("missing", None, "submission.json is missing")
    (tdir / "record.json").write_text('{"status": 3}')
    assert read_record(tdir).reason == "record.json is corrupt: 'status' is 3, not str"
    (tdir / "record.json").write_bytes(b"\xff\xfe{}")
    assert read_record(tdir).reason.startswith("record.json is corrupt: not UTF-8 text")
    (tdir / "record.json").unlink()
    (tdir / "record.json").mkdir()
    assert read_record(tdir).corrupt and read_record(tdir).reason.startswith("record.json cannot be read")


def test_resume_keeps_a_damaged_record_and_reruns_a_damaged_outcome(sweep):
    tdir = sweep / "trials" / TRIAL_ID
    trial = Trial(**json.loads((tdir / "trial.json").read_text())["trial"])
    (tdir / "record.json").write_bytes(b"")
    assert is_done(sweep, trial)  # the payload finished: running again would replace the evidence
    (tdir / "record.json").unlink()
    (tdir / "outcome.json").write_bytes(b"")
    assert not is_done(sweep, trial)  # whether it ended for good cannot be read


def test_calibration_skips_a_damaged_trial_with_its_reason(sweep):
    assert len(load_measured(sweep)) == 1
    (sweep / "trials" / TRIAL_ID / "record.json").write_bytes(b"")
    unreadable: list[str] = []
    assert load_measured(sweep, unreadable) == []
    assert unreadable == [f"{TRIAL_ID}: record.json is truncated (0 bytes)"]


def _planned(tmp_path: Path, sizes: list[int]):
    """A real planned adaptive sweep folder (no trial run yet)."""
    overrides = [
        f"sweep.world_sizes=[{','.join(map(str, sizes))}]",
        "sweep.search=adaptive",
        f"sweep.results_dir={tmp_path}",
        "sweep.name=s",
    ]
    plan = prepare_sweep(overrides)
    return plan, create_sweep_dir(plan.cfg, plan.items, overrides)


def _record(sweep_dir: Path, t: Trial, thr: float, allreduce_bytes: float = 1_882_112) -> None:
    """What a payload writes, with throughput `thr`."""
    step = t.global_batch * 64 / thr
    metrics = {
        "tokens_per_s": thr,
        "tokens_per_s_per_device": thr / t.world_size,
        "samples_per_s": thr / 64,
        "step_time_median_s": step,
        "allreduce_bytes": allreduce_bytes,
        "cpu_contention": 1.0,
        "machines": 2,
    }
    record = {
        "status": "completed",
        "metrics": metrics,
        "wall_s": 30 * step + 5,
        "hosts": ["h"] * t.world_size,
        "nodes": 1,
        "config": json.loads((sweep_dir / "sweep.json").read_text())["config"],
    }
    (sweep_dir / "trials" / t.trial_id / "record.json").write_text(json.dumps(record))


def test_adaptive_search_records_why_the_model_bound_is_off(tmp_path):
    plan, sweep_dir = _planned(tmp_path, [1, 2, 4, 8])
    # A record the model cannot take (a NaN gradient size): the fit fails, the search goes on.
    run = lambda batch: [_record(sweep_dir, t, 1000.0 * t.world_size, math.nan) for t in batch]  # noqa: E731
    doc = run_adaptive(sweep_dir, plan.cfg, [t for t, _ in plan.items], run, log=lambda line: None)
    bounds = [s["model_bound"] for s in doc["steps"]]
    assert bounds[:2] == ["off: fewer than 2 completed sizes to fit on"] * 2
    assert bounds[2].startswith("off: the model fit failed: ") and len(bounds) == 4
    assert doc["cost"]["estimate_note"].startswith("the model fit failed: ")
    line = summary(sweep_dir)
    assert doc["final"][""]["model_bound"].startswith("off: the model fit failed: ")
    assert "The model's upper bound was off at 3 decision(s): the model fit failed: " in line
    assert "device-hours spent vs an unknown amount for the whole grid (the model fit failed: " in line


def test_adaptive_search_names_a_trial_it_could_not_calibrate_on(tmp_path):
    plan, sweep_dir = _planned(tmp_path, [1, 2, 4])
    trials = [t for t, _ in plan.items]

    def run(batch):
        for t in batch:
            _record(sweep_dir, t, 1000.0 * t.world_size)
            if t.world_size == 2:  # its record is damaged after the payload wrote it
                (sweep_dir / "trials" / t.trial_id / "record.json").write_bytes(b"")

    doc = run_adaptive(sweep_dir, plan.cfg, trials, run, log=lambda line: None)
    assert doc["final"][""]["unreadable_trials"] == ["001-ws2: record.json is truncated (0 bytes)"]
    df = build_table(sweep_dir).set_index("world_size")
    assert df.loc[2, "status"] == "corrupt"
    assert "Calibration skipped 1 unreadable trial(s): 001-ws2: record.json is truncated (0 bytes)." in summary(
        sweep_dir
    )


def test_a_damaged_search_json_is_said_not_hidden(tmp_path):
    plan, sweep_dir = _planned(tmp_path, [1, 2])
    (sweep_dir / "search.json").write_bytes(b"")
    assert summary(sweep_dir) == "Adaptive search: search.json is truncated (0 bytes), so what it spent is not known."
    run = lambda batch: [_record(sweep_dir, t, 1000.0 * t.world_size) for t in batch]  # noqa: E731
    doc = run_adaptive(sweep_dir, plan.cfg, [t for t, _ in plan.items], run, log=lambda line: None)
    assert doc["steps"][0]["note"].startswith("search.json is truncated (0 bytes); its earlier steps are lost")


def test_the_report_says_which_trials_the_model_left_out(sweep):
    (sweep / "trials" / TRIAL_ID / "record.json").write_text('{"status": "completed", "metr')
    assert main(["report", str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    assert f"Left out of the fit (damaged files): {TRIAL_ID}: record.json is truncated (" in report
