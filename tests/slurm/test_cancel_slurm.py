"""Ctrl-C and `launcher cancel` on the dev cluster: a Slurm sweep's queued and running jobs are
cancelled and their rows read `cancelled`; a sweep stuck in the queue detaches with Slurm's
Reason. The tracker and the record without a cluster: tests/unit/test_cancel.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from launcher.cli import main
from launcher.io import read_json
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slurm


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


# signal → how the launcher names it, and its exit status (128 + the signal's number)
STOPS = {"SIGINT": ("Ctrl-C", 130), "SIGTERM": ("SIGTERM", 143)}


def _sigint_as_default() -> None:
    """Before exec: a shell's background job ignores SIGINT, and Python leaves an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("stop", STOPS)
def test_ctrl_c_cancels_the_sweeps_jobs_and_their_rows_read_cancelled(stop, devcluster, tmp_path):
    """Ctrl-C, or SIGTERM (which would otherwise end the launcher at once and leave its jobs running)."""
    how, code = STOPS[stop]
    env, name = devcluster.env(), f"int-{stop}-{RUN}"
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
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_sigint_as_default)
    try:
        job = wait_for(lambda: first_job(sweep_dir), 120, "the first job's submission record", every=0.2)
        wait_for(lambda: in_queue(env, name).get(job) == "RUNNING", 180, f"job {job} to run", every=0.2)
        assert len(in_queue(env, name)) == 2  # the second job waits behind it (one job at a time)
        proc.send_signal(getattr(signal, stop))
        sent = time.monotonic()
        wait_for(lambda: not in_queue(env, name), 10, "the sweep's jobs to leave squeue", every=0.2)
        assert proc.wait(timeout=max(0.1, 10 - (time.monotonic() - sent))) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cancel_leftovers(env, name)
    said = (tmp_path / "launcher.log").read_text()
    assert "interrupted: cancelled Slurm job(s)" in said, said
    assert said.splitlines()[-1] == (
        f"launcher: interrupted ({how}): 2 trials cancelled; the table of what finished is in {sweep_dir}; every "
        f"trial has ended, so launcher sweep --resume {sweep_dir} has nothing left to run (a cancelled Slurm job's "
        "trial stays cancelled)"
    )
    assert rows(sweep_dir) == [("cancelled", f"cancelled by the user ({how})")] * 2
    outcome = read_json(sweep_dir / "trials" / "000-ws1" / "outcome.json")
    assert (outcome["status"], outcome["final"], outcome["job"]) == ("cancelled", True, job)


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


def test_a_throttled_array_says_why_its_repeats_wait_and_cancels_whole(devcluster, tmp_path, capsys):
    """Issue 30 item 11: the repeats of a size are one array, sweep.array_throttle of them at once. `launcher status`
    asks about each task (`<job>_<i>`) and says why the rest wait (JobArrayTaskLimit); `launcher cancel` stops the
    running task and the waiting ones, and every repeat's row reads cancelled."""
    env, name = devcluster.env(), f"thr-{RUN}"
    sweep_dir = tmp_path / name
    argv = ["cluster=devcluster", "cluster.serialize_trials=false", "sweep.nodes=[1]", "sweep.steps=400"]
    try:
        throttled = ["sweep.repeats=3", "sweep.array_throttle=1", f"sweep.results_dir={tmp_path}", f"sweep.name={name}"]
        assert main(["sweep", *argv, *throttled, "--detach"]) == 0
        job = first_job(sweep_dir)
        wait_for(lambda: in_queue(env, name).get(f"{job}_0") == "RUNNING", 180, f"task {job}_0 to run", every=0.2)
        assert in_queue(env, name) == {f"{job}_0": "RUNNING", f"{job}_[1-2%1]": "PENDING"}
        assert main(["status", str(sweep_dir)]) == 0
        trials = ["000-ws1-r0", "001-ws1-r1", "002-ws1-r2"]
        outcomes = [read_json(sweep_dir / "trials" / t / "outcome.json") for t in trials]
        assert [(o["job"], o["status"], o.get("slurm_reason")) for o in outcomes] == [
            (f"{job}_0", "running", None),
            (f"{job}_1", "pending", "JobArrayTaskLimit"),
            (f"{job}_2", "pending", "JobArrayTaskLimit"),
        ]
        capsys.readouterr()
        assert main(["cancel", str(sweep_dir)]) == 0
        assert capsys.readouterr().out.startswith(f"cancelled Slurm job(s) {job}")
        wait_for(lambda: not in_queue(env, name), 10, "the array's tasks to leave squeue", every=0.2)
    finally:
        cancel_leftovers(env, name)
    assert rows(sweep_dir) == [("cancelled", "cancelled by the user (launcher cancel)")] * 3
