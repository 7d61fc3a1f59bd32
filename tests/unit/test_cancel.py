"""Ctrl-C and `launcher cancel` without a cluster: the tracker asks Slurm only about jobs that have
not ended; a launcher that died between sbatch and recording the job id never submits those trials
again; scancel gets whole jobs. The real cancels: tests/slurm/test_cancel_slurm.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.stopped import cancelled_outcome
from launcher.run.sweep import create_sweep_dir
from launcher.slurm import submit
from launcher.slurm.commands import JobState, SlurmError
from launcher.slurm.track import Backoff
from launcher.trials.folder import FileRead, trial_dir, write_outcome
from launcher.trials.spec import sweep_trials


def test_cancel_on_a_local_sweep_says_there_is_nothing_to_cancel(tmp_path, capsys):
    cfg = compose_config([f"sweep.results_dir={tmp_path}", "sweep.name=local"])
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in sweep_trials(cfg)], [])
    assert main(["cancel", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to cancel: sweep local runs locally") and out.count("\n") == 1


def test_status_and_collect_call_a_stopped_and_a_never_started_trial_the_same(tmp_path, capsys):
    """An interrupted local sweep's folder: its first trial stopped by Ctrl-C, its second never started."""
    cfg = compose_config([f"sweep.results_dir={tmp_path}", "sweep.name=stopped", "sweep.world_sizes=[1,2]"])
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in sweep_trials(cfg)], [])
    write_outcome(trial_dir(sweep_dir, "000-ws1"), cancelled_outcome(KeyboardInterrupt()))
    capsys.readouterr()
    assert main(["status", str(sweep_dir)]) == 0
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in capsys.readouterr().out.splitlines() if "│" in ln]
    states = {r[0]: r[4] for r in rows}
    assert main(["collect", str(sweep_dir)]) == 0
    table = pd.read_csv(sweep_dir / "results.csv")
    assert states == dict(zip(table["trial_id"], table["status"], strict=True))
    assert states == {"000-ws1": "cancelled", "001-ws2": "not started"}


def _slurm_sweep(tmp_path: Path, name: str) -> tuple[Path, object, list]:
    """Two combinations (a, b) at 1 and 2 nodes: each size's pair is one job array."""
    cfg = compose_config(
        ["cluster=devcluster", "sweep.nodes=[1,2]", f"sweep.results_dir={tmp_path}", f"sweep.name={name}"]
    )
    a = sweep_trials(cfg, variant="a")
    trials = a + sweep_trials(cfg, first_index=len(a), variant="b")
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], [])
    jobs = submit.job_requests(cfg, sweep_dir, trials)
    submit.write_scripts(sweep_dir, jobs)
    return sweep_dir, cfg, jobs


def test_the_tracker_asks_slurm_only_about_jobs_that_have_not_ended(tmp_path, monkeypatch):
    sweep_dir, cfg, jobs = _slurm_sweep(tmp_path, "asks")
    ids = iter(["71", "72"])
    monkeypatch.setattr(submit, "sbatch", lambda script, env: next(ids))
    submit.submit_jobs(sweep_dir, jobs, {})
    asked: list[list[str]] = []

    def query(keys, env):
        asked.append(keys)
        done = JobState(key="71_0", slurm_state="COMPLETED", status="completed", source="sacct")
        return {
            k: done if k == "71_0" else JobState(key=k, slurm_state="RUNNING", status="running", source="sacct")
            for k in keys
        }, {}

    monkeypatch.setattr(submit, "query", query)
    known: dict[str, dict] = {}
    for _ in range(3):
        outcomes = submit.refresh(sweep_dir, cfg, known=known)
        known |= {t: o for t, o in outcomes.items() if o["final"]}
    assert asked[0] == ["71_0", "71_1", "72_0", "72_1"]
    assert asked[1:] == [["71_1", "72_0", "72_1"]] * 2  # 71_0 ended: never asked about again
    assert read_json(sweep_dir / "trials" / "000-a-ws1" / "submission.json")["key"] == "71_0"  # the derived copy
    asked.clear()
    submit.refresh(sweep_dir, cfg)  # a later shell (status, collect): the final outcome on disk is the cache
    assert asked == [["71_1", "72_0", "72_1"]]


def test_a_launcher_that_died_between_sbatch_and_the_record_never_submits_those_trials_again(tmp_path, monkeypatch):
    sweep_dir, cfg, jobs = _slurm_sweep(tmp_path, "died")
    monkeypatch.setattr(submit, "sbatch", lambda script, env: "81")
    submit.submit_jobs(sweep_dir, jobs[:1], {})
    # job-001 was handed to sbatch, and the launcher died before the second write of its record.
    atomic_write_json(
        submit.record_path(sweep_dir, jobs[1].name),
        {
            "job": jobs[1].name,
            "job_id": None,
            "array": True,
            "pack": False,
            "script": f"jobs/{jobs[1].name}.sbatch",
            "trials": ["001-a-ws2", "003-b-ws2"],
        },
    )
    assert sorted(submit.submissions(sweep_dir)) == ["000-a-ws1", "001-a-ws2", "002-b-ws1", "003-b-ws2"]
    monkeypatch.setattr(submit, "query", lambda keys, env: ({}, {}))
    lost = submit.refresh(sweep_dir, cfg)["001-a-ws2"]
    assert (lost["status"], lost["final"]) == ("unknown", True)
    assert lost["reason"].startswith("handed to sbatch as jobs/job-001.sbatch, but the launcher stopped before")


def test_sbatch_refusing_a_job_leaves_no_record(tmp_path, monkeypatch):
    sweep_dir, _, jobs = _slurm_sweep(tmp_path, "refused")

    def refuse(script, env):
        raise SlurmError("sbatch job-000.sbatch failed (exit 1): invalid partition")

    monkeypatch.setattr(submit, "sbatch", refuse)
    with pytest.raises(SlurmError):
        submit.submit_jobs(sweep_dir, jobs, {})
    assert submit.submissions(sweep_dir) == {}  # nothing was submitted, so a resume submits it


def test_cancel_hands_scancel_whole_jobs_unless_some_of_their_trials_ended():
    def sub(job_id: str, i: int | None) -> dict:
        return {"job_id": job_id, "key": job_id if i is None else f"{job_id}_{i}"}

    subs = {
        f"t{n}": FileRead(name="x", state="ok", doc=d)
        for n, d in enumerate([sub("5", 0), sub("5", 1), sub("6", 0), sub("6", 1), sub("7", None), sub("7", None)])
    }
    open_ = [sub("5", 0), sub("5", 1), sub("6", 1), sub("7", None), sub("7", None)]
    assert submit._cancel_ids(open_, subs) == ["5", "6_1", "7"]


def test_polls_back_off_to_30_s_and_start_over_on_a_change():
    b, delays, delay = Backoff(), [], None
    for changed in [False] * 7 + [True, False]:
        delay = b.next(delay, changed)
        delays.append(delay)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 1, 2]
