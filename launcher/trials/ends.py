"""How a trial can end, in words both the payload and the table read (no torch, no pandas);
and the kernel's side of a memory kill, read from /proc and the memory cgroup (local ranks)."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

# What torch says when an allocation fails: CUDA's OutOfMemoryError (c10/cuda/CUDACachingAllocator.cpp:
# "CUDA out of memory. Tried to allocate …"), a CUDA runtime call's cudaErrorMemoryAllocation (c10/cuda's
# C10_CUDA_CHECK: "CUDA error: out of memory"), NCCL's own allocation (its CUDACHECK: "Cuda failure 2 'out of
# memory'", cudaErrorMemoryAllocation being 2), cuBLAS's workspace (CUBLAS_STATUS_ALLOC_FAILED), or the CPU
# allocator; what the launcher says of a rank the kernel killed for memory; Slurm's word for it.
OOM_MARKERS = (
    "OutOfMemoryError",
    "CUDA out of memory",
    "CUDA error: out of memory",
    "Cuda failure 2 'out of memory'",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "can't allocate memory",
    "DefaultCPUAllocator: not enough memory",
    "kernel OOM killer",
    "OUT_OF_MEMORY",
)

NOT_STARTED = "not started"
"""A planned trial with no outcome and no record yet: what `launcher status` and the table both call it."""
UNFINISHED = ("cancelled", NOT_STARTED, "pending", "running", "requeued")
"""Statuses of a trial that has not run to an end of its own (stopped by the user, never started, still
queued or running): while a table holds one, its sweep is incomplete and its recommendation says so."""

NEAR_LIMIT = 0.9
"""A SIGKILLed rank counts as killed for memory when its trial's ranks held at least this
fraction of the memory limit at the launcher's last look (or the machine had less than
1 − NEAR_LIMIT of its memory left)."""


def mentions_oom(text: str | None) -> bool:
    return any(m in (text or "") for m in OOM_MARKERS)


def failure_tails(tdir: Path, ranks: list[int]) -> str:
    """`; rank N log ends: <line>` of the first of `ranks` (the culprit), and where its line does not say out
    of memory, of the first other whose does: on a busy host the rank a peer's OOM broke can exit first,
    and the row must still read `oom` (failure_status)."""
    told = telling_tails([(rank, log_reason(tdir / f"rank{rank}.log")) for rank in ranks])
    return "".join(f"; rank {rank} log ends: {tail}" for rank, tail in told if tail)


def telling_tails(tails: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """Of (log, its last meaningful line) pairs, the culprit's first: the first pair, and where its line
    does not say out of memory, the first other whose line does (one rank's OOM breaks its peers'
    collectives, and a peer can be the one that exits, or that srun names, first)."""
    if not tails or mentions_oom(tails[0][1]):
        return tails[:1]
    return [tails[0], *[t for t in tails[1:] if mentions_oom(t[1])][:1]]


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


def failure_status(status: str, *reasons: str | None) -> str:
    """A `failed` trial whose reasons (the executor's word on the rank that failed first, its log's end,
    the payload's own) say out of memory ended `oom`: one rank's OOM makes rank 0 fail in the next
    collective and record `failed`, yet the size is infeasible, not broken. Every other status stands."""
    return "oom" if status == "failed" and any(mentions_oom(r) for r in reasons) else status


def _kb_field(text: str, name: str) -> int | None:
    found = re.search(rf"^{name}:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Resident memory of process `pid` now (None once it is gone)."""
    try:
        return _kb_field((proc / str(pid) / "status").read_text(), "VmRSS")
    except OSError:
        return None


def meminfo_bytes(name: str, meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """A /proc/meminfo figure (MemTotal, MemAvailable) in bytes; None where unreadable."""
    try:
        return _kb_field(meminfo.read_text(), name)
    except OSError:
        return None


def memory_cgroup_dirs(
    root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")
) -> list[Path]:
    """This process's memory cgroup folders, most specific first: cgroup v2 (`0::/path`) and v1
    (`N:memory:/path`), each also at the mount's root (a cgroup namespace shows its own root there)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    dirs: list[Path] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        base = root if controllers == "" else root / "memory" if "memory" in controllers.split(",") else None
        if base is not None:
            dirs += [base / path.lstrip("/"), base]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def oom_kill_count(dirs: list[Path] | None = None) -> int | None:
    """The kernel's count of OOM kills in this process's memory cgroup (v2 memory.events,
    v1 memory.oom_control: `oom_kill N`); None where no such file is readable."""
    for d in memory_cgroup_dirs() if dirs is None else dirs:
        for name in ("memory.events", "memory.oom_control"):
            try:
                found = re.search(r"^oom_kill (\d+)", (d / name).read_text(), re.MULTILINE)
            except OSError:
                continue
            if found:
                return int(found.group(1))
    return None


def memory_limit_bytes(dirs: list[Path] | None = None) -> int | None:
    """Memory this process's ranks may use: the cgroup's limit (v2 memory.max, v1
    memory.limit_in_bytes) where one is set below the machine's, else MemTotal."""
    total = meminfo_bytes("MemTotal")
    for d in memory_cgroup_dirs() if dirs is None else dirs:
        for name in ("memory.max", "memory.limit_in_bytes"):
            try:
                text = (d / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and (total is None or int(text) < total):
                return int(text)
    return total


# Lines of a log that never say why a rank failed: blank ones, a traceback's header, frames and the
# carets/tildes under their code, the chained-exception banners, and torch's exit warning that any
# rank dying inside a process group prints after the error (it would hide the error itself).
_NOISE = re.compile(
    r"^\s*$"
    r"|^\s*[\^~\s]+$"
    r"|^\s*Traceback \(most recent call last\):"
    r"|^\s*File \".*\", line \d+"
    r"|^\s*(During handling of the above exception|The above exception was the direct cause)"
    r"|destroy_process_group\(\)"
)
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")  # torch's per-rank prefix (TORCH_SHOW_CPP_STACKTRACES, torchrun)
_FRAME = re.compile(r"^\s*File \".*\", line \d+")


def meaningful_line(text: str, width: int = 160) -> str:
    """The last line of a log that says something: not blank, not a traceback's frame (`File "…",
    line N`), the code line under it or its `^^^^` markers: "RuntimeError: boom", never "^^^^^".
    Cut to `width`; "" when no line says anything. One rule for every executor's failure reason."""
    kept: list[str] = []
    code_next = False
    for raw in _before_torchrun_summary(text).splitlines():
        line = _RANK_PREFIX.sub("", raw)
        if code_next and line.startswith("    ") and line.strip():
            code_next = False  # the source line a frame quotes (indented under `  File …`)
            continue
        code_next = bool(_FRAME.match(line))
        if not _NOISE.search(line):
            kept.append(line.strip())
    last = kept[-1] if kept else ""
    return last if len(last) <= width else last[: width - 1] + "…"


def log_reason(path: Path) -> str:
    """meaningful_line of the log at `path`; "" when it cannot be read."""
    try:
        return meaningful_line(path.read_text(errors="replace"))
    except OSError:
        return ""


# torchrun's agent, once a rank it spawned failed, logs `… elastic/multiprocessing/api.py:N] failed (exitcode: C)
# local_rank: …` and then its own ChildFailedError traceback and a summary box of `=`/`-` rules; under Slurm with
# the built-in trainer that all lands in the node's log, after the rank's own error.
_AGENT_FAILED = re.compile(r"^.*elastic/multiprocessing/api\.py:\d+\] failed \(exitcode.*$", re.MULTILINE)
_SAYS_ERROR = re.compile(r"Traceback|Error|error:|Exception|Killed|killed")


def _before_torchrun_summary(text: str) -> str:
    """`text` without torchrun's summary after a failed rank: the rank's error, printed before it, is the
    reason (else the log's last line is a `====` rule); a rank that said nothing (killed by a signal) is
    told by the agent's `failed (exitcode: -9)` line."""
    hit = _AGENT_FAILED.search(text)
    if hit is None:
        return text
    before = text[: hit.start()]
    return before if _SAYS_ERROR.search(before) else text[: hit.end()]
