"""Follow a sweep's Slurm jobs to their ends without hammering the scheduler.

Polls of sacct/squeue back off: 1 s, doubling to 30 s, back to 1 s whenever a trial's state
changed. Between polls the tracker only looks at the trial folders (one stat each per second, no
Slurm call): a job that starts creates its rank logs there, and one that ends writes its exit
code and record.json, so a change there brings the next poll forward and starts the backoff again
(Slurm says COMPLETED a moment after the files: a poll right after them still reads RUNNING). A finished trial is never
asked about again (`refresh`). A sweep stalled in the queue — none of its jobs running for longer
than `sweep.pending_timeout_s` — raises `Stalled`, saying why each job waits (Slurm's Reason), so
the caller can detach instead of waiting forever.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.config.schema import LauncherConfig
from launcher.slurm.submit import refresh
from launcher.trials.folder import trial_dir
from launcher.trials.spec import Trial

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


@dataclass(kw_only=True, frozen=True)
class Backoff:
    """Seconds between two polls of sacct/squeue."""

    first_s: float = 1.0
    """The wait at the start and after any change."""
    max_s: float = 30.0
    """The longest wait while nothing changes."""

    def next(self, delay: float | None, changed: bool) -> float:
        return self.first_s if delay is None or changed else min(2 * delay, self.max_s)


class Stalled(Exception):
    """No job of the sweep ran for longer than sweep.pending_timeout_s."""

    def __init__(self, *, waiting: list[str], waited_s: float, timeout_s: float) -> None:
        super().__init__(
            f"none of the sweep's jobs ran in the last {waited_s:.0f} s (sweep.pending_timeout_s={timeout_s:g})"
        )
        self.waiting = waiting
        """One line per trial still waiting: its job, state and Slurm's Reason."""


def track(
    sweep_dir: Path,
    cfg: LauncherConfig,
    trials: list[Trial],
    *,
    progress_bars: bool = True,
    backoff: Backoff = Backoff(),
) -> None:
    """Poll until every trial has reached a terminal state, showing each one's state. Raises
    Stalled when none of them has run for longer than sweep.pending_timeout_s (0: never)."""
    # lazy: rich (~40 ms of imports) only where progress is followed, never in a --detach submission
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not progress_bars, refresh_per_second=2) as progress:
        tasks = {t.trial_id: progress.add_task(f"{t.trial_id} ({t.nodes} nodes, {t.world_size} ranks)") for t in trials}
        finished: dict[str, dict] = {}
        shown: dict[str, str] = {}
        delay: float | None = None
        stalled_since: float | None = None
        woke = False
        while True:
            # The folders as they were before this poll: what changes while it runs wakes the next wait.
            marks = _marks(sweep_dir, [t.trial_id for t in trials if t.trial_id not in finished])
            outcomes = refresh(sweep_dir, cfg, known=finished)
            finished |= {t: o for t, o in outcomes.items() if o.get("final")}
            changed = _show(progress, tasks, outcomes, shown)
            open_ = [t.trial_id for t in trials if t.trial_id not in finished]
            if not open_:
                return
            now = time.monotonic()
            running = any(outcomes.get(t, {}).get("status") == "running" for t in open_)
            stalled_since = None if running else (stalled_since or now)
            left = _time_left(cfg, outcomes, open_, stalled_since, now)
            delay = backoff.next(delay, changed or woke)
            woke = _wait(sweep_dir, open_, min(delay, left), before=marks)


def _show(progress: Progress, tasks: dict[str, TaskID], outcomes: dict[str, dict], shown: dict[str, str]) -> bool:
    """Update each trial's line; True when any line changed since the last poll."""
    changed = False
    for trial_id, doc in outcomes.items():
        why = f", {doc['slurm_reason']}" if doc.get("slurm_reason") else ""
        text = f"{trial_id}: job {doc['job']} {doc.get('slurm_state') or doc['status']}{why} ({doc['source']})"
        if shown.get(trial_id) != text:
            shown[trial_id], changed = text, True
            if trial_id in tasks:
                progress.update(tasks[trial_id], description=text)
                if doc.get("final"):  # its clock ends with it, not with the sweep
                    progress.stop_task(tasks[trial_id])
    return changed


def _time_left(
    cfg: LauncherConfig, outcomes: dict[str, dict], open_: list[str], stalled_since: float | None, now: float
) -> float:
    """Seconds until the sweep counts as stalled (inf: it is not stalling); raise Stalled once it is."""
    timeout = cfg.sweep.pending_timeout_s
    if not timeout or stalled_since is None:
        return math.inf
    waited = now - stalled_since
    if waited < timeout:
        return timeout - waited
    raise Stalled(waiting=[waiting_line(t, outcomes.get(t)) for t in open_], waited_s=waited, timeout_s=timeout)


def waiting_line(trial_id: str, outcome: dict | None) -> str:
    """`000-ws1: job 226 PENDING, Slurm's Reason: JobHeldUser`, or what is known instead."""
    if outcome is None:
        return f"{trial_id}: not submitted"
    reason = f", Slurm's Reason: {outcome['slurm_reason']}" if outcome.get("slurm_reason") else ""
    state = outcome.get("slurm_state") or outcome["status"]
    detail = "" if reason or not outcome.get("reason") else f" ({outcome['reason']})"
    return f"{trial_id}: job {outcome['job']} {state}{reason}{detail}"


def _wait(
    sweep_dir: Path, trial_ids: list[str], seconds: float, *, before: dict[str, int], tick_s: float = 1.0
) -> bool:
    """Sleep up to `seconds`; return True early once a trial folder differs from `before` (a job
    started or ended, so the next poll has news), False after the whole wait."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(tick_s, left))
        now = _marks(sweep_dir, trial_ids)
        if any(now[t] != before.get(t, now[t]) for t in trial_ids):
            return True
    return False


def _marks(sweep_dir: Path, trial_ids: list[str]) -> dict[str, int]:
    """Each trial folder's modification time: it changes when a file is created, renamed or removed in it."""
    out = {}
    for trial_id in trial_ids:
        try:
            out[trial_id] = trial_dir(sweep_dir, trial_id).stat().st_mtime_ns
        except OSError:
            out[trial_id] = -1
    return out
