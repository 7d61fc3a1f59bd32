"""Slurm side of a sweep: group trials into jobs, render every script, submit, ask Slurm, cancel.

All scripts are rendered (and so checked) before the first sbatch. Each job has one record,
`jobs/<job>.submitted.json`, written (fsync'd) just before its sbatch, naming its trials, and
again right after, with the job id: the durable and exact account of what was submitted, so a
resumed sweep never submits a trial twice. Each trial's `submission.json` is a copy derived from
it. `launcher.slurm.track` follows the jobs to their ends; `launcher.slurm.explain` says what each
trial ended as.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import launcher
from launcher.config.schema import LauncherConfig
from launcher.io import atomic_write_json, atomic_write_text
from launcher.signals import interrupts_deferred
from launcher.slurm.commands import JobState, SlurmError, query, sbatch, scancel, slurm_env
from launcher.slurm.explain import status_and_reason
from launcher.slurm.render import JobRequest, Where, job_request, render_script
from launcher.trials.folder import (
    FileRead,
    read_document,
    read_outcome,
    read_record,
    read_submission,
    trial_dir,
    trial_dirs,
    write_outcome,
    write_submission,
)
from launcher.trials.payload import Payload, payload_for, probe_payload
from launcher.trials.spec import Trial


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


# Slurm's default MaxArraySize (1001) allows task indices 0-1000: a longer array is split.
MAX_ARRAY_TASKS = 1000


def group_trials(trials: list[Trial], *, pack: bool, by_round: bool = False) -> list[list[Trial]]:
    """pack: one job for all, its steps in the trials' order. Otherwise one job array per shape
    (nodes, world size) holding all its repeats (and the combinations of that size), in round
    order (r0 of each combination, then r1, …), so a 4-size × 64-repeat sweep is 4 sbatch calls;
    sweep.array_throttle (`%K`) lets K of each run at once, so sizes submitted together advance
    side by side. by_round (cluster.serialize_trials: one job at a time, which no throttle can
    interleave): one job per size and repeat round, submitted round by round (1,2,4,1,2,4,…),
    the order the scheduler then keeps, so drift still hits every size alike."""
    if pack:
        return [list(trials)]
    groups: dict[tuple[int, int, int], list[Trial]] = {}
    for t in sorted(trials, key=lambda t: t.repeat):  # stable: sizes keep their order within a round
        groups.setdefault((t.repeat if by_round else 0, t.nodes, t.world_size), []).append(t)
    return [g[i : i + MAX_ARRAY_TASKS] for g in groups.values() for i in range(0, len(g), MAX_ARRAY_TASKS)]


def env_for(cfg: LauncherConfig) -> dict[str, str]:
    return slurm_env(cfg.cluster.slurm_conf)


def job_requests(
    cfg: LauncherConfig,
    sweep_dir: Path,
    trials: list[Trial],
    *,
    first_index: int = 0,
    payload_args: tuple[str, ...] = (),
    where: Where | None = None,
    payload: Payload | None = None,
) -> list[PreparedJob]:
    """Render every job of these trials (pure apart from reading templates); `payload_args`
    follow the payload's own arguments; `payload` replaces the config's (`launcher profile`). `where`:
    the folders a container mounts (default: the working folder, this sweep's, this launcher's package)."""
    sweep_dir = sweep_dir.resolve()
    where = where or Where(
        submit_dir=Path.cwd().resolve(), sweep_dir=sweep_dir, launcher_src=Path(launcher.__file__).resolve().parent
    )
    python = cfg.cluster.python or sys.executable
    command = cfg.job.kind == "command" and payload is None
    payload = payload or (None if command else payload_for(cfg, payload_args))
    jobs = []
    groups = group_trials(trials, pack=cfg.sweep.pack, by_round=cfg.cluster.serialize_trials)
    for i, group in enumerate(groups, start=first_index):
        dirs = [sweep_dir / "trials" / t.trial_id for t in group]
        commands = (
            [payload_for(cfg, trial=t, trial_dir=d) for t, d in zip(group, dirs, strict=True)] if command else None
        )
        request = job_request(
            cfg.cluster,
            group,
            dirs,
            job_name=f"lnch-{sweep_dir.name}"[:64],
            log_dir=sweep_dir / "jobs",
            python=python,
            payload=commands[0] if commands else payload,
            pack=cfg.sweep.pack,
            throttle=cfg.sweep.array_throttle,
            requeue=cfg.run.requeue and any(t.checkpoint for t in group),
            commands=commands,
            probe=probe_payload() if command and cfg.job.probe else None,
            where=where,
        )
        jobs.append(
            PreparedJob(name=f"job-{i:03d}", trials=tuple(group), request=request, script=render_script(request))
        )
    return jobs


def write_scripts(sweep_dir: Path, jobs: list[PreparedJob]) -> None:
    for job in jobs:
        atomic_write_text(sweep_dir / "jobs" / f"{job.name}.sbatch", job.script)


# Each job's durable record: which trials it runs and, once sbatch answered, its job id.
RECORD_SUFFIX = ".submitted.json"


def record_path(sweep_dir: Path, job_name: str) -> Path:
    return sweep_dir / "jobs" / f"{job_name}{RECORD_SUFFIX}"


def submit_jobs(
    sweep_dir: Path,
    jobs: list[PreparedJob],
    env: dict[str, str],
    on_submit: Callable[[PreparedJob, str], None] | None = None,
) -> None:
    """sbatch each job between two fsync'd writes of its record, then derive its trials'
    submission.json (see the module docstring)."""
    for job in jobs:
        record = _submit_one(sweep_dir, job, env)
        _write_copies(sweep_dir, _trial_docs(record))
        if on_submit:
            on_submit(job, record["job_id"])


def _submit_one(sweep_dir: Path, job: PreparedJob, env: dict[str, str]) -> dict[str, Any]:
    """One sbatch between two writes of the job's record. Ctrl-C waits until both are done: an
    interrupt between sbatch and the second write would leave a job that no record names, so
    that nothing could cancel it."""
    path = record_path(sweep_dir, job.name)
    record: dict[str, Any] = {
        "job": job.name,
        "script": f"jobs/{job.name}.sbatch",
        "job_id": None,
        "trials": [t.trial_id for t in job.trials],
        "array": job.request.array,
        "pack": job.request.pack,
    }
    with interrupts_deferred():
        atomic_write_json(path, record)  # from here on its trials count as submitted
        try:
            job_id = sbatch(sweep_dir / "jobs" / f"{job.name}.sbatch", env)
        except SlurmError:
            path.unlink()  # sbatch refused the job: nothing was submitted
            raise
        record = {**record, "job_id": job_id, "submitted_at": time.time()}
        atomic_write_json(path, record)
    return record


def _trial_docs(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each trial's submission, derived from its job's record: array task i is `<id>_i`; a packed job's
    trial i runs i-th (`pack_step`: its place, not a step id; its end is its own lines in the batch log,
    slurm/explain.py). No job id (see `submissions`): no key either."""
    job_id, docs = record["job_id"], {}
    for i, trial_id in enumerate(record["trials"]):
        key = f"{job_id}_{i}" if job_id is not None and record["array"] else job_id
        docs[trial_id] = {
            "job_id": job_id,
            "key": key,
            "script": record["script"],
            "pack_step": i if record["pack"] else None,
            "submitted_at": record.get("submitted_at"),
            "record": f"jobs/{record['job']}{RECORD_SUFFIX}",
        }
    return docs


