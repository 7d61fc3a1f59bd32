"""Stand-in for meter22's throughput readers (issue 22's contract): meter and regex only."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

CHOICES = "meter, regex, torchtitan, megatron, hf, lightning"


@dataclass(kw_only=True, frozen=True)
class Reported:
    source: str
    """Which reader."""
    step_s: tuple[float, ...]
    """Seconds of each measured step."""
    tokens_per_s: float
    """Whole job's tokens/s."""
    printed_tokens_per_s: float | None = None
    """The program's own printed figure."""


class NoThroughput(Exception):
    """No throughput found; str() is the one-line reason."""


def read_reported(
    *,
    metrics: str,
    trial_dir: Path,
    rank0_text: str,
    warmup_steps: int,
    world_size: int,
    tokens_per_sample: int | None,
    pattern: str | None,
) -> Reported:
    if metrics == "regex":
        found = [m.groupdict() for m in re.finditer(pattern or "", rank0_text)][warmup_steps:]
        if not found:
            raise NoThroughput(f"metrics=regex: no line of rank 0's output matched; metrics is one of {CHOICES}")
        vals = [float(next(v for v in d.values() if v is not None)) for d in found]
        return Reported(source="regex", step_s=(), tokens_per_s=sum(vals) / len(vals))
    path = trial_dir / "meter.jsonl"
    try:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except OSError:
        lines = []
    if len(lines) <= warmup_steps + 0:
        raise NoThroughput(
            f"metrics={metrics}: {path.name} holds no step after the warm-up; metrics is one of {CHOICES}"
        )
    steps = [b["t"] - a["t"] for a, b in zip(lines, lines[1:], strict=False)][max(warmup_steps - 1, 0) :]
    toks = [x["tokens"] if x.get("tokens") is not None else x["samples"] * (tokens_per_sample or 0) for x in lines[1:]][
        max(warmup_steps - 1, 0) :
    ]
    if not steps:
        raise NoThroughput(f"metrics={metrics}: too few steps; metrics is one of {CHOICES}")
    return Reported(source=metrics, step_s=tuple(steps), tokens_per_s=sum(toks) / sum(steps))
