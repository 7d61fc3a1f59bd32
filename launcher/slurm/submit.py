"""Slurm side of a sweep: group trials into jobs, render every script, submit, track.

All scripts are rendered (and so checked) before the first sbatch. After each sbatch the job id
is written into each of its trials' `submission.json` at once, so a launcher that dies
mid-submission leaves an exact account of what was submitted.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_text, last_lines
from launcher.trials.folder import (
    FileRead,
    read_record,
    read_submission,
    trial_dir,
    trial_dirs,
    write_outcome,
    write_submission,
)
from launcher.trials.spec import Trial
from launcher.slurm.render import JobRequest, job_request, render_script
from launcher.slurm.commands import JobState, query, sbatch, slurm_env

POLL_S = 2.0


@dataclass(kw_only=True, frozen=True)
class PreparedJob:
    name: str
    """Script file stem, e.g. `job-000`."""
    trials: tuple[Trial, ...]
    """Trials the job runs (array task i → trials[i]; pack: steps in order)."""
    request: JobRequest
    """The typed request the script is rendered from."""
    script: str
    """Rendered sbatch text."""


def group_trials(trials: list[Trial], *, pack: bool) -> list[list[Trial]]:
    """pack: one job for all. Otherwise one job per size; repeats of a size form an array."""
    if pack:
        return [list(trials)]
    groups: dict[tuple[int, int], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.nodes, t.world_size), []).append(t)
    return list(groups.values())


def env_for(cfg: LauncherConfig) -> dict[str, str]:
    return slurm_env(cfg.cluster.slurm_conf)


def job_requests(cfg: LauncherConfig, sweep_dir: Path, trials: list[Trial], *, first_index: int = 0,
              payload_args: tuple[str, ...] = ()) -> list[PreparedJob]:  # fmt: skip
    """Render every job of these trials (pure apart from reading templates)."""
    sweep_dir = sweep_dir.resolve()
    python = cfg.cluster.python or sys.executable
    jobs = []
    for i, group in enumerate(group_trials(trials, pack=cfg.sweep.pack), start=first_index):
        request = job_request(
            cfg.cluster,
            group,
            [sweep_dir / "trials" / t.trial_id for t in group],
            job_name=f"lnch-{sweep_dir.name}"[:64],
            log_dir=sweep_dir / "jobs",
            python=python,
            pack=cfg.sweep.pack,
            payload_args=payload_args,
            requeue=cfg.run.requeue and any(t.checkpoint for t in group),
        )
        jobs.append(PreparedJob(name=f"job-{i:03d}", trials=tuple(group), request=request, script=render_script(request)))
    return jobs


def write_scripts(sweep_dir: Path, jobs: list[PreparedJob]) -> None:
    for job in jobs:
        atomic_write_text(sweep_dir / "jobs" / f"{job.name}.sbatch", job.script)


def submit_jobs(sweep_dir: Path, jobs: list[PreparedJob], env: dict[str, str],
                on_submit: Callable[[PreparedJob, str], None] | None = None) -> None:  # fmt: skip
    for job in jobs:
        job_id = sbatch(sweep_dir / "jobs" / f"{job.name}.sbatch", env)
        for i, t in enumerate(job.trials):
            key = f"{job_id}_{i}" if job.request.array else job_id
            write_submission(
                trial_dir(sweep_dir, t.trial_id),
                {"job_id": job_id, "key": key, "script": f"jobs/{job.name}.sbatch", "pack_step": i if job.request.pack
                 else None, "submitted_at": time.time()},  # fmt: skip
            )
        if on_submit:
            on_submit(job, job_id)


def submissions(sweep_dir: Path) -> dict[str, FileRead]:
    """trial id → its submission.json, for every trial that was submitted. A damaged file is
    kept (as corrupt): the trial was submitted, only its job id is lost, and submitting it again
    would run it twice."""
    out = {}
    for tdir in trial_dirs(sweep_dir):
        sub = read_submission(tdir)
        if not sub.missing:
            out[tdir.name] = sub
    return out


def pack_step_state(sub: dict, job: JobState) -> tuple[str, str, int, int] | None:
    """The sacct step of a packed trial: the i-th srun of the job is step `<job>.<i>`."""
    if sub.get("pack_step") is None:
        return None
    want = f"{sub['job_id']}.{sub['pack_step']}"
    return next((s for s in job.steps if s[0] == want), None)


def first_task_error(batch_log: Path, trial_dir: Path) -> str | None:
    """srun's own word on the first task that failed in the trial's latest attempt, from the
    batch log (`srun: error: n4: task 1: Killed` → `task 1 on n4: Killed`)."""
    try:
        text = batch_log.read_text(errors="replace")
    except OSError:
        return None
    # The job script ends each attempt with "trial DIR: srun exit RC (attempt A)"; the log is appended.
    segments = re.split(rf"trial {re.escape(str(trial_dir))}: srun exit .*\n", text)
    segment = segments[-2] if len(segments) > 1 else segments[-1]
    hit = _TASK_ERROR.search(segment)
    return f"task {hit['task']} on {hit['node']}: {hit['what'].strip()}" if hit else None


_TASK_ERROR = re.compile(r"srun: error: (?P<node>\S+): task (?P<task>\d+): (?P<what>.+)")


def payload_detail(tdir: Path, batch_log: Path | None = None) -> str | None:
    """What the trial's own files say about a failed attempt: the first task srun saw fail,
    srun's exit code (the job script records it), and the end of the first rank log that holds
    an error, else of rank 0's."""
    codes = sorted(tdir.glob("exit_code.attempt*"), key=lambda p: int(p.suffix.removeprefix(".attempt") or 0))
    parts = []
    task = first_task_error(batch_log, tdir.resolve()) if batch_log else None
    if task:
        # srun's word "Killed" is SIGKILL; the ranks it stopped afterwards only show as 143 (SIGTERM).
        parts.append(task.replace(": Killed", " was killed by signal 9 (SIGKILL)") + " (srun)")
    attempt = codes[-1].suffix.removeprefix(".attempt") if codes else "0"
    if codes:
        rc = codes[-1].read_text().strip()
        if rc.isdigit() and int(rc) > 128 and not task:
            parts.append(f"srun exit {rc} (a rank was killed by signal {int(rc) - 128})")
        elif rc != "0":
            parts.append(f"srun exit {rc}")
    logs = sorted(tdir.glob(f"*.attempt{attempt}.log"))
    culprit = next((p for p in logs if _ERROR.search(p.read_text(errors="replace"))), logs[0] if logs else None)
    tail = last_lines(culprit) if culprit else ""
    if tail:
        parts.append(f"{culprit.name.split('.')[0]} log ends: {tail}")
    return "; ".join(parts) or None


