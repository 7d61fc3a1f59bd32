"""A trial's ranks as processes on this machine (what LocalExecutor runs a trial with).

Each rank runs the trial's payload (launcher/trials/payload.py; the built-in trainer unless told
otherwise) with torchrun-style variables, its output in `rank<r>.log` inside the trial folder. If
one rank dies, the others are stopped: a peer blocked in a collective would otherwise wait for
the process-group timeout.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.config.validate_slurm import env_pairs
from launcher.run.stopped import cancelled_outcome
from launcher.signals import interrupts_deferred
from launcher.trials.ends import (
    NEAR_LIMIT,
    describe_exit,
    failure_tails,
    meminfo_bytes,
    memory_limit_bytes,
    oom_kill_count,
    rss_bytes,
)
from launcher.trials.folder import read_trial, write_outcome
from launcher.trials.payload import Payload, builtin_payload

POLL_S = 0.25  # the launcher shares the cores with the ranks it measures: poll gently
GRACE_S = 5.0
GIB = 1 << 30
# Present on a machine with an NVIDIA driver loaded; without it no rank can use CUDA.
NVIDIA_DRIVER = Path("/proc/driver/nvidia/gpus")


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
    last_rss_bytes: int | None = None
    """Its resident memory at the launcher's last look before it exited (None: never seen)."""


@dataclass(kw_only=True)
class MemoryWatch:
    """What the launcher saw of memory while the ranks ran: enough to tell the kernel's OOM
    killer (or a cgroup's) from any other SIGKILL, where dmesg cannot be read."""

    oom_kills_before: int | None = None
    """The memory cgroup's oom_kill count when the trial started (None: unreadable)."""
    oom_kills_after: int | None = None
    """The same count when every rank had ended."""
    limit_bytes: int | None = None
    """The cgroup's memory limit, else the machine's MemTotal."""
    total_bytes: int | None = None
    """The machine's MemTotal."""
    min_available_bytes: int | None = None
    """The least MemAvailable seen while ranks ran."""
    last_rss: dict[int, int] = field(default_factory=dict)
    """rank → resident bytes at the last look."""

    @classmethod
    def start(cls) -> MemoryWatch:
        return cls(
            oom_kills_before=oom_kill_count(), limit_bytes=memory_limit_bytes(), total_bytes=meminfo_bytes("MemTotal")
        )

    def look(self, procs: list[subprocess.Popen]) -> None:
        """Sample each live rank's RSS and the machine's available memory (cheap /proc reads)."""
        for i, p in enumerate(procs):
            if p.returncode is None and (rss := rss_bytes(p.pid)) is not None:
                self.last_rss[i] = rss
        avail = meminfo_bytes("MemAvailable")
        if avail is not None and (self.min_available_bytes is None or avail < self.min_available_bytes):
            self.min_available_bytes = avail

    def oom_evidence(self, culprit: RankExit) -> str | None:
        """Why a rank killed by SIGKILL (not by the launcher) was killed for memory, or None when
        nothing says so: the cgroup counted an OOM kill, or memory was at the limit."""
        if culprit.returncode != -signal.SIGKILL:
            return None
        kills = (self.oom_kills_after or 0) - self.oom_kills_before if self.oom_kills_before is not None else 0
        held = sum(self.last_rss.values())
        near = self.limit_bytes is not None and held >= NEAR_LIMIT * self.limit_bytes
        avail, total = self.min_available_bytes, self.total_bytes
        low = avail is not None and total is not None and avail <= (1 - NEAR_LIMIT) * total
        if not (kills > 0 or near or low):
            return None
        seen = [f"memory cgroup oom_kill +{kills}"] if kills > 0 else []
        if culprit.last_rss_bytes:
            seen.append(f"rank {culprit.rank} last held {culprit.last_rss_bytes / GIB:.1f} GiB")
        if self.limit_bytes:
            seen.append(f"its ranks {held / GIB:.1f} GiB of a {self.limit_bytes / GIB:.1f} GiB limit")
        if low:
            seen.append(f"{avail / GIB:.1f} GiB of the machine's memory left")
        return f"out of memory: the kernel OOM killer ({'; '.join(seen)})"


