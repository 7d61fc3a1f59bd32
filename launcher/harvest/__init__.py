"""Throughput a user's own training reported (`job=command`), read after its ranks end: the meter file
`launcher.meter` writes (also behind the Hugging Face and Lightning callbacks), a pattern on rank 0's
output, or torchtitan's and Megatron-LM's own log lines. Pure readers: no torch, no processes."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.harvest.logs import GROUPS, megatron_intervals, regex_intervals, regex_warmup, torchtitan_intervals
from launcher.harvest.meter_file import FILE, METER_SOURCES, meter_intervals
from launcher.harvest.reported import METRICS, NoThroughput, Reported, combine, no_throughput

__all__ = ["FILE", "GROUPS", "METRICS", "PRINTED", "NoThroughput", "Reported", "read_reported"]

# The line the examples in examples/ print of their own whole-job rate, read into printed_tokens_per_s so a
# trial's record can set what the program measured beside what launcher read (the last such line counts).
PRINTED = re.compile(r"whole-job tokens/s over steps \d+-\d+: (?P<tokens_per_s>[0-9]+(?:\.[0-9]*)?)")


def _printed(text: str) -> float | None:
    found = PRINTED.findall(text)
    return float(found[-1]) if found else None


def read_reported(
    *,
    metrics: str,
    trial_dir: Path,
    rank0_text: str,
    warmup_steps: int,
    world_size: int,
    tokens_per_sample: int | None,
    pattern: str | None,
    samples_per_step: int | None = None,
) -> Reported:
    """The whole job's throughput after `warmup_steps` optimizer steps, as `metrics` says to read it.

    `samples_per_step` (the global batch in samples) is only needed by a regex `step_s` group alone.
    `rank0_text` is the output of the rank that prints the training log: rank 0, Megatron's last rank
    (launcher/train/command_record.py printing_rank).
    Raises NoThroughput (one line naming the `metrics` choices) when the program reported none;
    ValueError for an unknown `metrics` or a regex with no usable group (bad input, caught at plan time).
    """
    if metrics in METER_SOURCES:
        intervals = meter_intervals(metrics, Path(trial_dir), tokens_per_sample=tokens_per_sample)
    elif metrics == "regex":
        if not pattern:
            raise ValueError(f"metrics=regex needs job.pattern with a named group ({', '.join(GROUPS)}); set it")
        intervals = regex_intervals(
            metrics,
            rank0_text,
            pattern,
            world_size=world_size,
            tokens_per_sample=tokens_per_sample,
            samples_per_step=samples_per_step,
        )
        warmup_steps = regex_warmup(metrics, pattern, intervals, warmup_steps)
    elif metrics == "torchtitan":
        intervals = torchtitan_intervals(metrics, rank0_text, world_size=world_size)
    elif metrics == "megatron":
        intervals = megatron_intervals(metrics, rank0_text, tokens_per_sample=tokens_per_sample)
    else:
        raise ValueError(f"job.metrics={metrics!r} is not one of {', '.join(METRICS)}; pick one")
    if not intervals:
        raise no_throughput(metrics, _nothing(metrics, pattern))
    return combine(metrics, intervals, warmup_steps=warmup_steps, printed=_printed(rank0_text))


def _nothing(metrics: str, pattern: str | None) -> str:
    """Why no step was found, in the user's terms."""
    if metrics in METER_SOURCES:
        return f"{FILE} holds fewer than 2 steps (step 1 has no start time); run more steps"
    if metrics == "regex":
        return f"job.pattern {pattern!r} matched nothing in rank 0's output"
    if metrics == "megatron":
        # training_log prints with print_rank_last: under pipeline parallelism rank 0 never prints it
        return "no megatron iteration line in the output read (Megatron prints it on the last rank); is it there?"
    return f"no {metrics} training log line in rank 0's output; is its logging on, at INFO level?"
