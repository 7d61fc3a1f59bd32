"""`launcher status <sweep>`: where each trial of a sweep stands, and where that came from
(sacct, else squeue, else the trial folder's own files)."""

from __future__ import annotations

import argparse

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from launcher.report.piped import cut, in_full, piped, reason_room, stdout_console
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
    "JobArrayTaskLimit": "waits its turn: sweep.array_throttle caps how many repeats of a size run at once",
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
    header = ("trial", "nodes", "ranks", "job", "state", "source", "reason")
    rows = []
    for t in trials:
        tdir = trial_dir(path, t.trial_id)
        gone = ("corrupt", "—", "—", missing_folder(t.trial_id))
        state, source, job, reason = trial_state(read_folder(tdir)) if tdir.is_dir() else gone
        rows.append([t.trial_id, str(t.nodes), str(t.world_size), job, state, source, reason])
    console, full = stdout_console(), []
    if piped(console):  # one row per line, within PIPED_MAX: a long reason cut, then given whole below
        widths = [max(cell_len(c) for c in column) for column in zip(header, *rows, strict=True)]
        room = reason_room(widths, len(header) - 1, len(header[-1]), widths[-1])
        full = in_full([r[0] for r in rows], [r[-1] for r in rows], room)
        rows = [[*r[:-1], cut(r[-1], room)] for r in rows]
    table = Table(title=f"sweep {path.name} ({executor.name})")
    for col in header:
        table.add_column(col)
    for row in rows:
        table.add_row(*map(Text, row))
    console.print(table)
    for line in full:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
