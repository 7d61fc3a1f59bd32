"""A Slurm trial's record.json is final only once its job has ended. A job requeued from outside
(`scontrol requeue`, preemption, a node failure) leaves the killed attempt's record (often `failed`) at
record.json until the next attempt's rank 0 sets it aside; a clean-clone CI run built the table from it
while the job ran its next attempt (tests/slurm/test_faults.py, requeue test). Slurm's rows here are
literal: captured from the dev cluster around an outside `scontrol requeue` of job 3993 (2026-11-28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json
from launcher.results.table import build_table
from launcher.run.sweep import create_sweep_dir
from launcher.slurm import submit
from launcher.slurm.commands import combine, parse_sacct, parse_squeue, states_from_sacct, states_from_squeue
from launcher.trials.folder import is_done, trial_dir
from launcher.trials.spec import sweep_trials

# Attempt 1 requeued from outside; attempt 2 waits (BeginTime: the old credential has not expired).
SACCT_WAITING = """\
3993|3993|job.sh|REQUEUED|0:0|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993.batch|3993.batch|batch|CANCELLED|0:15|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993.extern|3993.extern|extern|COMPLETED|0:0|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993|3993|job.sh|PENDING|0:0|00:00:00|None assigned|Unknown|Unknown
"""
SQUEUE_WAITING = "3993|PENDING|BeginTime||job.sh\n"
# Attempt 2 started: its rank 0 may not have set the old record aside yet.
SACCT_RUNNING = """\
3993|3993|job.sh|REQUEUED|0:0|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993.batch|3993.batch|batch|CANCELLED|0:15|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993.extern|3993.extern|extern|COMPLETED|0:0|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993|3993|job.sh|RUNNING|0:0|00:00:01|n1|2026-11-28T20:34:12|Unknown
3993.batch|3993.batch|batch|RUNNING|0:0|00:00:01|n1|2026-11-28T20:34:12|Unknown
3993.extern|3993.extern|extern|RUNNING|0:0|00:00:01|n1|2026-11-28T20:34:12|Unknown
"""
SQUEUE_RUNNING = "3993|RUNNING|None|n1|job.sh\n"
SACCT_DONE = """\
3993|3993|job.sh|REQUEUED|0:0|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993.batch|3993.batch|batch|CANCELLED|0:15|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993.extern|3993.extern|extern|COMPLETED|0:0|00:00:03|n1|2026-11-28T20:33:19|2026-11-28T20:33:22
3993|3993|job.sh|COMPLETED|0:0|00:00:20|n1|2026-11-28T20:34:12|2026-11-28T20:34:32
3993.batch|3993.batch|batch|COMPLETED|0:0|00:00:20|n1|2026-11-28T20:34:12|2026-11-28T20:34:32
3993.extern|3993.extern|extern|COMPLETED|0:0|00:00:20|n1|2026-11-28T20:34:12|2026-11-28T20:34:32
"""
KILLED = {"status": "failed", "reason": "rank 0: Connection closed by peer", "metrics": {}}


def _one_trial_sweep(tmp_path: Path):
    cfg = compose_config(["cluster=devcluster", "sweep.nodes=[1]", f"sweep.results_dir={tmp_path}", "sweep.name=rq"])
    (trial,) = sweep_trials(cfg)
    sweep_dir = create_sweep_dir(cfg, [(trial, cfg)], [])
    return sweep_dir, cfg, trial


def _slurm_says(monkeypatch, sacct: str, squeue: str) -> None:
    def query(keys, env):
        return combine(states_from_sacct(parse_sacct(sacct)), states_from_squeue(parse_squeue(squeue)), keys), {}

    monkeypatch.setattr(submit, "query", query)


@pytest.mark.parametrize(
    ("sacct", "squeue", "status"),
    [(SACCT_WAITING, SQUEUE_WAITING, "requeued"), (SACCT_RUNNING, SQUEUE_RUNNING, "running")],
)
def test_a_killed_attempts_record_neither_ends_the_trial_nor_fills_its_row(
    tmp_path, monkeypatch, sacct, squeue, status
):
    """Fails on the old is_done (a record was enough: the sweep closed the trial and built the table
    from the killed attempt's `failed`) and on the old trial_row (the row read that `failed`)."""
    sweep_dir, cfg, trial = _one_trial_sweep(tmp_path)
    tdir = trial_dir(sweep_dir, trial.trial_id)
    atomic_write_json(tdir / "submission.json", {"job_id": "3993", "key": "3993"})
    atomic_write_json(tdir / "record.json", KILLED)
    _slurm_says(monkeypatch, sacct, squeue)
    (outcome,) = submit.refresh(sweep_dir, cfg).values()
    assert (outcome["status"], outcome["final"], outcome["requeues"]) == (status, False, 1)
    assert not is_done(sweep_dir, trial)
    row = build_table(sweep_dir).iloc[0]
    assert row["status"] == status

    # The next attempt's record, then Slurm's COMPLETED: now the trial is done, with that record.
    atomic_write_json(tdir / "record.json", {"status": "completed", "metrics": {"tokens_per_s": 100.0}})
    _slurm_says(monkeypatch, SACCT_DONE, "")
    (outcome,) = submit.refresh(sweep_dir, cfg).values()
    assert (outcome["status"], outcome["final"]) == ("completed", True)
    assert is_done(sweep_dir, trial)
    row = build_table(sweep_dir).iloc[0]
    assert (row["status"], row["tokens_per_s"]) == ("completed", 100.0)


def test_a_record_without_a_job_stands_as_before(tmp_path, monkeypatch):
    """A local trial (no submission.json) is done with its record, as before. A Slurm job that neither
    sacct nor squeue lists (no accounting, and it left the queue) ends with the record it wrote; while
    squeue itself fails, it stays open. Fails without the `gone` rule in submit._outcome (the tracker
    would wait on `unknown` until sweep.pending_timeout_s)."""
    sweep_dir, cfg, trial = _one_trial_sweep(tmp_path)
    tdir = trial_dir(sweep_dir, trial.trial_id)
    atomic_write_json(tdir / "record.json", KILLED)
    assert is_done(sweep_dir, trial)
    atomic_write_json(tdir / "submission.json", {"job_id": "3993", "key": "3993"})
    monkeypatch.setattr(submit, "query", lambda keys, env: ({}, {"squeue": "slurm_load_jobs error: timeout"}))
    (outcome,) = submit.refresh(sweep_dir, cfg).values()
    assert (outcome["status"], outcome["final"]) == ("unknown", False)
    monkeypatch.setattr(submit, "query", lambda keys, env: ({}, {"sacct": "Slurm accounting storage is disabled"}))
    (outcome,) = submit.refresh(sweep_dir, cfg).values()
    assert (outcome["status"], outcome["final"]) == ("unknown", True)
    assert outcome["reason"].endswith("; the trial's record stands")
    assert is_done(sweep_dir, trial)
    assert build_table(sweep_dir).iloc[0]["status"] == "failed"
