"""The only module that runs sbatch, squeue, sacct and scancel; and pure parsers of their output.

Every command is an argv list (no shell). Parsers take text and return typed rows, so they are
tested on literal outputs captured from the real dev cluster (tests/data/slurm/).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

SACCT_FORMAT = "JobIDRaw,JobID,JobName%40,State,ExitCode,Elapsed,NodeList,Start,End"
SQUEUE_FORMAT = "%i|%T|%r|%N|%j"

# sacct/squeue state → trial status. Anything not listed is kept verbatim, lower-cased.
_TERMINAL = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_fail",
    "OUT_OF_MEMORY": "oom",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "failed",
    "DEADLINE": "timeout",
}
_ACTIVE = {
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "CONFIGURING": "pending",
    "SUSPENDED": "pending",
    "RESIZING": "running",
    "RUNNING": "running",
    "COMPLETING": "running",
    "STAGE_OUT": "running",
    "SIGNALING": "running",
}


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries its stderr."""


@dataclass(kw_only=True, frozen=True)
class SacctRow:
    job_id_raw: str
    """Unique numeric id (array elements have their own)."""
    job_id: str
    """`123`, `123_2` (array element), `123.batch`, `123.extern`, `123.0` (steps)."""
    name: str
    state: str
    """First word of State: COMPLETED, CANCELLED, …"""
    state_detail: str
    """The rest of State, e.g. `by 0` in `CANCELLED by 0`."""
    exit_code: int
    signal: int
    elapsed: str
    nodelist: str
    start: str
    end: str

    @property
    def is_step(self) -> bool:
        return "." in self.job_id


@dataclass(kw_only=True, frozen=True)
class SqueueRow:
    job_id: str
    """`123`, `123_2`, or a pending array range `123_[2-4]`."""
    state: str
    reason: str
    nodelist: str
    name: str


@dataclass(kw_only=True, frozen=True)
class JobState:
    key: str
    """`123` or `123_2`."""
    slurm_state: str
    """Slurm's word for it, e.g. CANCELLED."""
    status: str
    """Trial status it maps to: pending, running, completed, failed, cancelled, timeout, node_fail, oom, …"""
    source: str
    """Where it came from: sacct or squeue."""
    detail: str = ""
    """Slurm's extra words (e.g. `by 0`) or the pending reason."""
    exit_code: int = 0
    signal: int = 0
    nodelist: str = ""
    steps: tuple[tuple[str, str, int, int], ...] = field(default_factory=tuple)
    """(step id, state, exit code, signal) of the job's steps."""
    requeues: int = 0
    """Earlier attempts that ended REQUEUED (sacct --duplicates keeps them)."""

    @property
    def terminal(self) -> bool:
        return self.slurm_state in _TERMINAL

    @property
    def queue_reason(self) -> str | None:
        """Slurm's Reason a queued job waits (squeue `%r`: Resources, Priority, Dependency,
        JobHeldUser, QOSMaxJobsPerUser, …); None when it is not waiting or nobody said why."""
        if self.status in ("pending", "requeued") and self.source == "squeue" and self.detail not in ("", "None"):
            return self.detail
        return None

    def reason(self, time_limit: str | None = None) -> str | None:
        """One line for the table; None when it completed cleanly."""
        s = self.slurm_state
        if s == "COMPLETED":
            return None
        if s == "CANCELLED":
            who = self.detail.removeprefix("by ").strip()
            return f"cancelled by uid {who} (scancel)" if who else "cancelled (scancel)"
        if s == "TIMEOUT":
            limit = f" (cluster.time_limit={time_limit})" if time_limit else ""
            return f"hit the job's time limit{limit}"
        if s == "NODE_FAIL":
            return f"a node failed (Slurm NODE_FAIL on {self.nodelist or 'its nodes'})"
        if s == "OUT_OF_MEMORY":
            return "out of memory (Slurm OUT_OF_MEMORY): a rank reached the job's memory limit"
        if self.status == "oom":  # the job reads FAILED, one of its steps OUT_OF_MEMORY
            step = oom_step(self.steps)
            return f"out of memory (Slurm OUT_OF_MEMORY in step {step}): a rank reached the job's memory limit"
        if s == "FAILED":
            how = f"signal {self.signal}" if self.signal else f"exit code {self.exit_code}"
            return f"job FAILED with {how}"
        if s in _ACTIVE:
            again = f"requeued {self.requeues}×, " if self.requeues else ""
            return f"{again}{s.lower()}" + (f" ({self.detail})" if self.detail and self.detail != "None" else "")
        if s == "PREEMPTED":
            return "preempted by a higher-priority job (Slurm PREEMPTED)"
        return f"Slurm state {s}" + (f" {self.detail}" if self.detail else "")