def _write_copies(sweep_dir: Path, docs: dict[str, dict[str, Any]]) -> None:
    """Each trial's submission.json, for readers of the trial folder. Written atomically but
    not fsync'd: the job's record is the durable copy (256 fsyncs cost 0.2 s, more than the
    sbatch calls), and `refresh` rewrites a copy that a crash of the machine lost or cut."""
    for trial_id, doc in docs.items():
        write_submission(trial_dir(sweep_dir, trial_id), doc, durable=False)


def _check_record(doc: dict[str, Any]) -> str | None:
    trials = doc.get("trials")
    if not isinstance(trials, list) or not all(isinstance(t, str) for t in trials):
        return "no 'trials' list of trial ids"
    if not (doc.get("job_id") is None or isinstance(doc["job_id"], str)):
        return f"'job_id' is {json.dumps(doc['job_id'])[:40]}, not a string"
    missing = [k for k in ("job", "script", "array", "pack") if k not in doc]
    return f"no {missing[0]!r}" if missing else None


def submissions(sweep_dir: Path) -> dict[str, FileRead]:
    """trial id → its submission, for every trial that was submitted: from the jobs' records,
    else (a sweep from before them, or a damaged record) from the trial's submission.json.

    A trial counts as submitted from just before its sbatch. If the launcher died between sbatch
    and the record's second write, the record names the trials but no job id: they are never
    submitted again (that could run them twice); their job cannot be asked about, so they end as
    `unknown` with a reason naming the script, and a record.json the payload writes still makes
    the row. A damaged submission.json also counts (as corrupt): only its job id is lost."""
    out: dict[str, FileRead] = {}
    for path in sorted((sweep_dir / "jobs").glob(f"*{RECORD_SUFFIX}")):
        record = read_document(path, _check_record)
        if record.doc is not None:
            out |= {t: FileRead(name=path.name, state="ok", doc=d) for t, d in _trial_docs(record.doc).items()}
    for tdir in trial_dirs(sweep_dir):
        if tdir.name not in out and not (sub := read_submission(tdir)).missing:
            out[tdir.name] = sub
    return out


