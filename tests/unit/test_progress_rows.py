"""A local sweep's progress rows (issue 31, item 3): a job=command trial shows its program's own steps (the meter
file's, a regex's step group: launcher.harvest.progress) or says running, never `0/<sweep.steps>`, and each
trial's clock stops when the trial ends, not when the sweep does. The rows are read as the terminal gets them at
the end (stderr, rich's last frame), with rich's clock replaced so the times are exact."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import rich.console

from launcher.config.compose import compose_config
from launcher.harvest.progress import last_logged_step, last_meter_step, steps_so_far, tail
from launcher.run.executor import executor_for
from launcher.run.executor.rows import Row, trial_row
from launcher.trials.spec import sweep_trials

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _command_sweep(tmp_path: Path, monkeypatch, run) -> None:
    """A 1,2-rank job=command sweep (sweep.steps=30) whose trials `run` plays, its rows on stderr."""
    clock = Clock()
    monkeypatch.setattr(rich.console, "monotonic", clock)  # rich's Console reads its clock from here
    cfg = compose_config(["job=command", "job.argv=[python,train.py]", "sweep.steps=30", "sweep.world_sizes=[1,2]"])
    trials = sweep_trials(cfg)
    for t in trials:
        (tmp_path / "trials" / t.trial_id).mkdir(parents=True)

    def fake(tdir, cfg, trial, *, on_step):
        return run(trial, on_step, clock)

    monkeypatch.setattr("launcher.run.executor.local.run_command_trial", fake)
    executor_for(cfg).run_batch(tmp_path, trials, progress_bars=True)


def _rows(err: str) -> dict[str, str]:
    """trial id → its row (spaces collapsed), from the last frame rich printed."""
    rows = {}
    for line in err.splitlines():
        if m := re.match(r"\s*(\d{3}-ws\d+) ", line):
            rows[m.group(1)] = " ".join(line.replace("━", " ").split())
    return rows


def test_a_command_trial_shows_its_programs_steps_and_its_clock_stops_at_its_end(tmp_path, monkeypatch, capsys):
    """Fails on the code before: the 1-rank row read `24/30` (sweep.steps, not the program's count) and 0:01:45,
    the whole sweep's time (its clock ran on through the 2-rank trial's 100 s, as its bar never filled); the 2-rank
    row `0/30`."""

    def run(trial, on_step, clock):
        if trial.world_size == 1:
            on_step(12)
            clock.now += 5
            on_step(24)  # a program of 24 steps, whatever sweep.steps says
            return {"reason": None}
        clock.now += 100  # a program that numbers no steps: no on_step
        return {"reason": "the command exited with code 1"}

    _command_sweep(tmp_path, monkeypatch, run)
    rows = _rows(capsys.readouterr().err)
    assert rows["000-ws1"] == "000-ws1 (1 ranks) done step 24 0:00:05"
    assert rows["001-ws2"] == "001-ws2 (2 ranks) failed 0:01:40"


@pytest.mark.parametrize(
    ("total", "step", "end", "row"),
    [
        # the built-in trainer: its steps known ahead
        (30, 12, None, Row(description="000-ws2 (2 ranks) running", steps="12/30", total=30, completed=12)),
        (30, 30, "done", Row(description="000-ws2 (2 ranks) done", steps="30/30", total=30, completed=30)),
        # a command: its own steps as seen, or a pulsing bar and "running"
        (None, None, None, Row(description="000-ws2 (2 ranks) running", steps="", total=None, completed=0)),
        (None, 12, None, Row(description="000-ws2 (2 ranks) running", steps="step 12", total=None, completed=12)),
        (None, 40, "done", Row(description="000-ws2 (2 ranks) done", steps="step 40", total=40, completed=40)),
        (None, None, "done", Row(description="000-ws2 (2 ranks) done", steps="", total=1, completed=1)),
        (
            None,
            None,
            "failed",
            Row(description="000-ws2 (2 ranks) [red]failed[/red]", steps="", total=1, completed=0),
        ),
    ],
)
def test_trial_rows(total, step, end, row):
    trial = SimpleNamespace(trial_id="000-ws2", world_size=2)
    assert trial_row(trial, total=total, step=step, end=end) == row


# --- what the rows read: the program's own steps so far (launcher.harvest.progress) -----------------------------


def test_the_meter_files_last_whole_record_is_the_step():
    text = '{"step": 1, "t": 1.0, "tokens": 8}\n{"step": 2, "t": 2.0, "tokens": 8}\n{"step": 3, "t": 3'
    assert last_meter_step(text) == 2  # step 3's line is still being written
    assert last_meter_step("") is None


@pytest.mark.parametrize(
    ("metrics", "text", "pattern", "step"),
    [
        ("regex", "step 5 loss 2.3 1800.0 tok/s\nstep 10 loss 2.1 2000.0 tok/s\n", r"step (?P<step>\d+) .*", 10),
        # no step group: the matches are not steps, so no count is shown
        ("regex", "step 5 loss 2.3 1800.0 tok/s\n", r"(?P<tokens_per_s>[0-9.]+) tok/s", None),
        ("torchtitan", (LOGS / "torchtitan_b5bcd76.log").read_text(), None, 30),
        ("megatron", (LOGS / "megatron_d98e8a6.log").read_text(), None, 30),
    ],
)
def test_the_logs_last_step_number_is_the_step(metrics, text, pattern, step):
    assert last_logged_step(metrics, text, pattern) == step


def test_steps_so_far_reads_the_meter_file_or_the_log_and_only_whole_lines(tmp_path):
    lines = [json.dumps({"step": s, "t": float(s), "tokens": 8}) for s in range(1, 2001)]
    (tmp_path / "meter.jsonl").write_text("\n".join(lines) + "\n")
    assert steps_so_far("hf", trial_dir=tmp_path, log=None, pattern=None) == 2000
    assert all(json.loads(ln) for ln in tail(tmp_path / "meter.jsonl").splitlines())  # the cut first line is dropped
    log = tmp_path / "rank0.log"
    log.write_text("".join(f"it {s}\n" for s in range(1, 5001)))
    assert steps_so_far("regex", trial_dir=tmp_path, log=log, pattern=r"it (?P<step>\d+)") == 5000
    assert all(re.fullmatch(r"it \d+", ln) for ln in tail(log).splitlines())  # the cut first line is dropped
    assert steps_so_far("regex", trial_dir=tmp_path, log=tmp_path / "rank9.log", pattern=r"it (?P<step>\d+)") is None
