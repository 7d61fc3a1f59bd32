"""Ctrl-C and `launcher cancel`: a Slurm sweep's queued and running jobs are cancelled and their
rows read `cancelled`; a sweep stuck in the queue detaches with Slurm's Reason; the tracker asks
Slurm only about jobs that have not ended; a launcher that died between sbatch and recording the
job id never submits those trials again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from waiting import wait_for

from launcher.cli import main
from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.sweep import create_sweep_dir
from launcher.slurm import submit
from launcher.slurm.commands import JobState, SlurmError
from launcher.slurm.track import Backoff
from launcher.trials.folder import FileRead
from launcher.trials.spec import sweep_trials

RUN = f"{os.getpid()}-{int(time.time())}"  # job names are per sweep: other sessions' jobs stay out of view
LONG = ["cluster=devcluster", "sweep.nodes=[1,2]", "sweep.steps=400"]


def in_queue(env: dict[str, str], name: str) -> dict[str, str]:
    """Job id → state, for the sweep's jobs that squeue still lists."""
    out = subprocess.run(
        ["squeue", "--noheader", f"--name=lnch-{name}", "--format=%i|%T"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.split("|", 1) for line in out.split())


def first_job(sweep_dir: Path) -> str | None:
    """The first job's id once its submission record holds it."""
    record = sweep_dir / "jobs" / "job-000.submitted.json"
    return read_json(record)["job_id"] if record.exists() else None


def cancel_leftovers(env: dict[str, str], name: str) -> None:
    """Whatever a failed test left of its own sweep (by its unique job name); nobody else's."""
    subprocess.run(["scancel", f"--name=lnch-{name}"], env=env, check=False)


def rows(sweep_dir: Path) -> list[tuple[str, str]]:
    df = pd.read_csv(sweep_dir / "results.csv")
    return list(zip(df["status"], df["reason"]))


@pytest.mark.slurm
def test_ctrl_c_cancels_the_sweeps_jobs_and_their_rows_read_cancelled(devcluster, tmp_path):
    env, name = devcluster.env(), f"int-{RUN}"
    sweep_dir = tmp_path / name
    cmd = [
        sys.executable,
        "-m",
        "launcher",
        "sweep",
        *LONG,
        f"sweep.results_dir={tmp_path}",
        f"sweep.name={name}",
        "--quiet",
    ]
    with open(tmp_path / "launcher.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        job = wait_for(lambda: first_job(sweep_dir), 120, "the first job's submission record", every=0.2)
        wait_for(lambda: in_queue(env, name).get(job) == "RUNNING", 180, f"job {job} to run", every=0.2)
        assert len(in_queue(env, name)) == 2  # the second job waits behind it (one job at a time)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        wait_for(lambda: not in_queue(env, name), 10, "the sweep's jobs to leave squeue", every=0.2)
        assert proc.wait(timeout=max(0.1, 10 - (time.monotonic() - sent))) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cancel_leftovers(env, name)
    said = (tmp_path / "launcher.log").read_text()
    assert "interrupted: cancelled Slurm job(s)" in said, said
    assert rows(sweep_dir) == [("cancelled", "cancelled by the user (Ctrl-C)")] * 2
    outcome = read_json(sweep_dir / "trials" / "000-ws1" / "outcome.json")
    assert (outcome["status"], outcome["final"], outcome["job"]) == ("cancelled", True, job)


@pytest.mark.slurm
def test_launcher_cancel_stops_a_detached_sweep_from_another_shell(devcluster, tmp_path, capsys):
    env, name = devcluster.env(), f"det-{RUN}"
    sweep_dir = tmp_path / name
    try:
        assert main(["sweep", *LONG, f"sweep.results_dir={tmp_path}", f"sweep.name={name}", "--detach"]) == 0
        job = first_job(sweep_dir)
        wait_for(lambda: in_queue(env, name).get(job) == "RUNNING", 180, f"job {job} to run", every=0.2)
        capsys.readouterr()
        assert main(["cancel", str(sweep_dir)]) == 0
        said = capsys.readouterr().out
        assert said.startswith("cancelled Slurm job(s) ") and job in said
        wait_for(lambda: not in_queue(env, name), 10, "the sweep's jobs to leave squeue", every=0.2)
    finally:
        cancel_leftovers(env, name)
    assert rows(sweep_dir) == [("cancelled", "cancelled by the user (launcher cancel)")] * 2
    # From here Slurm is not asked about them again (their outcomes are final), so a later
    # collect keeps the user's reason rather than sacct's "cancelled by uid 0".
    assert main(["collect", str(sweep_dir)]) == 0
    assert rows(sweep_dir) == [("cancelled", "cancelled by the user (launcher cancel)")] * 2
    capsys.readouterr()
    assert main(["cancel", str(sweep_dir)]) == 0
    assert capsys.readouterr().out.startswith("nothing to cancel: ")


@pytest.mark.slurm
def test_a_sweep_held_in_the_queue_detaches_with_slurms_reason(devcluster, tmp_path, capsys):
    env, name = devcluster.env(), f"held-{RUN}"
    sweep_dir = tmp_path / name
    try:
        began = time.monotonic()
        assert (
            main(
                [
                    "sweep",
                    "cluster=devcluster",
                    "sweep.nodes=[1]",
                    "cluster.sbatch_extra=['--hold']",
                    "sweep.pending_timeout_s=5",
                    f"sweep.results_dir={tmp_path}",
                    f"sweep.name={name}",
                    "--quiet",
                ]
            )
            == 0
        )
        assert 5 <= time.monotonic() - began < 60
        out = capsys.readouterr().out
        job = first_job(sweep_dir)
        assert f"000-ws1: job {job} PENDING, Slurm's Reason: JobHeldUser" in out
        assert f"launcher status {sweep_dir}" in out and f"launcher collect {sweep_dir}" in out
        assert in_queue(env, name) == {job: "PENDING"}  # left queued, not cancelled
        assert main(["status", str(sweep_dir)]) == 0
        assert "Slurm's Reason: JobHeldUser" in capsys.readouterr().out
    finally:
        cancel_leftovers(env, name)


def test_cancel_on_a_local_sweep_says_there_is_nothing_to_cancel(tmp_path, capsys):
    cfg = compose_config([f"sweep.results_dir={tmp_path}", "sweep.name=local"])
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in sweep_trials(cfg)], [])
    assert main(["cancel", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to cancel: sweep local runs locally") and out.count("\n") == 1


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