def refresh(sweep_dir: Path, cfg: LauncherConfig, known: dict[str, dict] | None = None) -> dict[str, dict]:
    """Ask Slurm about every submitted trial that has not ended, write each outcome.json that
    changed, and return every submitted trial's outcome. A trial whose outcome is final (on
    disk, or in `known`, the tracker's cache) is never asked about again, as submitit's watcher
    does: Slurm's word on an ended job does not change, and a sweep of 256 trials would
    otherwise ask about all of them on every poll."""
    known = known or {}
    outcomes: dict[str, dict] = {}
    ask: dict[str, tuple[FileRead, dict | None]] = {}
    for trial_id, sub in submissions(sweep_dir).items():
        prior = known.get(trial_id) or read_outcome(trial_dir(sweep_dir, trial_id)).doc
        if prior is not None and prior.get("final"):
            outcomes[trial_id] = prior
        else:
            ask[trial_id] = (sub, prior)
    keys = sorted({sub.doc["key"] for sub, _ in ask.values() if sub.doc is not None and sub.doc["key"]})
    states, notes = query(keys, env_for(cfg))
    for trial_id, (sub, prior) in ask.items():
        tdir = trial_dir(sweep_dir, trial_id)
        outcomes[trial_id] = doc = _outcome(sweep_dir, cfg, tdir, sub, states, notes)
        if doc != prior:  # an unchanged file is not rewritten: the tracker watches the folder for news
            write_outcome(tdir, doc)
        if sub.name.endswith(RECORD_SUFFIX) and sub.doc is not None and read_submission(tdir).doc != sub.doc:
            write_submission(tdir, sub.doc)  # the copy a crash of the machine lost or cut
    return outcomes


