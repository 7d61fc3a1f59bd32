"""Start, check and stop the cluster's daemons by pid.

Each daemon runs in the foreground of a process we start, so the pid we record is the daemon's
own (the wrappers `nsenter`, `unshare` and `sh -c '... && exec ...'` exec in place). A pid is
stored with its kernel start time: after a reboot or a long pause the number may belong to an
unrelated process, and `down` must never signal that.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.slurm.devcluster.errors import DevClusterError


@dataclass(kw_only=True, frozen=True)
class Proc:
    name: str
    """Daemon name: munged, mariadb, slurmdbd, slurmctld, slurmd-n1, ..."""
    pid: int
    """Its process id."""
    start: int
    """Kernel start time (clock ticks since boot, /proc/PID/stat field 22); tells reuse apart."""

    def to_json(self) -> dict:
        return {"name": self.name, "pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, d: dict) -> Proc:
        return cls(name=str(d["name"]), pid=int(d["pid"]), start=int(d["start"]))


# Popen objects of the daemons this process started: polling them reaps their zombies and
# gives their exit status for error messages.
_CHILDREN: dict[int, subprocess.Popen] = {}


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a pid, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def alive(proc: Proc) -> bool:
    """True if the recorded process still runs. A zombie is dead: PID 1 may reap it late."""
    st = _stat(proc.pid)
    return st is not None and st[0] not in ("Z", "X") and st[1] == proc.start


def start(name: str, argv: list[str], *, log: Path, env: dict[str, str] | None = None) -> Proc:
    """Start a foreground daemon in its own session, its stdout/stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} launcher.slurm.devcluster starts: {argv}\n".encode())
        out.flush()
        # Own session: the daemon must outlive the `launcher` process and ignore its Ctrl-C.
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
            # Not the caller's folder: job steps inherit slurmd's cwd and warn on every job once
            # that folder is gone (a deleted checkout, a finished CI run).
            cwd="/",
        )
    st = None
    for _ in range(50):
        st = _stat(p.pid)
        if st is not None:
            break
        time.sleep(0.01)
    if st is None:
        # Died before we could read its start time; 0 never matches, so it reads as dead.
        return Proc(name=name, pid=p.pid, start=0)
    _CHILDREN[p.pid] = p
    return Proc(name=name, pid=p.pid, start=st[1])


def reap() -> None:
    for pid, p in list(_CHILDREN.items()):
        if p.poll() is not None:
            del _CHILDREN[pid]


def exit_code(proc: Proc) -> int | None:
    """Exit status of a daemon this process started and that has ended, else None."""
    p = _CHILDREN.get(proc.pid)
    return None if p is None else p.poll()


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(proc: Proc, *, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout` s. Returns True if it had to be killed."""
    if not alive(proc):
        return False
    signal_pid(proc.pid, signal.SIGTERM)
    if wait_dead([proc], timeout):
        return False
    if alive(proc):
        signal_pid(proc.pid, signal.SIGKILL)
        wait_dead([proc], 5.0)
    return True


def wait_dead(procs: list[Proc], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        reap()
        if not any(alive(p) for p in procs):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def proc_of(pid: int, name: str) -> Proc | None:
    st = _stat(pid)
    return None if st is None else Proc(name=name, pid=pid, start=st[1])


# ---------------------------------------------------------------- waiting until one answers


def failure(what: str, log_file: Path, proc: Proc | None) -> DevClusterError:
    """The error for a daemon that did not come up: whether it died, and its log."""
    dead = ""
    if proc is not None and not alive(proc):
        rc = exit_code(proc)
        dead = f" (it exited{'' if rc is None else f' with {rc}'})"
    return DevClusterError(f"{what} did not come up{dead}; read {log_file}")


def wait_until(check: Callable[[], bool], what: str, log_file: Path, proc: Proc | None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if (proc is not None and not alive(proc)) or time.monotonic() > deadline:
            raise failure(what, log_file, proc)
        time.sleep(0.05)


def wait_unix(path: Path, what: str, log_file: Path, proc: Proc) -> None:
    def ok() -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(path))
                return True
            except OSError:
                return False

    wait_until(ok, what, log_file, proc)


def wait_tcp(host: str, port: int, what: str, log_file: Path, proc: Proc) -> None:
    def ok() -> bool:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(ok, what, log_file, proc)