@dataclass(kw_only=True)
class LocalOutcome:
    ranks: list[RankExit] = field(default_factory=list)
    """How each rank ended."""
    timed_out: bool = False
    """The trial exceeded cluster.trial_timeout_s."""
    wall_s: float = 0.0
    """Seconds from the first spawn to the last exit."""
    memory: MemoryWatch = field(default_factory=MemoryWatch)
    """What the launcher saw of memory while the ranks ran."""

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
        oom = self.memory.oom_evidence(failed[0])
        parts = [f"rank {failed[0].rank} {describe_exit(failed[0].returncode)}" + (f": {oom}" if oom else "")]
        parts += [f"then rank {r.rank} {describe_exit(r.returncode)}" for r in failed[1:]]
        stopped = [r.rank for r in self.ranks if r.stopped_by_launcher]
        if stopped:
            parts.append(f"the launcher stopped rank(s) {', '.join(map(str, stopped))}")
        return "; ".join(parts)

    @property
    def oom(self) -> bool:
        """The first rank to fail was killed for memory (the kernel's OOM killer or its cgroup's)."""
        failed = [r for r in self.ranks if r.returncode not in (0, None) and not r.stopped_by_launcher]
        return bool(failed) and self.memory.oom_evidence(min(failed, key=lambda r: r.exit_seq)) is not None

    def culprit(self) -> int | None:
        """The rank whose failure came first, if any."""
        failed = [r for r in self.ranks if r.returncode not in (0, None) and not r.stopped_by_launcher]
        return min(failed, key=lambda r: r.exit_seq).rank if failed else None


def free_port() -> int:
    """A port the kernel just handed out on loopback (rendezvous for one local trial)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(
    rank: int, world_size: int, port: int, threads: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
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


def cuda_devices(device: str) -> int | None:
    """CUDA devices a trial's ranks would see here (torch's count, after CUDA_VISIBLE_DEVICES);
    None when the trial computes on CPU (cluster.device=cpu, or auto with no CUDA here)."""
    if device == "cpu" or (device == "auto" and not NVIDIA_DRIVER.exists()):
        return None
    # Lazy: torch's import costs ~2 s, paid only where a trial may use CUDA.
    import torch

    if device == "auto" and not torch.cuda.is_available():
        return None
    return torch.cuda.device_count()


def check_gpu_count(device: str, world_size: int) -> None:
    """One rank per GPU: refuse, before any rank starts, a CUDA trial with more ranks than GPUs."""
    count = cuda_devices(device)
    if count is not None and world_size > count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        seen = f"{count} CUDA device(s)" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
        raise ConfigError(
            f"{world_size} ranks on this machine's {seen}: one rank per GPU, never shared; measure at most "
            f"{count} rank(s) here (sweep.world_sizes / run.world_size), or set cluster.device=cpu"
        )


@dataclass(kw_only=True, frozen=True)
class Process:
    argv: list[str]
    """Its command line."""
    env: dict[str, str]
    """Its whole environment."""
    log: Path
    """Where its stdout and stderr go."""


def run_local(
    trial_dir: Path,
    *,
    world_size: int,
    threads: int,
    timeout_s: float,
    extra_args: list[str] | None = None,
    on_poll: Callable[[], None] | None = None,
    payload: Payload | None = None,
    log_prefix: str = "rank",
) -> LocalOutcome:
    """Run `payload` for the trial in `trial_dir` (holding trial.json) and wait for every rank.
    No payload: the built-in trainer with `extra_args` after its own (tests and benchmarks that
    run a trial folder directly). Rank r's output goes to `<log_prefix><r>.log` there."""
    payload = payload or builtin_payload(extra_args=extra_args or ())
    argv = payload.here(trial_dir, sys.executable)
    user_env = trial_env(trial_dir, world_size) | dict(payload.env)
    port = free_port()
    plan = [
        Process(argv=argv, env=rank_env(r, world_size, port, threads, user_env), log=trial_dir / f"{log_prefix}{r}.log")
        for r in range(world_size)
    ]
    return run_processes(plan, timeout_s=timeout_s, on_poll=on_poll)


def trial_env(trial_dir: Path, world_size: int) -> dict[str, str]:
    """cluster.env of the trial in `trial_dir`, after refusing more CUDA ranks than GPUs here."""
    spec = read_trial(trial_dir)
    if not spec.ok:  # written by this launcher a moment ago: damage here is a bug to see, not a row
        raise RuntimeError(spec.reason)
    cluster = spec.doc["config"]["cluster"]
    check_gpu_count(str(cluster.get("device", "auto")), world_size)
    return dict(env_pairs(cluster.get("env") or []))


