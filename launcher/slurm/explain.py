"""What a Slurm trial ended as, and why: its job's (or, packed, its step's) state, and on a failure
what the trial's own files say (srun's first failed task in the batch log, srun's exit code, the
end of the rank log that holds an error). `launcher.slurm.submit.refresh` writes it to outcome.json.
"""

from __future__ import annotations

import re
from pathlib import Path

from launcher.slurm.commands import JobState
from launcher.trials.ends import log_reason
from launcher.trials.folder import read_record


def status_and_reason(sweep_dir: Path, time_limit: str, tdir: Path, sub: dict, st: JobState) -> tuple[str, str | None]:
    """The trial's status and reason from its job's state (a packed trial: its own step's)."""
    status, reason = st.status, st.reason(time_limit)
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
    return status, reason


def pack_step_state(sub: dict, job: JobState) -> tuple[str, str, int, int] | None:
    """The sacct step of a packed trial: the i-th srun of the job is step `<job>.<i>`."""
    if sub.get("pack_step") is None:
        return None
    want = f"{sub['job_id']}.{sub['pack_step']}"
    return next((s for s in job.steps if s[0] == want), None)


def first_task_error(batch_log: Path, trial_dir: Path) -> str | None:
    """srun's own word on the first task that failed in the trial's latest attempt, from the
    batch log (`srun: error: n4: task 1: Killed` → `task 1 on n4: Killed`)."""
    return _task_words(_first_failed_task(batch_log, trial_dir))


def _task_words(hit: re.Match | None) -> str | None:
    return f"task {hit['task']} on {hit['node']}: {hit['what'].strip()}" if hit else None


def _first_failed_task(batch_log: Path, trial_dir: Path) -> re.Match | None:
    try:
        text = batch_log.read_text(errors="replace")
    except OSError:
        return None
    # The job script ends each attempt with "trial DIR: srun exit RC (attempt A)"; the log is appended.
    segments = re.split(rf"trial {re.escape(str(trial_dir))}: srun exit .*\n", text)
    segment = segments[-2] if len(segments) > 1 else segments[-1]
    return _TASK_ERROR.search(segment)


_TASK_ERROR = re.compile(r"srun: error: (?P<node>\S+): task (?P<task>\d+): (?P<what>.+)")


def payload_detail(tdir: Path, batch_log: Path | None = None) -> str | None:
    """What the trial's own files say about a failed attempt: the first task srun saw fail,
    srun's exit code (the job script records it), and the end of that task's log (srun names the
    culprit; the others only failed after it), else of the first rank log that holds an error,
    else of rank 0's."""
    codes = sorted(tdir.glob("exit_code.attempt*"), key=lambda p: int(p.suffix.removeprefix(".attempt") or 0))
    parts = []
    hit = _first_failed_task(batch_log, tdir.resolve()) if batch_log else None
    task = _task_words(hit)
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
    culprit = _culprit_log(tdir, hit, attempt)
    tail = log_reason(culprit) if culprit else ""
    if tail:
        parts.append(f"{culprit.name.split('.')[0]} log ends: {tail}")
    return "; ".join(parts) or None


def _culprit_log(tdir: Path, hit: re.Match | None, attempt: str) -> Path | None:
    """The log of the task srun named (ranks that failed after it, in the collective it left, only echo
    it; a name sort would pick rank 0's), else the first log that holds an error, else the first log."""
    named = tdir / f"rank{hit['task']}.attempt{attempt}.log" if hit else None
    if named is not None and named.exists():
        return named
    logs = sorted(tdir.glob(f"*.attempt{attempt}.log"))
    return next((p for p in logs if _ERROR.search(p.read_text(errors="replace"))), logs[0] if logs else None)


def _record_completed(tdir: Path) -> bool:
    record = read_record(tdir)
    return record.doc is not None and record.doc["status"] == "completed"


_ERROR = re.compile(r"Traceback|Error|error:|Killed|killed")