# --- pure parsers ------------------------------------------------------------------------


def parse_sbatch_parsable(stdout: str) -> str:
    """`sbatch --parsable` prints `jobid` or `jobid;cluster`."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {stdout.strip()!r}, not a job id")
    return job_id


def _exit(code: str) -> tuple[int, int]:
    exit_code, _, signal = code.partition(":")
    return int(exit_code or 0), int(signal or 0)


def parse_sacct(text: str) -> list[SacctRow]:
    """Rows of `sacct --noheader --parsable2 --format=SACCT_FORMAT`."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 9:
            raise ValueError(f"sacct line has {len(parts)} fields, expected 9: {line!r}")
        raw, job_id, name, state, code, elapsed, nodelist, start, end = parts
        word, _, detail = state.partition(" ")
        exit_code, signal = _exit(code)
        rows.append(
            SacctRow(
                job_id_raw=raw,
                job_id=job_id,
                name=name.strip(),
                state=word,
                state_detail=detail,
                exit_code=exit_code,
                signal=signal,
                elapsed=elapsed,
                nodelist=nodelist,
                start=start,
                end=end,
            )
        )
    return rows


def parse_squeue(text: str) -> list[SqueueRow]:
    """Rows of `squeue --noheader --format=SQUEUE_FORMAT`."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5:
            raise ValueError(f"squeue line has {len(parts)} fields, expected 5: {line!r}")
        job_id, state, reason, nodelist, name = (p.strip() for p in parts)
        rows.append(SqueueRow(job_id=job_id, state=state, reason=reason, nodelist=nodelist, name=name))
    return rows


def expand_array_id(job_id: str) -> list[str]:
    """`123_[2-4,7]` → [`123_2`, `123_3`, `123_4`, `123_7`]; `123_[1-9%2]` honours the
    throttle suffix; plain ids are returned as they are."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    base, spec = m.groups()
    spec = spec.split("%", 1)[0]
    keys = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        keys += [f"{base}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return keys


def states_from_sacct(rows: list[SacctRow]) -> dict[str, JobState]:
    """Job-level state per job key. With --duplicates a requeued job has several rows for one
    key; the last is the latest attempt."""
    jobs: dict[str, SacctRow] = {}
    steps: dict[str, list[tuple[str, str, int, int]]] = {}
    requeues: dict[str, int] = {}
    for row in rows:
        if row.is_step:
            key = row.job_id.split(".", 1)[0]
            steps.setdefault(key, []).append((row.job_id, row.state, row.exit_code, row.signal))
        else:
            for key in expand_array_id(row.job_id):  # a pending array is one row `123_[2-4]`
                jobs[key] = row
                requeues[key] = requeues.get(key, 0) + (row.state == "REQUEUED")
    return {
        key: JobState(
            key=key,
            slurm_state=r.state,
            status=_status(r.state, requeues[key], steps.get(key, ())),
            source="sacct",
            detail=r.state_detail,
            exit_code=r.exit_code,
            signal=r.signal,
            nodelist=r.nodelist,
            steps=tuple(steps.get(key, ())),
            requeues=requeues[key],
        )
        for key, r in jobs.items()
    }


def states_from_squeue(rows: list[SqueueRow]) -> dict[str, JobState]:
    out = {}
    for row in rows:
        for key in expand_array_id(row.job_id):
            out[key] = JobState(
                key=key,
                slurm_state=row.state,
                status=_status(row.state),
                source="squeue",
                detail=row.reason,
                nodelist=row.nodelist,
            )
    return out


def _status(state: str, requeues: int = 0, steps: list[tuple[str, str, int, int]] | tuple = ()) -> str:
    if state in ("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED") or (requeues and state == "PENDING"):
        return "requeued"  # waiting to run again: say so, not just "pending"
    if state == "FAILED" and oom_step(steps) is not None:
        return "oom"  # the kernel (cgroup) killed a step for memory; the job only says FAILED
    return _TERMINAL.get(state) or _ACTIVE.get(state) or state.lower()


def oom_step(steps: list[tuple[str, str, int, int]] | tuple) -> str | None:
    """The first of a job's steps (id, state, exit code, signal) that Slurm ended OUT_OF_MEMORY."""
    return next((step[0] for step in steps if step[1] == "OUT_OF_MEMORY"), None)


# --- commands (I/O) ----------------------------------------------------------------------


def _run(argv: list[str], env: Mapping[str, str] | None, timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv,
            env=dict(env) if env else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} is not installed or not on PATH; is this a Slurm login node?") from None


def slurm_env(slurm_conf: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    return env


def sbatch(script: Path, env: Mapping[str, str], extra: list[str] | None = None) -> str:
    """Submit `script`; return its job id. The one function that runs sbatch for real."""
    proc = _run(["sbatch", "--parsable", *(extra or []), str(script)], env)
    if proc.returncode:
        raise SlurmError(f"sbatch {script.name} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return parse_sbatch_parsable(proc.stdout)


def sbatch_test_only(script: Path, env: Mapping[str, str]) -> tuple[bool, str]:
    """`sbatch --test-only`: would Slurm accept it? (True/False, what sbatch said)."""
    proc = _run(["sbatch", "--test-only", str(script)], env)
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()


def query(keys: list[str], env: Mapping[str, str]) -> tuple[dict[str, JobState], dict[str, str]]:
    """States of job keys (`123`, `123_2`): sacct first; then squeue for keys sacct does not know
    yet and for queued ones, since only squeue says why a job waits (its Reason). Returns
    (states, notes) where notes says why a source was not used."""
    notes: dict[str, str] = {}
    ids = sorted({k.split("_", 1)[0] for k in keys})
    acct: dict[str, JobState] = {}
    if not ids:
        return acct, notes
    proc = _run(
        ["sacct", "--noheader", "--parsable2", "--duplicates", f"--format={SACCT_FORMAT}", "-j", ",".join(ids)], env
    )
    if proc.returncode == 0:
        acct = states_from_sacct(parse_sacct(proc.stdout))
    else:
        notes["sacct"] = proc.stderr.strip() or f"exit {proc.returncode}"
    live: dict[str, JobState] = {}
    waiting = sorted({k.split("_", 1)[0] for k in keys if k not in acct or acct[k].status in ("pending", "requeued")})
    if waiting:
        proc = _run(["squeue", "--noheader", f"--format={SQUEUE_FORMAT}", "-j", ",".join(waiting)], env)
        if proc.returncode == 0:
            live = states_from_squeue(parse_squeue(proc.stdout))
        else:
            notes["squeue"] = proc.stderr.strip() or f"exit {proc.returncode}"
    return combine(acct, live, keys), notes


def combine(acct: dict[str, JobState], live: dict[str, JobState], keys: list[str]) -> dict[str, JobState]:
    """One state per key: sacct's when it has ended (or squeue has nothing), else squeue's live
    state and Reason, keeping the requeues and steps only sacct knows."""
    out = {}
    for key in keys:
        a, q = acct.get(key), live.get(key)
        if q is None or (a is not None and a.terminal):
            if a is not None:
                out[key] = a
        elif a is None:
            out[key] = q
        else:
            out[key] = replace(q, status=_status(q.slurm_state, a.requeues), requeues=a.requeues, steps=a.steps)
    return out


def scancel(job_ids: list[str], env: Mapping[str, str]) -> None:
    """Cancel jobs (`123`) or array elements (`123_4`). A job that has already left the queue
    is not an error: there is nothing left to cancel."""
    if job_ids:
        proc = _run(["scancel", *job_ids], env)
        if proc.returncode and not _GONE.search(proc.stderr):
            raise SlurmError(f"scancel {' '.join(job_ids)} failed: {proc.stderr.strip()}")


# What scancel says about a job that already ended (rc 1 once the controller has forgotten it).
_GONE = re.compile(r"Invalid job id specified|already completing or completed")
