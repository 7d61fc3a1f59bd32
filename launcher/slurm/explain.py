"""What a Slurm trial ended as, and why: its job's state (a packed trial: its own end, from its own lines in the
shared batch log), and on a failure what the trial's own files say (srun's first failed task in the batch log,
the exit code the job script echoed, the end of the log that holds the error). `launcher.slurm.submit.refresh`
writes it to outcome.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from launcher.slurm.commands import JobState, oom_step
from launcher.trials.ends import log_reason, telling_tails
from launcher.trials.folder import read_record, read_trial


def status_and_reason(sweep_dir: Path, time_limit: str, tdir: Path, sub: dict, st: JobState) -> tuple[str, str | None]:
    """The trial's status and reason from its job's state (a packed trial: its own end in the batch log)."""
    batch_log = sweep_dir / "jobs" / f"slurm-{sub['key']}.out"
    status, reason = st.status, st.reason(time_limit)
    if sub.get("pack_step") is not None:  # one of the job's trials: the job's state speaks only for its end
        status, reason = _packed_end(batch_log, tdir, st) or (status, reason)
    # A failure the payload may explain itself: srun's exit code and the log's last lines.
    # (cancelled, timeout, node_fail: Slurm's word is the whole story.)
    if status in ("failed", "oom") or (status == "completed" and not _record_completed(tdir)):
        detail = payload_detail(tdir, batch_log)
        reason = "; ".join(r for r in (reason, detail) if r) or None
    return status, reason


def _packed_end(batch_log: Path, tdir: Path, job: JobState) -> tuple[str, str | None] | None:
    """A packed trial's end from its own lines in the shared batch log: the job script echoes `trial DIR: srun exit
    RC` (`command exit RC` for job=command) after each trial. A trial's steps are not the job's step i: a command
    trial adds a link-probe step, a container a record step, and job.launch=none starts steps of its own; the steps
    srun names among the trial's lines (`StepId=J.S`) say whether Slurm killed one for memory. None while the trial
    has not ended its job's latest attempt (running, or cut short: the job's state is then its end)."""
    segment, end = trial_segment(_read(batch_log), tdir.resolve())
    if end is None or int(end["attempt"]) < job.requeues:
        return None
    named = set(_STEP_ID.findall(segment))
    steps = [s for s in job.steps if s[0] in named]
    if (step := oom_step(steps)) is not None:
        return "oom", f"out of memory (Slurm OUT_OF_MEMORY in step {step}): a rank reached the job's memory limit"
    if int(end["rc"]) == 0:
        return "completed", None
    failed = next((s for s in steps if s[1] not in ("COMPLETED", "RUNNING")), None)
    if failed is None:
        return "failed", None
    step_id, state, code, sig = failed
    return "failed", f"step {step_id} {state} with " + (f"signal {sig}" if sig else f"exit code {code}")


# What the job script echoes of a trial (trial.sbatch.j2, command_step.j2, command_record): every such line
# closes a stretch of the batch log; the end of an attempt is `trial DIR: srun|command exit RC (attempt A)`.
_ECHO = re.compile(r"^trial (?P<dir>.+?): .*$", re.MULTILINE)
_END = r"^trial {dir}: (?P<what>srun|command) exit (?P<rc>-?\d+) \(attempt (?P<attempt>\d+)\)$"
_STEP_ID = re.compile(r"StepId=(\d+\.\d+)")
_TASK_ERROR = re.compile(r"srun: error: (?P<node>\S+): task (?P<task>\d+): (?P<what>.+)")


def trial_segment(text: str, trial_dir: Path) -> tuple[str, re.Match | None]:
    """The stretch of the batch log (appended across attempts, shared by a pack's trials) that holds srun's
    words on the trial's latest attempt: from the job script's previous echo of any trial (the trial before it
    in a pack, an earlier attempt, its own probe's failure) to its latest `… exit RC (attempt A)` line, with that
    line's match; no such line yet: whatever follows the last echo, and None."""
    ends = list(re.finditer(_END.format(dir=re.escape(str(trial_dir))), text, re.MULTILINE))
    if not ends:
        echoes = list(_ECHO.finditer(text))
        return text[echoes[-1].end() :] if echoes else text, None
    end = ends[-1]
    before = [m for m in _ECHO.finditer(text, 0, end.start()) if m.end() < end.start()]
    return text[before[-1].end() if before else 0 : end.start()], end


def first_task_error(batch_log: Path, trial_dir: Path) -> str | None:
    """srun's own word on the first task that failed in the trial's latest attempt, from the
    batch log (`srun: error: n4: task 1: Killed` → `task 1 on n4: Killed`)."""
    hit = _TASK_ERROR.search(trial_segment(_read(batch_log), trial_dir)[0])
    return f"task {hit['task']} on {hit['node']}: {hit['what'].strip()}" if hit else None


@dataclass(frozen=True)
class _Attempt:
    """The trial's latest attempt as its files tell it."""

    number: str
    task: re.Match | None
    """srun's first `task N` that failed in it (batch log)."""
    torchrun: bool
    """Its step ran one torchrun agent per node: srun's task N is node N (logs node<N>.attempt<A>.log)."""


def payload_detail(tdir: Path, batch_log: Path | None = None) -> str | None:
    """What the trial's own files say about a failed attempt: the first task srun saw fail, the exit code the
    job script echoed (srun's, or the command's for job=command), and the end of that task's log (srun names
    the culprit; the others only failed after it) and, where it does not say out of memory, of the first log
    that does (under torchrun a node whose agent srun stopped can be named first), else of the first log that
    holds an error, else of rank 0's."""
    codes = sorted(tdir.glob("exit_code.attempt*"), key=lambda p: int(p.suffix.removeprefix(".attempt") or 0))
    number = codes[-1].suffix.removeprefix(".attempt") if codes else "0"
    segment, end = trial_segment(_read(batch_log), tdir.resolve()) if batch_log else ("", None)
    at = _Attempt(number, _TASK_ERROR.search(segment), any(tdir.glob(f"node*.attempt{number}.log")))
    parts = []
    if at.task:
        # srun's word "Killed" is SIGKILL; the ranks it stopped afterwards only show as 143 (SIGTERM).
        agent = f" (node {at.task['task']}'s torchrun)" if at.torchrun else ""
        words = f"task {at.task['task']}{agent} on {at.task['node']}: {at.task['what'].strip()}"
        parts.append(words.replace(": Killed", " was killed by signal 9 (SIGKILL)") + " (srun)")
    word = f"{end['what']} exit" if end else "srun exit"
    if codes:
        rc = codes[-1].read_text().strip()
        if rc.isdigit() and int(rc) > 128 and not at.task:
            parts.append(f"{word} {rc} (a rank was killed by signal {int(rc) - 128})")
        elif rc != "0":
            parts.append(f"{word} {rc}")
    logs = _told_logs(tdir, at)
    told = telling_tails([(p.name.split(".")[0], log_reason(p)) for p in logs])
    parts += [f"{name} log ends: {tail}" for name, tail in told if tail]
    return "; ".join(parts) or None


def _told_logs(tdir: Path, at: _Attempt) -> list[Path]:
    """The attempt's rank and node logs (not the link probe's), the culprit first: the log of the task srun named
    (ranks that failed after it, in the collective it left, only echo it; a name sort would pick rank 0's), under
    torchrun the one of that node's ranks that holds an error, else the node's own log; else the first log that
    holds an error, else the first log."""
    logs = [p for p in sorted(tdir.glob(f"*.attempt{at.number}.log")) if not p.name.startswith("probe-")]
    named: list[Path] = []
    if at.task is not None and at.torchrun:
        node = int(at.task["task"])
        per_node = _ranks_per_node(tdir)
        ranks = range(node * per_node, (node + 1) * per_node) if per_node else range(0)
        on_node = [tdir / f"rank{r}.attempt{at.number}.log" for r in ranks]
        erring = [p for p in on_node if p.exists() and _ERROR.search(_read(p))]
        named = erring[:1] or [tdir / f"node{node}.attempt{at.number}.log"]
    elif at.task is not None:
        named = [tdir / f"rank{at.task['task']}.attempt{at.number}.log"]
    named = [p for p in named if p.exists()]
    if not named:
        named = [p for p in logs if _ERROR.search(_read(p))][:1] or logs[:1]
    return named + [p for p in logs if p not in named]


def _ranks_per_node(tdir: Path) -> int | None:
    """Ranks each node's torchrun started (trial.json: world size ÷ nodes); None when trial.json cannot say."""
    doc = read_trial(tdir).doc
    trial = (doc or {}).get("trial") or {}
    world, nodes = trial.get("world_size"), trial.get("nodes")
    return world // nodes if isinstance(world, int) and isinstance(nodes, int) and nodes > 0 else None


def _read(path: Path | None) -> str:
    try:
        return path.read_text(errors="replace") if path else ""
    except OSError:
        return ""


def _record_completed(tdir: Path) -> bool:
    record = read_record(tdir)
    return record.doc is not None and record.doc["status"] == "completed"


_ERROR = re.compile(r"Traceback|Error|error:|Killed|killed")
