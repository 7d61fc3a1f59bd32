"""SlurmExecutor: trials as sbatch jobs (launcher/slurm/submit.py renders and submits them,
launcher/slurm/track.py follows them, launcher/slurm/commands.py is the only caller of Slurm)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from launcher.run.executor.base import Executor
from launcher.run.say import say
from launcher.slurm.commands import SlurmError
from launcher.slurm.submit import (
    PreparedJob,
    cancel_trials,
    env_for,
    job_requests,
    refresh,
    submissions,
    submit_jobs,
    write_scripts,
)
from launcher.slurm.track import track
from launcher.trials.payload import Payload
from launcher.trials.spec import Trial

CTRL_C_REASON = "cancelled by the user ({how})"  # how: Ctrl-C or SIGTERM (run/stopped.py)


class SlurmExecutor(Executor):
    name = "slurm"

    def check_trials(self, trials: Sequence[Trial]) -> None:
        return None  # nodes and GPUs come from the allocation: the scheduler refuses what it cannot hold

    def check_scripts(self, planned_dir: Path, trials: Sequence[Trial]) -> None:
        job_requests(self.cfg, planned_dir, list(trials))

    def check_detach(self) -> None:
        return None  # jobs outlive the launcher

    def run_batch(
        self, sweep_dir: Path, trials: Sequence[Trial], *, progress_bars: bool, payload: Payload | None = None
    ) -> None:
        self.submit_detached(sweep_dir, trials, payload=payload)
        track(sweep_dir, self.cfg, list(trials), progress_bars=progress_bars)

    def submit_detached(self, sweep_dir: Path, trials: Sequence[Trial], payload: Payload | None = None) -> None:
        # A damaged submission.json still counts as submitted: submitting again would run the trial twice.
        submitted = submissions(sweep_dir)
        todo = [t for t in trials if t.trial_id not in submitted]
        if not todo:  # a resumed sweep whose jobs all went out (a pack of none would be an empty job)
            return
        done = sorted(Path(p).stem for p in (sweep_dir / "jobs").glob("job-*.sbatch"))
        jobs = job_requests(self.cfg, sweep_dir, todo, first_index=len(done), payload=payload)
        write_scripts(sweep_dir, jobs)
        submit_jobs(
            sweep_dir,
            jobs,
            env_for(self.cfg),
            on_submit=lambda job, job_id: say(f"submitted {job.name} as job {job_id}: {_holds(job)}"),
        )

    def interrupted(self, sweep_dir: Path, *, detach: bool, how: str = "Ctrl-C") -> None:
        """scancel the sweep's jobs that have not ended (left alone they keep spending the
        allocation) and record their trials as cancelled — unless it was started with --detach,
        whose point is that the jobs outlive the launcher."""
        from rich.console import Console  # lazy: only an interrupted sweep prints through rich here (run/say.py)
        from rich.markup import escape

        console = Console(stderr=True)
        if detach:
            console.print(
                f"interrupted; the jobs submitted so far keep running (--detach); cancel them with: "
                f"launcher cancel {escape(str(sweep_dir))}",
                soft_wrap=True,
            )
            return
        try:
            ids = cancel_trials(sweep_dir, self.cfg, CTRL_C_REASON.format(how=how))
        except SlurmError as exc:
            console.print(
                f"interrupted, but cancelling the sweep's jobs failed: {escape(str(exc))}; retry with: "
                f"launcher cancel {escape(str(sweep_dir))}",
                soft_wrap=True,
            )
            return
        if ids:
            console.print(
                f"interrupted: cancelled Slurm job(s) {', '.join(ids)}; their trials are recorded as cancelled",
                soft_wrap=True,
            )

    def refresh(self, sweep_dir: Path) -> None:
        refresh(sweep_dir, self.cfg)  # rewrites each submitted trial's outcome.json from sacct/squeue

    def cancel(self, sweep_dir: Path, reason: str) -> list[str]:
        return cancel_trials(sweep_dir, self.cfg, reason)

    def dry_run(self, trial: Trial, make_folder: Callable[[], Path]) -> None:
        """The job script on stdout; written into a new sweep folder, ready for sbatch."""
        sweep_dir = make_folder()
        (job,) = job_requests(self.cfg, sweep_dir, [trial])
        write_scripts(sweep_dir, [job])
        script = sweep_dir / "jobs" / f"{job.name}.sbatch"
        print(job.script, end="")
        print(f"# written to {script}; submit with: sbatch {shlex.quote(str(script))}", file=sys.stderr)


def _holds(job: PreparedJob) -> str:
    """What a submitted job runs, in one line: its trials, or an array's first and last with the throttle."""
    ids = [t.trial_id for t in job.trials]
    if not job.request.array or len(ids) <= 4:
        return ", ".join(ids)
    throttle = f", {job.request.array_throttle} at a time" if job.request.array_throttle else ""
    return f"array of {len(ids)} ({ids[0]}, {ids[1]}, …, {ids[-1]}{throttle})"
