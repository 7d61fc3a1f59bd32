"""How far a running program has got, in its own steps, read from what it has reported so far: the meter file's
last step, or the last step number its log names (a regex's `step` group, torchtitan's and Megatron's lines).
None where its output numbers no steps (a regex without a step group, nothing written yet): the trial's progress
then says "running", not a count the launcher does not have (sweep.steps is not the program's)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from launcher.harvest.logs import ANSI, MEGATRON, TORCHTITAN
from launcher.harvest.meter_file import FILE, METER_SOURCES

TAIL_BYTES = 16384
"""How much of a file's end is read at each look: a step's line is short, and a look comes several times a second."""


def tail(path: Path, size: int = TAIL_BYTES) -> str:
    """The whole lines within the last `size` bytes of `path` ("" where it is not written yet): a line cut by the
    window's start could read as a smaller step number."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            start = max(0, f.tell() - size)
            f.seek(start)
            data = f.read()
    except OSError:
        return ""
    if start:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return data.decode(errors="replace")


def _pattern(metrics: str, pattern: str | None) -> re.Pattern[str] | None:
    """The pattern that numbers the program's steps in its log, None where there is none."""
    source = {"regex": pattern, "torchtitan": TORCHTITAN, "megatron": MEGATRON.pattern}.get(metrics)
    try:
        compiled = re.compile(source, re.MULTILINE) if source else None
    except re.error:  # refused at plan time already; a look at progress is not the place to say so again
        return None
    return compiled if compiled is not None and "step" in compiled.groupindex else None


def steps_so_far(metrics: str, *, trial_dir: Path, log: Path | None, pattern: str | None) -> int | None:
    """The last optimizer step the program in `trial_dir` has reported: from the meter file for meter/hf/lightning,
    else from `log` (the rank's output its throughput is read from). None: not known (yet)."""
    if metrics in METER_SOURCES:
        return last_meter_step(tail(trial_dir / FILE))
    return last_logged_step(metrics, tail(log) if log else "", pattern)


def last_meter_step(text: str) -> int | None:
    """The step of the meter file's last whole record in `text`."""
    for line in reversed(text.splitlines()):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):  # a line being written
            continue
    return None


def last_logged_step(metrics: str, text: str, pattern: str | None) -> int | None:
    """The last step number `text` (a log's end) names in the lines `metrics` reads; None without a step group."""
    compiled = _pattern(metrics, pattern)
    numbers = [m["step"] for m in compiled.finditer(ANSI.sub("", text)) if m["step"]] if compiled else []
    last = numbers[-1] if numbers else None
    return int(last) if last and last.isascii() and last.isdigit() else None
