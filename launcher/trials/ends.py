"""How a trial can end, in words both the payload and the table read (no torch, no pandas)."""

from __future__ import annotations

# What torch says when an allocation fails: CUDA's OutOfMemoryError, or the CPU allocator.
OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "can't allocate memory", "DefaultCPUAllocator: not enough memory")


def mentions_oom(text: str | None) -> bool:
    return any(m in (text or "") for m in OOM_MARKERS)