def _record_completed(tdir: Path) -> bool:
    record = read_record(tdir)
    return record.doc is not None and record.doc["status"] == "completed"


_ERROR = re.compile(r"Traceback|Error|error:|Killed|killed")


def refresh(sweep_dir: Path, cfg: LauncherConfig) -> dict[str, dict]:
    """Ask Slurm about every submitted trial; write each trial's outcome.json; return them."""
    subs = submissions(sweep_dir)
    states, notes = query(sorted({s.doc["key"] for s in subs.values() if s.doc is not None}), env_for(cfg))
    outcomes = {}
    for trial_id, sub in subs.items():
        tdir = trial_dir(sweep_dir, trial_id)
        outcomes[trial_id] = doc = _outcome(sweep_dir, cfg, tdir, sub, states, notes)
        write_outcome(tdir, doc)
    return outcomes


def _outcome(sweep_dir: Path, cfg: LauncherConfig, tdir: Path, read: FileRead, states: dict[str, JobState],
             notes: dict[str, str]) -> dict:  # fmt: skip
    """One trial's outcome.json: Slurm's word on its job, and the trial's own files on a failure."""
    if read.doc is None:
        # Final: with the job id lost nothing will ever say more, and `track` must not wait for it.
        return {"executor": "slurm", "job": None, "status": "corrupt", "final": True, "source": read.name,
                "reason": f"{read.reason}; its job cannot be asked about"}  # fmt: skip
    sub = read.doc
    st = states.get(sub["key"])
    if st is None:
        why = "; ".join(f"{k}: {v}" for k, v in notes.items()) or "not in sacct or squeue"
        return {"executor": "slurm", "job": sub["key"], "status": "unknown", "final": False, "source": "none",
                "reason": f"job {sub['key']} state unknown ({why})"}  # fmt: skip
    status, reason = st.status, st.reason(cfg.cluster.time_limit)
    step = pack_step_state(sub, st)
    if step is not None:  # a packed trial is one step of a shared job: its own step speaks for it
        step_id, step_state, code, sig = step
        if step_state == "COMPLETED":
            status, reason = "completed", None
        elif step_state not in ("RUNNING", "PENDING"):
            status = "failed" if step_state == "FAILED" else step_state.lower()
            reason = f"step {step_id} {step_state} with " + (f"signal {sig}" if sig else f"exit code {code}")
    # A failure the payload may explain itself: srun's exit code and the log's last lines.
    # (cancelled, timeout, node_fail: Slurm's word is the whole story.)
    if status in ("failed", "oom") or (status == "completed" and not _record_completed(tdir)):
        detail = payload_detail(tdir, sweep_dir / "jobs" / f"slurm-{sub['key']}.out")
        reason = "; ".join(r for r in (reason, detail) if r) or None
    return {"executor": "slurm", "job": sub["key"], "slurm_state": st.slurm_state, "status": status,
            "final": st.terminal, "source": st.source, "exit_code": st.exit_code, "signal": st.signal,
            "nodelist": st.nodelist, "reason": reason, "steps": [list(s) for s in st.steps],
            "requeues": st.requeues}  # fmt: skip


def track(sweep_dir: Path, cfg: LauncherConfig, trials: list[Trial], *, progress_bars: bool = True) -> None:
    """Poll until every submitted trial has reached a terminal state, showing each one's state."""
    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not progress_bars, refresh_per_second=2) as progress:
        tasks = {t.trial_id: progress.add_task(f"{t.trial_id} ({t.nodes} nodes, {t.world_size} ranks)") for t in trials}
        while True:
            outcomes = refresh(sweep_dir, cfg)
            for trial_id, doc in outcomes.items():
                if trial_id in tasks:
                    label = doc.get("slurm_state") or doc["status"]
                    progress.update(tasks[trial_id], description=f"{trial_id}: job {doc['job']} {label} "
                                                                  f"({doc['source']})")  # fmt: skip
            if all(outcomes.get(t.trial_id, {}).get("final") for t in trials):
                return
            time.sleep(POLL_S)
