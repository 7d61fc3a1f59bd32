"""`LAUNCHER_FAULT`: the test hook that makes one rank fail at one step as a real run fails — killed
by a signal, out of GPU memory, or aborting in torch's teardown at exit — so the ends and their
reasons are tested on real trials."""

from __future__ import annotations

import atexit
import os
import signal

import torch
import torch.distributed as dist

KINDS = ("kill", "oom", "teardown")


def fault_step(spec: str | None, rank: int) -> tuple[str, int] | None:
    """`LAUNCHER_FAULT=KIND:RANK:STEP` — test hook: at that step that rank SIGKILLs itself (`kill`),
    raises the CUDA caching allocator's out-of-memory error (`oom`: a CPU stand-in for a GPU running
    out), or arms an abort in the process group's teardown and the interpreter's exit (`teardown`:
    gloo's rare "terminate called without an active exception" as a rank leaves)."""
    if not spec:
        return None
    kind, fault_rank, step = spec.split(":")
    if kind not in KINDS:
        raise ValueError(f"LAUNCHER_FAULT={spec!r}: only {', '.join(k + ':RANK:STEP' for k in KINDS)} is understood")
    return (kind, int(step)) if int(fault_rank) == rank else None


def inject_fault(kind: str) -> None:
    """What `LAUNCHER_FAULT` asks of this rank now."""
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "teardown":
        dist.destroy_process_group = lambda *_a, **_k: os.abort()
        atexit.register(os.abort)
        return
    # The wording of c10/cuda/CUDACachingAllocator.cpp's OutOfMemoryError, as a real GPU run prints it.
    raise torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.10 GiB of which "
        "1.06 GiB is free. (LAUNCHER_FAULT stand-in)"
    )
