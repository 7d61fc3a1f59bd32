"""Embedded default executor: a trial's ranks as processes on this machine.

Each rank is `python -m launcher.train` with torchrun-style variables, its output in
`rank<r>.log` inside the trial folder. If one rank dies, the others are stopped: a peer
blocked in a collective would otherwise wait for the process-group timeout.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from launcher.config.validate_slurm import env_pairs
from launcher.io import last_lines
from launcher.trials.folder import read_trial, write_outcome

# The launcher shares the cores with the ranks it measures: poll gently.
POLL_S = 0.25
GRACE_S = 5.0


@dataclass(kw_only=True)
class RankExit:
    rank: int
    """Rank number."""
    returncode: int | None
    """Exit status; negative = killed by that signal; None = still running when stopped."""
    stopped_by_launcher: bool = False
    """True when the launcher stopped it after a peer failed or the trial timed out."""
    exit_seq: int = 0
    """Order in which the launcher saw it exit (0 = first): the first failure is the cause."""


@dataclass(kw_only=True)
class LocalOutcome:
    ranks: list[RankExit] = field(default_factory=list)
    """How each rank ended."""
    timed_out: bool = False
    """The trial exceeded cluster.trial_timeout_s."""
    wall_s: float = 0.0
    """Seconds from the first spawn to the last exit."""

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(r.returncode == 0 for r in self.ranks)

    def reason(self) -> str | None:
        """One line on why the trial failed, naming the first rank that did (None if none did)."""
        if self.ok:
            return None
        if self.timed_out:
            return f"timed out after {self.wall_s:.0f} s (cluster.trial_timeout_s); all ranks stopped"
        failed = sorted(
            (r for r in self.ranks if r.returncode not in (0, None) and not r.stopped_by_launcher),
            key=lambda r: r.exit_seq,
        )
        if not failed:
            return "ranks were stopped before finishing"
        parts = [f"rank {failed[0].rank} {describe_exit(failed[0].returncode)}"]
        parts += [f"then rank {r.rank} {describe_exit(r.returncode)}" for r in failed[1:]]
        stopped = [r.rank for r in self.ranks if r.stopped_by_launcher]
        if stopped:
            parts.append(f"the launcher stopped rank(s) {', '.join(map(str, stopped))}")
        return "; ".join(parts)

    def culprit(self) -> int | None:
        """The rank whose failure came first, if any."""
        failed = [r for r in self.ranks if r.returncode not in (0, None) and not r.stopped_by_launcher]
        return min(failed, key=lambda r: r.exit_seq).rank if failed else None


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not finish"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def free_port() -> int:
    """A port the kernel just handed out on loopback (rendezvous for one local trial)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world_size: int, port: int, threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})  # cluster.env; what the launcher sets below wins
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
    )
    return env


def payload_argv(trial_json: Path, record: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "launcher.train", "--trial", str(trial_json), "--record", str(record), *extra]


def run_local(
    trial_dir: Path,
    *,
    world_size: int,
    threads: int,
    timeout_s: float,
    extra_args: list[str] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> LocalOutcome:
    """Run the trial in `trial_dir` (holding trial.json) and wait for every rank."""
    argv = payload_argv(trial_dir / "trial.json", trial_dir / "record.json", extra_args or [])
    spec = read_trial(trial_dir)
    if not spec.ok:  # written by this launcher a moment ago: damage here is a bug to see, not a row
        raise RuntimeError(spec.reason)
    user_env = dict(env_pairs(spec.doc["config"]["cluster"].get("env") or []))
    port = free_port()
    procs: list[subprocess.Popen] = []
    logs = []
    start = time.monotonic()
    outcome = LocalOutcome()
    try:
        for rank in range(world_size):
            logs.append(open(trial_dir / f"rank{rank}.log", "wb"))
            procs.append(subprocess.Popen(argv, env=rank_env(rank, world_size, port, threads, user_env),
                                          stdout=logs[-1], stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))  # fmt: skip
        outcome.ranks = _wait_all(procs, outcome, start=start, timeout_s=timeout_s, on_poll=on_poll)
    except BaseException:
        _stop(procs)
        raise
    finally:
        for log in logs:
            log.close()
        outcome.wall_s = time.monotonic() - start
    return outcome


def _wait_all(procs: list[subprocess.Popen], outcome: LocalOutcome, *, start: float, timeout_s: float,
              on_poll: Callable[[], None] | None) -> list[RankExit]:  # fmt: skip
    """Wait for every rank; once one fails (or time runs out) give the rest GRACE_S, then stop
    them: a rank blocked in a collective with a dead peer never exits on its own."""
    stopped: set[int] = set()
    exit_seq: dict[int, int] = {}
    failed_at: float | None = None
    while True:
        for i, p in enumerate(procs):
            if i not in exit_seq and p.poll() is not None:
                exit_seq[i] = len(exit_seq)
        if len(exit_seq) == len(procs):
            break
        if on_poll:
            on_poll()
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now - start > timeout_s:
            outcome.timed_out = True
            failed_at = failed_at or now - GRACE_S
        if failed_at is not None and now - failed_at >= (0 if outcome.timed_out else GRACE_S):
            stopped |= _stop(procs)
        time.sleep(POLL_S)
    return [RankExit(rank=i, returncode=p.returncode, stopped_by_launcher=i in stopped, exit_seq=exit_seq.get(i, i))
            for i, p in enumerate(procs)]  # fmt: skip


def _stop(procs: list[subprocess.Popen]) -> set[int]:
    """SIGTERM what still runs, SIGKILL after a moment; return the ranks it had to stop."""
    alive = {i for i, p in enumerate(procs) if p.poll() is None}
    for i in alive:
        procs[i].terminate()
    deadline = time.monotonic() + 3
    for i in alive:
        try:
            procs[i].wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            procs[i].kill()
            procs[i].wait()
    return alive


_STEP = re.compile(rb"step (\d+)/(\d+)")


def run_trial_dir(tdir: Path, *, world_size: int, threads: int, timeout_s: float,
                  on_step: Callable[[int], None] | None = None, extra_args: list[str] | None = None) -> dict:  # fmt: skip
    """Run the trial in `tdir` locally; write and return its outcome.json."""
    log0 = tdir / "rank0.log"

    def poll() -> None:
        if on_step and log0.exists():
            hits = _STEP.findall(log0.read_bytes()[-4096:])
            if hits:
                on_step(int(hits[-1][0]))

    try:
        outcome = run_local(tdir, world_size=world_size, threads=threads, timeout_s=timeout_s,
                            extra_args=extra_args, on_poll=poll)  # fmt: skip
    except KeyboardInterrupt:
        write_outcome(tdir, {"executor": "local", "final": False, "reason": "interrupted (Ctrl-C); ranks stopped"})
        raise
    reason = outcome.reason()
    culprit = outcome.culprit()
    if culprit is not None:
        tail = last_lines(tdir / f"rank{culprit}.log")
        reason = f"{reason}; rank {culprit} log ends: {tail}" if tail else reason
    doc = {
        "executor": "local",
        "final": True,
        "reason": reason,
        "timed_out": outcome.timed_out,
        "wall_s": outcome.wall_s,
        "ranks": [{"rank": r.rank, "returncode": r.returncode, "stopped_by_launcher": r.stopped_by_launcher}
                  for r in outcome.ranks],  # fmt: skip
    }
    write_outcome(tdir, doc)
    return doc
