"""Faults on the real dev cluster: every way a trial can end is recorded with its reason, and a
requeued run resumes from its checkpoint to the parameters of an uninterrupted run."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from launcher.config.compose import compose_config
from launcher.io import atomic_write_json, read_json
from launcher.run.run import as_sweep, run_trials
from launcher.run.sweep import create_sweep_dir, execute
from launcher.slurm.submit import job_requests, submit_jobs, write_scripts
from launcher.trials.spec import make_trial
from tests.support.uninterrupted import DEV, STEPS
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slurm


def scontrol(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["scontrol", *args], env=env, check=True, capture_output=True, text=True).stdout


def job_field(env: dict[str, str], job: str, field: str) -> str:
    out = scontrol(env, "show", "job", job)
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{field}=")), "")


def start_now(env: dict[str, str], job: str, restarts: int) -> None:
    """A requeued job may start again once its old credential expired (the dev cluster sets
    cred_expire=20 s instead of Slurm's 120 s); past that EligibleTime, an update makes the
    scheduler look at it now rather than at its next periodic pass."""

    def running_again() -> bool:
        if int(job_field(env, job, "Restarts") or 0) < restarts:
            return False
        state = job_field(env, job, "JobState")
        eligible = job_field(env, job, "EligibleTime")
        if state == "PENDING" and eligible not in ("", "Unknown") and time.strftime("%Y-%m-%dT%H:%M:%S") > eligible:
            scontrol(env, "update", f"JobId={job}", "StartTime=now")
        return state in ("RUNNING", "COMPLETED")

    # 150 s: a clean-clone run once saw no restart within 90 s; a timeout now shows the job's state and reason.
    wait_for(
        running_again,
        150,
        f"job {job} to run again after requeue {restarts}",
        every=1.0,
        detail=lambda: scontrol(env, "show", "job", job),
    )


def checkpoint_step(tdir: Path) -> int:
    marker = tdir / "checkpoint" / "latest.json"
    return read_json(marker)["step"] if marker.exists() else 0


EVERY = 20


def test_requeued_run_resumes_from_its_checkpoints_to_the_uninterrupted_parameters(devcluster, tmp_path, uninterrupted):
    """`launcher run --requeue` on 2 nodes, interrupted twice: USR1 (Slurm's warning) → the
    ranks checkpoint and exit 75 → the job script requeues itself; then `scontrol requeue` from
    outside → the job resumes from the last periodic checkpoint. Final parameters equal the
    uninterrupted run's."""
    env = devcluster.env()
    overrides = [
        *DEV,
        "cluster.nodes=2",
        f"run.steps={STEPS}",
        "run.warmup_steps=2",
        f"run.checkpoint_every={EVERY}",
        "run.requeue=true",
        f"sweep.results_dir={tmp_path}",
    ]
    cfg = as_sweep(compose_config(overrides))
    trials = run_trials(cfg)
    (trial,) = trials
    assert trial.checkpoint and trial.checkpoint_every == EVERY
    sweep_dir = create_sweep_dir(cfg, [(t, cfg) for t in trials], overrides)
    tdir = sweep_dir / "trials" / trial.trial_id
    jobs = job_requests(cfg, sweep_dir, trials, payload_args=("--save-params", str(sweep_dir / "params.pt")))
    assert "#SBATCH --requeue" in jobs[0].script and 'scontrol requeue "$SLURM_JOB_ID"' in jobs[0].script
    write_scripts(sweep_dir, jobs)
    submit_jobs(sweep_dir, jobs, env)
    job = read_json(tdir / "submission.json")["key"]

    # 1. USR1 once the first periodic checkpoint exists: checkpoint at the next step, exit 75, self-requeue.
    wait_for(lambda: checkpoint_step(tdir) >= EVERY, 120, "the first periodic checkpoint")
    subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)
    wait_for(lambda: (tdir / "exit_code.attempt0").exists(), 60, "attempt 0 to end")
    on_signal = checkpoint_step(tdir)
    assert read_json(tdir / "checkpointed.attempt0")["step"] == on_signal  # saved at the signal, then requeued
    start_now(env, job, restarts=1)

    # 2. From outside: `scontrol requeue` once attempt 1 has saved a periodic checkpoint past it.
    wait_for(lambda: checkpoint_step(tdir) > on_signal, 120, "a periodic checkpoint in attempt 1")
    periodic = checkpoint_step(tdir)
    scontrol(env, "requeue", job)
    start_now(env, job, restarts=2)
    # The killed attempt's rank 0 leaves a `failed` record when it gets to write one before the kill, and it
    # stays until attempt 2's rank 0 sets it aside: the tracker must not take it for the trial's end (a
    # clean-clone run once did, and built the table from it). Left where it is when it is there; otherwise
    # put where the killed attempt would have, so each run meets that window, not one run in a few.
    if not (tdir / "record.json").exists():
        atomic_write_json(tdir / "record.json", {"status": "failed", "reason": "rank 0: Connection closed by peer"})

    result = execute(sweep_dir, cfg, trials, progress_bars=False)  # tracks to the end and builds the table
    record = read_json(tdir / "record.json")
    assert record["status"] == "completed"
    assert record["metrics"]["resumed_from_step"] >= periodic
    # Three attempts, each with its own rank logs (the killed one never got to write its exit code).
    assert sorted(p.name for p in tdir.glob("rank0.attempt*.log")) == [f"rank0.attempt{i}.log" for i in range(3)]
    assert (tdir / "exit_code.attempt2").read_text().strip() == "0"
    row = result.table.iloc[0]
    assert row["status"] == "completed"
    assert row["reason"] == f"requeued 2×, then completed (resumed from step {record['metrics']['resumed_from_step']})"
    final = torch.load(sweep_dir / "params.pt")
    assert max((final[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) <= 1e-6


# --- one sweep holding every way a trial can end ------------------------------------------

COMMON = [
    "cluster=devcluster",
    "cluster.serialize_trials=false",
    "sweep.array_throttle=0",  # every trial of an array at once, as the faults below are timed for
    "cluster.exclusive=true",
    "run.requeue=true",
    "optim=sgd",
    "optim.lr=0.05",
    "sweep.steps=20",
    "sweep.warmup_steps=2",
]
LONG = ["sweep.steps=5000"]  # minutes of training: lasts until its fault ends it
# name → (overrides, nodes). One-node trials form one job array, two-node ones another.
KINDS = {
    "timeout": (LONG, 1),
    "ok": ([], 1),
    "nan": (["optim.lr=1e30"], 1),
    "oom": (["model.d_model=262144"], 1),  # a 275 GB weight: the CPU allocator refuses it
    "cancel": (LONG, 1),
    "nodefail": (LONG, 1),
    "ok2": ([], 2),
    "killrank": (LONG, 2),
    # Checkpoints every 20 steps; its array is requeue-able, the one-node array is not. Long enough to be
    # still running when the loop below requeues it: on an unlimited CPU 150 steps took a few seconds, and a
    # job requeued after it COMPLETED runs its whole script again (a second record, no resume to check).
    "requeue": (["sweep.steps=300"], 2),
}


def rank_pids(tdir: Path) -> dict[int, int]:
    """SLURM_PROCID → pid of the trial's payload processes (the nodes share this machine's pids)."""
    out = {}
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"launcher.train" not in argv or str(tdir / "trial.json").encode() not in argv or b"srun" in argv[0]:
                continue
            env = dict(kv.split(b"=", 1) for kv in (proc / "environ").read_bytes().split(b"\0") if b"=" in kv)
            out[int(env[b"SLURM_PROCID"])] = int(proc.name)
        except (OSError, ValueError, KeyError):
            continue
    return out


def started(tdir: Path) -> bool:
    return any("step " in p.read_text(errors="replace") for p in tdir.glob("rank0.attempt*.log"))


def test_a_sweep_holding_every_kind_of_end_records_each_with_its_reason(devcluster, tmp_path, capsys):
    """completed, failed (a rank killed -9), cancelled, timeout, node_fail, oom, nan and requeued, in
    one sweep; the controller is restarted mid-sweep. `launcher collect` shows each with its reason
    and every completed row."""
    from launcher.cli import main
    from launcher.slurm import devcluster as dc
    from launcher.slurm.devcluster.conf import Layout, host_veth
    from launcher.slurm.devcluster.state import locked

    env = devcluster.env()
    base = compose_config([*COMMON, f"sweep.results_dir={tmp_path}"])
    items = []
    for i, (name, (overrides, nodes)) in enumerate(KINDS.items()):
        cfg = compose_config([*COMMON, *overrides, f"sweep.results_dir={tmp_path}"])
        t = make_trial(
            cfg,
            index=i,
            world_size=nodes,
            nodes=nodes,
            steps=cfg.sweep.steps,
            warmup_steps=cfg.sweep.warmup_steps,
            variant=name,
        )
        if name == "requeue":
            t = dataclasses.replace(t, checkpoint=True, checkpoint_every=20)
        items.append((t, cfg))
    trials = [t for t, _ in items]
    sweep_dir = create_sweep_dir(base, items, COMMON)
    tdir = {t.variant: sweep_dir / "trials" / t.trial_id for t in trials}
    assert execute(sweep_dir, base, trials, progress_bars=False, detach=True) is None
    key = {name: read_json(d / "submission.json")["key"] for name, d in tdir.items()}

    # The controller dies and comes back (`launcher cluster up` repairs it); jobs carry on. Not while a job
    # is between its start and its step: an srun that finds no controller fails the trial ("Unable to create
    # step … Unable to contact slurm controller"; a clean-clone run lost the timeout trial so), so the kill
    # waits until every trial is training, ended, or pending.
    def settled() -> bool:
        return all(
            started(d) or (d / "exit_code.attempt0").exists() or job_field(env, key[name], "JobState") == "PENDING"
            for name, d in tdir.items()
        )

    # A pending trial the scheduler starts just before the kill meets no controller (a clean-clone run lost the
    # timeout trial so, after `settled` held): the partition is down meanwhile, so none starts until the
    # controller is back (running jobs run on). Per-job holds were tried: one the scheduler started while the
    # holds went in stayed held (priority 0), and a requeue would have left it pending for good.
    partition = job_field(env, key["timeout"], "Partition")
    scontrol(env, "update", f"PartitionName={partition}", "State=DOWN")
    try:
        wait_for(settled, 180, "every trial training, ended or pending before the controller restart", every=1.0)
        ctld = next(
            p
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and (p / "comm").exists() and (p / "comm").read_text().strip() == "slurmctld"
        )
        os.kill(int(ctld.name), signal.SIGTERM)
        dc.up(nodes=4, log=lambda line: None)
    finally:
        scontrol(env, "update", f"PartitionName={partition}", "State=UP")

    # Each fault as soon as its trial trains; one loop, so no fault waits on another.
    node = None
    cut_at = None
    todo = {"requeue", "cancel", "timeout", "nodefail", "killrank", "restart", "restore"}
    with locked(Layout(root=devcluster.root)):  # `cluster up` elsewhere must not repair the cut link
        try:
            deadline = time.monotonic() + 400
            while todo and time.monotonic() < deadline:
                if (
                    "requeue" in todo
                    and checkpoint_step(tdir["requeue"]) >= 20  # requeued after a checkpoint, while it trains
                    and job_field(env, key["requeue"], "JobState") == "RUNNING"
                    and not (tdir["requeue"] / "record.json").exists()
                ):
                    scontrol(env, "requeue", key["requeue"])
                    todo.remove("requeue")
                elif "restart" in todo and "requeue" not in todo and job_field(env, key["requeue"], "Restarts") == "1":
                    if job_field(env, key["requeue"], "JobState") == "PENDING":
                        eligible = job_field(env, key["requeue"], "EligibleTime")
                        if eligible not in ("", "Unknown") and time.strftime("%Y-%m-%dT%H:%M:%S") > eligible:
                            scontrol(env, "update", f"JobId={key['requeue']}", "StartTime=now")
                    elif job_field(env, key["requeue"], "JobState") in ("RUNNING", "COMPLETED"):
                        todo.remove("restart")
                if "cancel" in todo and started(tdir["cancel"]):
                    subprocess.run(["scancel", key["cancel"]], env=env, check=True)
                    todo.remove("cancel")
                if "timeout" in todo and started(tdir["timeout"]):
                    scontrol(env, "update", f"JobId={key['timeout']}", "TimeLimit=1")  # --time exceeded in a minute
                    todo.remove("timeout")
                if "nodefail" in todo and started(tdir["nodefail"]):
                    node = job_field(env, key["nodefail"], "NodeList")
                    subprocess.run(["ip", "link", "set", host_veth(node), "down"], check=True)
                    cut_at = time.monotonic()
                    todo.remove("nodefail")
                if "restore" in todo and node and job_field(env, key["nodefail"], "JobState") == "NODE_FAIL":
                    subprocess.run(["ip", "link", "set", host_veth(node), "up"], check=True)
                    print(f"NODE_FAIL of {node} after {time.monotonic() - cut_at:.0f} s", flush=True)
                    scontrol(env, "update", f"NodeName={node}", "State=RESUME")
                    todo.remove("restore")
                if "killrank" in todo and started(tdir["killrank"]) and len(rank_pids(tdir["killrank"])) == 2:
                    os.kill(rank_pids(tdir["killrank"])[1], signal.SIGKILL)
                    todo.remove("killrank")
                time.sleep(1.0)
        finally:
            if node:
                subprocess.run(["ip", "link", "set", host_veth(node), "up"], check=True)
    assert not todo, f"faults never injected: {sorted(todo)}; " + "; ".join(
        f"{name}: {job_field(env, key[name], 'JobState')}, "
        + " | ".join(p.read_text(errors="replace")[-300:] for p in sorted(tdir[name].glob("rank0.attempt*.log")))
        for name in sorted(todo & set(tdir))
    )

    result = execute(sweep_dir, base, trials, progress_bars=False)  # track the rest to their ends
    wait_for(
        lambda: (
            "idle"
            in subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], env=env, capture_output=True, text=True).stdout
        ),
        120,
        f"{node} back to idle",
    )

    rows = result.table.set_index("variant")
    status = rows["status"].to_dict()
    reason = rows["reason"].to_dict()
    assert status == {
        "ok": "completed",
        "nan": "nan",
        "oom": "oom",
        "requeue": "completed",
        "cancel": "cancelled",
        "nodefail": "node_fail",
        "timeout": "timeout",
        "ok2": "completed",
        "killrank": "failed",
    }, reason
    assert reason["nan"].startswith("loss became NaN/inf at step ")
    assert reason["oom"].startswith("out of memory (infeasible at this size and layout): rank 0 raised RuntimeError")
    assert reason["requeue"].startswith("requeued 1×, then completed (resumed from step ")
    assert reason["cancel"] == "cancelled by uid 0 (scancel)"
    assert reason["nodefail"] == f"a node failed (Slurm NODE_FAIL on {node})"
    assert reason["timeout"] == "hit the job's time limit (cluster.time_limit=00:10:00)"  # lowered to 1 min by scontrol
    assert "killed by signal 9" in reason["killrank"]
    for name in ("ok", "ok2", "requeue"):
        assert rows.loc[name, "tokens_per_s"] > 0 and pd.isna(rows.loc[name, "reason"]) == (name != "requeue")

    # From any later shell: collect shows every end with its reason and keeps every completed row.
    capsys.readouterr()
    assert main(["collect", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    for word in ("nan", "oom", "cancelled", "node_fail", "timeout", "failed", "requeued 1×", "killed by signal 9"):
        assert word in out, word
    again = pd.read_csv(sweep_dir / "results.csv", keep_default_na=False).set_index("variant")  # a variant is "nan"
    assert again["status"].to_dict() == status
