"""The Slurm tracker polls again soon after a trial folder changes, even when the poll that saw it
come was already running: a job's record and exit code land a moment before sacct says COMPLETED,
and a wait that missed them used to sleep out its whole backoff (up to 30 s) before the table."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import rich.console

from launcher.slurm import track as track_mod


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_change_during_a_poll_brings_the_next_poll_forward(tmp_path: Path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(track_mod.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(track_mod.time, "sleep", clock.sleep)
    folder = tmp_path / "trials" / "000-ws1"
    folder.mkdir(parents=True)
    polls: list[float] = []

    def refresh(sweep_dir, cfg, known):
        polls.append(clock.now)
        n = len(polls)
        if n == 7:  # the job ends while this poll runs: its files land, sacct still reads RUNNING
            (folder / "record.json").write_text("{}")
        done = n >= 9
        doc = {"job": "1", "status": "completed" if done else "running", "source": "sacct", "final": done}
        return {"000-ws1": doc}

    monkeypatch.setattr(track_mod, "refresh", refresh)
    cfg = SimpleNamespace(sweep=SimpleNamespace(pending_timeout_s=0))
    trials = [SimpleNamespace(trial_id="000-ws1", nodes=1, world_size=1)]
    track_mod.track(tmp_path, cfg, trials, progress_bars=False)
    assert len(polls) == 9
    assert polls[5] - polls[4] == 16.0  # nothing changed: the backoff had grown (1, 2, 4, 8, 16)
    assert polls[6] - polls[5] == 30.0  # …to its 30 s cap
    assert polls[7] - polls[6] == 1.0  # the folder changed during poll 7: woken at the first tick
    assert polls[8] - polls[7] == 1.0  # and the backoff starts again at 1 s, not 30


def test_a_trials_clock_stops_when_it_ends_not_when_the_sweep_does(tmp_path: Path, monkeypatch, capsys):
    """Issue 31 item 3, on Slurm: job 1 ends 3 s in (at a poll), job 2 runs on; job 1's row keeps its 3 s.
    Fails on the code before: every row's clock ran until the last job ended (0:00:10 here)."""
    clock = FakeClock()
    monkeypatch.setattr(track_mod.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(track_mod.time, "sleep", clock.sleep)
    monkeypatch.setattr(rich.console, "monotonic", clock.monotonic)  # rich's clock, for the rows' times
    for name in ("000-ws1", "001-ws2"):
        (tmp_path / "trials" / name).mkdir(parents=True)

    def refresh(sweep_dir, cfg, known):
        def doc(job: str, ends_at: float) -> dict:
            done = clock.now >= ends_at
            return {"job": job, "status": "completed" if done else "running", "source": "sacct", "final": done}

        return {"000-ws1": doc("1", 3.0), "001-ws2": doc("2", 10.0)}

    monkeypatch.setattr(track_mod, "refresh", refresh)
    cfg = SimpleNamespace(sweep=SimpleNamespace(pending_timeout_s=0))
    trials = [SimpleNamespace(trial_id=t, nodes=1, world_size=w) for t, w in (("000-ws1", 1), ("001-ws2", 2))]
    track_mod.track(tmp_path, cfg, trials, progress_bars=True)
    rows = {
        ln.split(":")[0].split()[-1]: " ".join(ln.split()) for ln in capsys.readouterr().err.splitlines() if "job" in ln
    }
    assert rows["000-ws1"].endswith("000-ws1: job 1 completed (sacct) 0:00:03")
    assert rows["001-ws2"].endswith("001-ws2: job 2 completed (sacct) 0:00:10")
