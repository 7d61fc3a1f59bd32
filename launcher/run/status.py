"""`launcher status <sweep>`: where each trial of a sweep stands, and where that came from
(sacct, else squeue, else the trial folder's own files)."""

from __future__ import annotations

import argparse

from rich.table import Table
from rich.text import Text

from launcher.report.terminal import stdout_console
from launcher.run.executor import executor_for
from launcher.run.sweep import load_sweep
from launcher.trials.ends import NOT_STARTED
from launcher.trials.folder import TrialFiles, missing_folder, read_folder, trial_dir


def trial_state(files: TrialFiles) -> tuple[str, str, str, str]:
    """(state, source, job, reason) of one trial from its folder's files. A damaged file makes
    the state `corrupt`, with the file named: its word on how the trial ended cannot be read."""
    doc = files.outcome.doc
    job = str((doc or {}).get("job") or (files.submission.doc or {}).get("key") or "—")
    if files.problems:
        source = ", ".join(f.name for f in (files.trial, files.record, files.outcome, files.submission) if f.corrupt)
        return "corrupt", source, job, "; ".join(files.problems)
    record = files.record.ok
    if doc is None:
        return ("completed" if record else NOT_STARTED), ("record" if record else "—"), job, ""
    state = "completed" if record and doc.get("status") in (None, "completed") else doc.get("status", "failed")
    reason = doc.get("reason") or ""
    if doc.get("slurm_reason") and not record:
        reason = queue_reason(doc["slurm_reason"], job)
    return state, str(doc.get("source", doc.get("executor", ""))), job, reason


# What the commonest of Slurm's pending Reasons mean (squeue's %r; `man squeue` lists them all).
_MEANS = {
    "JobHeldUser": "held; `scontrol release {job}` lets it run",
    "JobHeldAdmin": "held by an administrator",
    "Dependency": "waits for an earlier job (cluster.serialize_trials runs a sweep's jobs one at a time)",
    "Resources": "waits for nodes to free up",
    "Priority": "jobs of higher priority are ahead of it",
    "QOSMaxJobsPerUser": "your QOS caps how many of your jobs run at once",
    "BeginTime": "may not start yet (a requeued job waits a while)",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
}


def queue_reason(reason: str, job: str) -> str:
    """`Slurm's Reason: JobHeldUser (held; …)` for a job waiting in the queue."""
    means = _MEANS.get(reason)
    return f"Slurm's Reason: {reason}" + (f" ({means.format(job=job)})" if means else "")


def main(args: argparse.Namespace) -> int:
    path, cfg, trials = load_sweep(args.sweep_dir)
    executor = executor_for(cfg)
    executor.refresh(path)
    table = Table(title=f"sweep {path.name} ({executor.name})")
    for col in ("trial", "nodes", "ranks", "job", "state", "source", "reason"):
        table.add_column(col)
    for t in trials:
        tdir = trial_dir(path, t.trial_id)
        gone = ("corrupt", "—", "—", missing_folder(t.trial_id))
        state, source, job, reason = trial_state(read_folder(tdir)) if tdir.is_dir() else gone
        table.add_row(*map(Text, (t.trial_id, str(t.nodes), str(t.world_size), job, state, source, reason)))
    stdout_console().print(table)
    return 0
