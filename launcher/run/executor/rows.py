"""The rows a local sweep shows while it runs: one for the sweep, one a trial with its state, steps and clock.
The built-in trainer's steps are known ahead (sweep.steps: `12/30`); a command's are its program's own, as far as
it has reported them (`step 12`: launcher.harvest.progress), or not known, and then the bar pulses and the row
says running rather than `0/30` (sweep.steps is not the program's count). A trial's clock stops when it ends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.progress import BarColumn, Progress, ProgressColumn, TaskID, TextColumn, TimeElapsedColumn

from launcher.trials.spec import Trial


def columns() -> tuple[ProgressColumn, ...]:
    return (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[steps]}"), TimeElapsedColumn())


@dataclass(kw_only=True, frozen=True)
class Row:
    """A trial's row, as rich's Progress.update takes it."""

    description: str
    """The trial, its ranks and its state: running, done or failed."""
    steps: str
    """`12/30` (known ahead), `step 12` (the program's own count so far), or "" (not known)."""
    total: int | None
    """The bar's length; None: a pulsing bar (the steps to come are not known)."""
    completed: int
    """The bar's filled part."""


def trial_row(trial: Trial, *, total: int | None, step: int | None, end: str | None = None) -> Row:
    """The row of `trial`: `total` its steps where known ahead (None for a command), `step` the last one seen
    (None: none yet, or the program numbers none), `end` None while it runs, else "done" or "failed"."""
    state = "[red]failed[/red]" if end == "failed" else end or "running"
    description = f"{trial.trial_id} ({trial.world_size} ranks) {state}"
    seen = step or 0
    if total is not None:
        return Row(description=description, steps=f"{seen}/{total}", total=total, completed=seen)
    steps = f"step {step}" if step else ""
    if end is None:
        return Row(description=description, steps=steps, total=None, completed=seen)
    # Ended: the bar stops pulsing, filled to the steps seen (a done program that numbered none: whole)
    return Row(description=description, steps=steps, total=max(seen, 1), completed=seen or int(end == "done"))


class TrialRows:
    """A sweep's rows on `progress`: start each trial, feed it the steps seen, end it (its clock stops there)."""

    def __init__(self, progress: Progress, trials: Sequence[Trial]) -> None:
        self.progress = progress
        self.trials = len(trials)
        self.ended = 0
        self.seen: dict[TaskID, int] = {}
        """The last step each trial's row showed."""
        self.overall = progress.add_task("sweep", total=self.trials, steps=self._count())

    def _count(self) -> str:
        return f"{self.ended}/{self.trials} trials"

    def start(self, trial: Trial, *, total: int | None) -> tuple[TaskID, Callable[[int], None]]:
        """The trial's row, and the function that shows each step seen."""
        first = trial_row(trial, total=total, step=None)
        task = self.progress.add_task(first.description, total=first.total, steps=first.steps)

        def on_step(step: int) -> None:
            self.seen[task] = step
            row = trial_row(trial, total=total, step=step)
            self.progress.update(task, description=row.description, steps=row.steps, completed=row.completed)

        return task, on_step

    def end(self, task: TaskID, trial: Trial, *, total: int | None, ok: bool) -> None:
        row = trial_row(trial, total=total, step=self.seen.get(task), end="done" if ok else "failed")
        self.progress.update(
            task, description=row.description, steps=row.steps, total=row.total, completed=row.completed
        )
        self.progress.stop_task(task)  # its clock ends with it, not with the sweep
        self.ended += 1
        self.progress.update(self.overall, completed=self.ended, steps=self._count())
