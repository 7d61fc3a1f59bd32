"""A sweep stopped before its end, and the lines that say where it stands and how to carry on:
interrupted by Ctrl-C or SIGTERM (the trial then running reads `cancelled`, the rest `not started`), or
stalled in a Slurm queue (detached, its jobs left queued)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.config.schema import LauncherConfig
from launcher.slurm.track import Stalled
from launcher.trials.ends import UNFINISHED
from launcher.trials.folder import is_done
from launcher.trials.spec import Trial

if TYPE_CHECKING:
    import pandas as pd


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the launcher (`kill`, a scheduler ending the shell): stopped as Ctrl-C stops it."""

    exit_code = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended


def signal_name(exc: BaseException) -> str:
    """How the launcher was stopped, as its lines and the trials' reasons say it."""
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"


@contextmanager
def sigterm_stops_as_ctrl_c() -> Iterator[None]:
    """While trials run, SIGTERM raises Terminated: by default it would end the launcher on the spot,
    leaving local ranks running with no parent and Slurm jobs spending their allocation, and no trial
    recorded as stopped. Signals reach only the main thread, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cancelled_outcome(exc: BaseException) -> dict[str, Any]:
    """outcome.json of a local trial whose launcher was stopped while it ran: `cancelled`, not a failure
    of the trial; not final, so `launcher sweep --resume` runs it again."""
    return {
        "executor": "local",
        "final": False,
        "status": "cancelled",
        "reason": f"cancelled by the user ({signal_name(exc)}); its ranks were stopped",
    }


def interrupted_line(sweep_dir: Path, table: pd.DataFrame, trials: Sequence[Trial], how: str) -> str:
    """The one line after an interrupt: what did not finish, and the command that carries the sweep on."""
    left = table.loc[table["status"].isin(UNFINISHED), "status"].value_counts(sort=False)
    said = ", ".join(f"{n} trial{'s' if n > 1 else ''} {status}" for status, n in left.items())
    head = f"interrupted ({how}){f': {said}' if said else ''}; the table of what finished is in {sweep_dir}"
    todo = sum(not is_done(sweep_dir, t) for t in trials)
    if todo:
        return f"{head}; carry on with: launcher sweep --resume {sweep_dir} (runs the {todo} trial(s) not finished)"
    return (
        f"{head}; every trial has ended, so launcher sweep --resume {sweep_dir} has nothing left to run "
        "(a cancelled Slurm job's trial stays cancelled)"
    )


def detach_stalled(sweep_dir: Path, cfg: LauncherConfig, stalled: Stalled) -> None:
    """The sweep waited too long in the queue: say why each job waits, and how to follow it."""
    print(f"{stalled}; waiting:")
    for line in stalled.waiting:
        print(f"  {line}")
    again = (
        f"  —  carry on the search with: launcher sweep --resume {sweep_dir}" if cfg.sweep.search == "adaptive" else ""
    )
    print(
        f"detached, jobs left queued; follow with: launcher status {sweep_dir}  —  table with: launcher collect "
        f"{sweep_dir}  —  cancel with: launcher cancel {sweep_dir}{again}"
    )
