"""The executor interface: what a sweep, a run and the later verbs ask of whatever runs trials.

Every operation works from the sweep folder (`sweep_dir`) and the trials planned in it, so any
later shell can call it. The two implementations: LocalExecutor (ranks as processes here) and
SlurmExecutor (sbatch jobs); `launcher.run.executor.executor_for` picks one from the config.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

from launcher.config.schema import LauncherConfig
from launcher.slurm.track import Stalled
from launcher.trials.payload import Payload
from launcher.trials.spec import Trial

__all__ = ["Executor", "NothingToCancel", "Stalled"]  # Stalled: what run_batch raises when a queue holds the trials


class NothingToCancel(Exception):
    """The executor has no jobs that outlive the launcher; the message says so in one line."""


class Executor(ABC):
    """Runs the trials of one config (the sweep's, or the first combination's: they share the cluster)."""

    name: str
    """The kind of cluster it serves, as the status table's title shows it."""

    def __init__(self, cfg: LauncherConfig) -> None:
        self.cfg = cfg

    @abstractmethod
    def check_trials(self, trials: Sequence[Trial]) -> None:
        """Refuse (ConfigError, one line) what no trial of these can survive here, before any folder exists."""

    @abstractmethod
    def check_scripts(self, planned_dir: Path, trials: Sequence[Trial]) -> None:
        """Render whatever the executor writes per trial (job scripts) for a folder not yet made,
        so a bad value stops the sweep before it exists."""

    @abstractmethod
    def check_detach(self) -> None:
        """Refuse (ConfigError, one line) --detach where trials cannot outlive the launcher."""

    @abstractmethod
    def run_batch(
        self, sweep_dir: Path, trials: Sequence[Trial], *, progress_bars: bool, payload: Payload | None = None
    ) -> None:
        """Run these trials and wait until each has ended, with its outcome.json written; a trial
        started before (a resumed sweep) is followed, never started twice. May raise Stalled.
        `payload`: what the ranks run in place of the config's (`launcher profile`'s measurements)."""

    @abstractmethod
    def submit_detached(self, sweep_dir: Path, trials: Sequence[Trial]) -> None:
        """Start the trials not yet started and return at once (`launcher status` / `collect` follow them)."""

    @abstractmethod
    def interrupted(self, sweep_dir: Path, *, detach: bool, how: str = "Ctrl-C") -> None:
        """Ctrl-C (or SIGTERM: `how`) reached the launcher: stop what would go on spending resources
        (unless detached)."""

    @abstractmethod
    def refresh(self, sweep_dir: Path) -> None:
        """Bring every started trial's outcome.json up to date (`status`, `collect`)."""

    @abstractmethod
    def cancel(self, sweep_dir: Path, reason: str) -> list[str]:
        """Stop every started trial that has not ended and record it as cancelled with `reason`;
        return the job ids stopped. NothingToCancel where no trial can be running without the launcher."""

    @abstractmethod
    def dry_run(self, trial: Trial, make_folder: Callable[[], Path]) -> None:
        """Print what running `trial` would start, writing nothing unless the executor needs a
        file to show (then `make_folder()` makes the sweep folder)."""
