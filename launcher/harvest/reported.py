"""What a user's training reported about its own throughput, one form for every source, and the
one rule that turns the steps a source reports into it (warm-up excluded, the whole job's tokens/s)."""

from __future__ import annotations

from dataclasses import dataclass

# The `job.metrics` choices, in the order a user is told them.
METRICS = ("meter", "regex", "torchtitan", "megatron", "hf", "lightning")


class NoThroughput(Exception):
    """The program reported no usable throughput; str(e) is the one-line reason."""


def no_throughput(metrics: str, reason: str) -> NoThroughput:
    """The exception for `reason`, naming the `metrics` choices so the user can pick another."""
    return NoThroughput(f"no throughput from metrics={metrics}: {reason} (job.metrics is one of {', '.join(METRICS)})")


@dataclass(kw_only=True, frozen=True)
class Reported:
    """A program's own throughput, as `launcher` records it for a trial."""

    source: str
    """Where it came from: "meter" | "regex" | "torchtitan" | "megatron" | "hf" | "lightning"."""
    step_s: tuple[float, ...]
    """Wall seconds of each optimizer step after the warm-up steps, in order; a source that logs an interval
    of steps gives each of them the interval's mean. Empty where the source prints rates only and no
    tokens-per-step figure was given to turn a rate into seconds."""
    tokens_per_s: float
    """The whole job's tokens/s over those steps (all ranks together)."""
    printed_tokens_per_s: float | None = None
    """The program's own printed whole-job figure (the examples' `PRINTED` line), where its log has one."""


@dataclass(kw_only=True, frozen=True)
class Interval:
    """Consecutive optimizer steps a source reports together (one step for the meter)."""

    last_step: int
    """1-based number of the interval's last step."""
    steps: int
    """How many steps it covers: it starts after step `last_step - steps`."""
    tokens_per_s: float
    """The whole job's tokens/s over the interval."""
    seconds: float | None = None
    """The interval's wall seconds, where the source times its steps; None for a rate alone."""


def combine(metrics: str, intervals: list[Interval], *, warmup_steps: int, printed: float | None = None) -> Reported:
    """The intervals that start after the first `warmup_steps` steps, as one figure: total tokens over total
    seconds where the source times its steps; otherwise the step-weighted harmonic mean of the rates, which is
    the same figure when each step processes the same tokens (a log of rates cannot say otherwise)."""
    measured = [iv for iv in intervals if iv.last_step - iv.steps >= warmup_steps]
    if not measured:
        last = intervals[-1].last_step if intervals else 0
        raise no_throughput(
            metrics, f"{last} steps reported, none measured after the {warmup_steps} warm-up steps; run more steps"
        )
    if bad := [iv.last_step for iv in measured if not iv.tokens_per_s > 0]:
        raise no_throughput(metrics, f"step {bad[0]} reported a rate of 0 tokens/s; check the figure it logs")
    if all(iv.seconds is not None and iv.seconds > 0 for iv in measured):
        seconds = [float(iv.seconds or 0) for iv in measured]
        tokens_per_s = sum(iv.tokens_per_s * s for iv, s in zip(measured, seconds)) / sum(seconds)
        step_s = tuple(s / iv.steps for iv, s in zip(measured, seconds) for _ in range(iv.steps))
    else:
        tokens_per_s = sum(iv.steps for iv in measured) / sum(iv.steps / iv.tokens_per_s for iv in measured)
        step_s = ()
    return Reported(source=metrics, step_s=step_s, tokens_per_s=tokens_per_s, printed_tokens_per_s=printed)
