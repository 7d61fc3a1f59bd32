"""How many steps run between two waits for the device: the window after which the loss is checked
and the ranks vote to stop or checkpoint (launcher/train/loop.py). Runs on the node: stdlib only."""

from __future__ import annotations

WINDOW_STEPS = 10
"""Steps between two waits for the device. Inside a window nothing waits: step times come from
CUDA events (read when the window ends) or host clocks on CPU, and the loss check and the stop
vote (the all-reduce on which the ranks agree to stop or checkpoint) run once after it, as a
production loop logs and checks every N steps rather than every step."""

VOTE_SHARE = 0.25
"""A checkpointing run votes at least this often, as a share of Slurm's warning
(cluster.signal_warning_s): USR1 then leaves it three quarters of the warning to save."""


def vote_every_s(signal_warning_s: float | None) -> float | None:
    """Most seconds between two votes of a run that checkpoints on USR1; None: no bound (a sweep
    trial runs on to its end whatever arrives)."""
    return None if signal_warning_s is None else signal_warning_s * VOTE_SHARE


def window_steps(slowest_step_s: float | None, vote_every: float | None) -> int:
    """Steps in the next window: WINDOW_STEPS, fewer where that many of the last window's slowest
    step (every rank's, agreed in the vote) would outlast `vote_every`; one step while the step time
    is not known yet. A fixed 10 steps of 12 s outlasted Slurm's 120 s warning before the vote."""
    if vote_every is None:
        return WINDOW_STEPS
    if slowest_step_s is None:
        return 1
    return max(1, min(WINDOW_STEPS, int(vote_every // max(slowest_step_s, 1e-9))))


def window_end(step: int, steps: int, checkpoint_every: int, window: int = WINDOW_STEPS) -> int:
    """Where the window that starts at `step` ends: at the next multiple of `window` (so windows of
    10 end on steps 10, 20, … whatever came before), at the trial's end, or at the next periodic
    checkpoint, whichever comes first (so checkpoints land on their steps)."""
    end = min((step // window + 1) * window, steps)
    if checkpoint_every:
        end = min(end, (step // checkpoint_every + 1) * checkpoint_every)
    return end
