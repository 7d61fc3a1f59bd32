"""Ctrl-C (SIGINT) and SIGTERM held over a step that must not be cut in two: a job submitted and its
record written, jobs cancelled and recorded, a rank process started and known to the launcher."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold a SIGINT (Ctrl-C) or SIGTERM until the block ends, then deliver the first. Signals reach
    only the main thread, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: caught.append((signum, frame))) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if caught and callable(handler := previous[caught[0][0]]):
        handler(*caught[0])  # raises KeyboardInterrupt (Ctrl-C), or a sweep's Terminated (run/stopped.py)
    elif caught and handler == signal.SIG_DFL:
        os.kill(os.getpid(), caught[0][0])  # SIGTERM's default: end the process, as it would have
