"""Small checks every validator shares: one ConfigError line with the key, the value and a fix."""

from __future__ import annotations

import math
from typing import Any

from launcher.config.errors import ConfigError

MAX_SIZE = 1 << 20
MAX_LOCAL_RANKS = 256


def at_least(key: str, value: Any, minimum: int, example: Any) -> None:
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"at least {minimum}"
        raise ConfigError(f"{key}={value} must be {what}; set e.g. {key}={example}")


def positive(key: str, value: float, example: Any) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{key}={value} must be a positive number; set e.g. {key}={example}")


def check_sizes(key: str, sizes: list[int], local: bool = False) -> None:
    if not sizes:
        raise ConfigError(f"{key}=[] is empty; list the sizes to measure, e.g. {key}=[1,2]")
    shown = list(sizes) if key.startswith("sweep.") else sizes[0]
    for n in sizes:
        if n < 1:
            raise ConfigError(f"{key}={list(sizes)} holds {n}; every size must be a positive integer, e.g. {key}=[1,2]")
        if local and n > MAX_LOCAL_RANKS:
            raise ConfigError(
                f"{key}={shown} asks for {n} ranks, but cluster=local starts each rank as a process on this "
                f"machine (at most {MAX_LOCAL_RANKS}); measure large sizes on Slurm (cluster=slurm) or predict "
                "them with launcher plan"
            )
        if n > MAX_SIZE:
            raise ConfigError(
                f"{key}={shown} asks for {n}, more than {MAX_SIZE}; measure sizes a cluster can hold and "
                "predict larger ones with launcher plan"
            )
    if len(set(sizes)) != len(sizes):
        unique = ",".join(map(str, sorted(set(sizes))))
        raise ConfigError(f"{key}={list(sizes)} repeats a size; list each once, e.g. {key}=[{unique}]")


def short(value: str) -> str:
    """repr of a value for a one-line message, cut to 80 characters."""
    return repr(value) if len(value) <= 80 else f"{value[:80]!r}… ({len(value)} characters)"