def _outcome(
    sweep_dir: Path, cfg: LauncherConfig, tdir: Path, read: FileRead, states: dict[str, JobState], notes: dict[str, str]
) -> dict:
    """One trial's outcome.json: Slurm's word on its job, and the trial's own files on a failure."""
    if read.doc is None:
        # Final: with the job id lost nothing will ever say more, and `track` must not wait for it.
        return {
            "executor": "slurm",
            "job": None,
            "status": "corrupt",
            "final": True,
            "source": read.name,
            "reason": f"{read.reason}; its job cannot be asked about",
        }
    sub = read.doc
    if sub["key"] is None:  # the launcher stopped between sbatch and recording the job id (see `submissions`)
        return {
            "executor": "slurm",
            "job": None,
            "status": "unknown",
            "final": True,
            "source": read.name,
            "reason": f"handed to sbatch as {sub['script']}, but the launcher stopped before recording the job "
            f"id; `sacct --name=lnch-{sweep_dir.resolve().name}` lists the sweep's jobs",
        }
    st = states.get(sub["key"])
    if st is None:
        why = "; ".join(f"{k}: {v}" for k, v in notes.items()) or "not in sacct or squeue"
        # squeue answered and no longer lists the job: it left the queue, so a record it wrote is its last word.
        gone = "squeue" not in notes and not read_record(tdir).missing
        return {
            "executor": "slurm",
            "job": sub["key"],
            "status": "unknown",
            "final": gone,
            "source": "none",
            "reason": f"job {sub['key']} state unknown ({why})" + ("; the trial's record stands" if gone else ""),
        }
    status, reason = status_and_reason(sweep_dir, cfg.cluster.time_limit, tdir, sub, st)
    return {
        "executor": "slurm",
        "job": sub["key"],
        "slurm_state": st.slurm_state,
        "status": status,
        "final": st.terminal,
        "source": st.source,
        "exit_code": st.exit_code,
        "signal": st.signal,
        "nodelist": st.nodelist,
        "reason": reason,
        "slurm_reason": st.queue_reason,
        "steps": [list(s) for s in st.steps],
        "requeues": st.requeues,
    }


def cancel_trials(sweep_dir: Path, cfg: LauncherConfig, reason: str) -> list[str]:
    """scancel every submitted trial that has not ended and record it as `cancelled` with
    `reason`; return the job ids scancel was given. A trial that ended keeps its outcome."""
    outcomes = refresh(sweep_dir, cfg)  # one last look, so a job that just ended is not called cancelled
    subs = submissions(sweep_dir)
    open_: dict[str, dict] = {}
    for trial_id, outcome in outcomes.items():
        sub = subs[trial_id].doc if trial_id in subs else None
        if not outcome.get("final") and sub is not None and sub["key"]:
            open_[trial_id] = sub
    ids = _cancel_ids(list(open_.values()), subs)
    # A second Ctrl-C waits until the jobs are cancelled and recorded: stopped between the two,
    # jobs would be gone while their trials still read as running.
    with interrupts_deferred():
        scancel(ids, env_for(cfg))
        now = time.time()
        for trial_id, sub in open_.items():
            write_outcome(
                trial_dir(sweep_dir, trial_id),
                {
                    "executor": "slurm",
                    "job": sub["key"],
                    "status": "cancelled",
                    "slurm_state": "CANCELLED",
                    "final": True,
                    "source": "launcher",
                    "reason": reason,
                    "cancelled_at": now,
                },
            )
    return ids


def _cancel_ids(open_: list[dict], subs: dict[str, FileRead]) -> list[str]:
    """What to hand scancel: a whole job when none of its trials has ended (a pending array
    element cancelled on its own stays folded into sacct's PENDING row of the array), else
    the array elements still open."""
    per_job = Counter(s.doc["job_id"] for s in subs.values() if s.doc is not None and s.doc.get("job_id"))
    keys: dict[str, set[str]] = {}
    for sub in open_:
        keys.setdefault(sub["job_id"], set()).add(sub["key"])
    ids: list[str] = []
    for job_id, mine in sorted(keys.items()):
        whole = mine == {job_id} or len(mine) == per_job[job_id]
        ids += [job_id] if whole else sorted(mine)
    return ids
