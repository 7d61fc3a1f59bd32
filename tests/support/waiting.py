"""Polling for the real-cluster tests: wait for a condition, or fail saying what never came."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str, every: float = 0.5, detail=None):
    """`detail`, if given, is called on a timeout and its text appended: the state that explains it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    said = f"\n{detail()}" if detail else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{said}")