def run_processes(plan: list[Process], *, timeout_s: float, on_poll: Callable[[], None] | None = None) -> LocalOutcome:
    """Start every process of `plan` and wait for all of them (process i is `rank i` in the outcome)."""
    procs: list[subprocess.Popen] = []
    logs = []
    start = time.monotonic()
    outcome = LocalOutcome(memory=MemoryWatch.start())
    try:
        with interrupts_deferred():  # a Popen cut after its fork would leave a rank that _stop never sees
            for p in plan:
                logs.append(open(p.log, "wb"))
                procs.append(
                    subprocess.Popen(
                        p.argv, env=p.env, stdout=logs[-1], stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                )
        outcome.ranks = _wait_all(procs, outcome, start=start, timeout_s=timeout_s, on_poll=on_poll)
    except BaseException:
        _stop(procs)
        raise
    finally:
        for log in logs:
            log.close()
        outcome.wall_s = time.monotonic() - start
        outcome.memory.oom_kills_after = oom_kill_count()
    return outcome


def _wait_all(
    procs: list[subprocess.Popen],
    outcome: LocalOutcome,
    *,
    start: float,
    timeout_s: float,
    on_poll: Callable[[], None] | None,
) -> list[RankExit]:
    """Wait for every rank; once one fails (or time runs out) give the rest GRACE_S, then stop
    them: a rank blocked in a collective with a dead peer never exits on its own."""
    stopped: set[int] = set()
    exit_seq: dict[int, int] = {}
    failed_at: float | None = None
    while True:
        ended = [i for i, p in enumerate(procs) if i not in exit_seq and p.poll() is not None]
        # Ended within one poll (order unknown): a signal's kill first (a cause), then an error exit (a
        # peer whose collective broke under it: an effect), then a clean one.
        for i in sorted(ended, key=lambda i: (procs[i].returncode >= 0, procs[i].returncode == 0)):
            exit_seq[i] = len(exit_seq)
        if len(exit_seq) == len(procs):
            break
        outcome.memory.look(procs)
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
    return [
        RankExit(
            rank=i,
            returncode=p.returncode,
            stopped_by_launcher=i in stopped,
            exit_seq=exit_seq.get(i, i),
            last_rss_bytes=outcome.memory.last_rss.get(i),
        )
        for i, p in enumerate(procs)
    ]


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


def run_trial_dir(
    tdir: Path,
    *,
    world_size: int,
    threads: int,
    timeout_s: float,
    on_step: Callable[[int], None] | None = None,
    payload: Payload | None = None,
    run: Callable[[Callable[[], None]], LocalOutcome] | None = None,
) -> dict:
    """Run the trial in `tdir` locally (`payload`: as run_local takes it; `run(poll)`: in its place, another
    way to start the trial's processes); write and return its outcome.json."""
    log0 = tdir / "rank0.log"

    def poll() -> None:
        if on_step and log0.exists():
            hits = _STEP.findall(log0.read_bytes()[-4096:])
            if hits:
                on_step(int(hits[-1][0]))

    try:
        if run is None:
            outcome = run_local(
                tdir, world_size=world_size, threads=threads, timeout_s=timeout_s, on_poll=poll, payload=payload
            )
        else:
            outcome = run(poll)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the ranks were stopped (run_processes)
        write_outcome(tdir, cancelled_outcome(exc))
        raise
    reason = outcome.reason()
    culprit = outcome.culprit()
    if culprit is not None:  # the first rank to fail first, then the others in the order they did
        failed = sorted((r for r in outcome.ranks if r.returncode not in (0, None)), key=lambda r: r.exit_seq)
        reason = f"{reason}{failure_tails(tdir, [culprit, *(r.rank for r in failed if r.rank != culprit)])}"
    doc = {
        "executor": "local",
        "final": True,
        "reason": reason,
        "timed_out": outcome.timed_out,
        "oom": outcome.oom,
        "wall_s": outcome.wall_s,
        "ranks": [
            {
                "rank": r.rank,
                "returncode": r.returncode,
                "stopped_by_launcher": r.stopped_by_launcher,
                "last_rss_bytes": r.last_rss_bytes,
            }
            for r in outcome.ranks
        ],
    }
    write_outcome(tdir, doc)
    return doc
