"""Throughput read from rank 0's output: a user's pattern (`metrics=regex`) and the log lines torchtitan and
Megatron-LM print of themselves. The formats are copied from their source (the commits are cited beside
the literal lines in tests/data/logs/), not guessed."""

from __future__ import annotations

import re
from collections.abc import Iterator

from launcher.harvest.reported import Interval, no_throughput

# What a `metrics=regex` pattern may name, in the order one is taken when it names several.
GROUPS = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "step_s")

# The colour codes torchtitan's logger wraps each field in (torchtitan/tools/utils.py Color).
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# torchtitan/components/metrics.py MetricsProcessor.log, a line every `metrics.log_freq` steps and at step 1:
#   step: {step:2}  loss: {loss:8.5f}  grad_norm: {g:7.4f}  memory: {GiB:5.2f}GiB({pct:.2f}%)  tps: {round(tps):,}
#   tflops: {tflops:,.2f}  mfu: {mfu:.2f}%
# tps is tokens/s per device over the steps since the last line (this rank's tokens / (seconds × tp·pp·cp)).
# "validate step: …" lines (no grad_norm) are the validation pass, not training.
TORCHTITAN = (
    r"(?<!validate )step:\s*(?P<step>\d+)\s+loss:\s*\S+\s+grad_norm:.*?"
    r"\btps:\s*(?P<tokens_per_s_per_gpu>[\d,]+(?:\.\d+)?)"
)

# megatron/training/training.py training_log, a line every `--log-interval` iterations (on the last rank):
#   [date] iteration {it:8d}/{train_iters:8d} | consumed samples: … | elapsed time per iteration (ms): {ms:.1f} |
#   throughput per GPU (TFLOP/s/GPU): … | learning rate: … | global batch size: {gbs:5d} | lm loss: … |
# elapsed time per iteration is the mean over the iterations since the last line.
MEGATRON = re.compile(
    r"\biteration\s+(?P<step>\d+)/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*(?P<ms>[\d.]+)\s*\|"
    r".*?global batch size:\s*(?P<gbs>\d+)\s*\|"
)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A `metrics=regex` pattern, checked: it compiles and names one of GROUPS."""
    try:
        compiled = re.compile(pattern, re.MULTILINE)
    except re.error as e:
        raise ValueError(f"job.pattern {pattern!r} is not a regular expression ({e}); fix it") from None
    if not set(compiled.groupindex) & set(GROUPS):
        raise ValueError(
            f"job.pattern {pattern!r} names none of the groups {', '.join(GROUPS)}; "
            f"name one, e.g. (?P<tokens_per_s>[0-9.]+)"
        )
    return compiled


def _numbered(metrics: str, matches: Iterator[re.Match[str]]) -> Iterator[tuple[re.Match[str], int, int]]:
    """(match, last step, steps) of each match of the program's last run: by its `step` group where the pattern
    has one (a line every N steps covers N), else a match a step. A step number that does not rise starts a new
    run (a restart), and the earlier ones are dropped by the caller's reset."""
    before = 0
    for i, m in enumerate(matches):
        step = _step(metrics, m)
        step = i + 1 if step is None else step
        yield m, step, step - before if step > before else 0
        before = step


def _step(metrics: str, m: re.Match[str]) -> int | None:
    """The match's `step` group as a number; None where the pattern has none (or it took no part)."""
    if "step" not in m.re.groupindex or m["step"] is None:
        return None
    if not (m["step"].isascii() and m["step"].isdigit()):
        raise no_throughput(
            metrics,
            f"the step group matched {m['step']!r}, not a step number; capture the digits alone, (?P<step>\\d+)",
        )
    return int(m["step"])


def _number(metrics: str, m: re.Match[str], group: str) -> float:
    """The figure a group captured ("1,234.5" reads 1234.5)."""
    try:
        return float(m[group].replace(",", ""))
    except ValueError:
        raise no_throughput(
            metrics, f"the {group} group matched {m[group]!r}, not a number; capture the digits alone, e.g. [0-9.,]+"
        ) from None


def regex_intervals(
    metrics: str,
    text: str,
    pattern: str | re.Pattern[str],
    *,
    world_size: int,
    tokens_per_sample: int | None,
    samples_per_step: int | None,
) -> list[Interval]:
    """One interval a match of `pattern` on `text`, the rate from the first of GROUPS it names:
    tokens_per_s as is, tokens_per_s_per_gpu × world_size, samples_per_s × tokens_per_sample, and step_s
    (seconds a step) with tokens_per_sample × samples_per_step tokens a step. A step_s group beside a rate also
    times the steps."""
    compiled = pattern if isinstance(pattern, re.Pattern) else compile_pattern(pattern)
    group = next(g for g in GROUPS if g in compiled.groupindex)
    if group == "samples_per_s" and tokens_per_sample is None:
        raise no_throughput(metrics, "a samples_per_s figure needs job.tokens_per_sample to count tokens; set it")
    if group == "step_s" and (tokens_per_sample is None or samples_per_step is None):
        raise no_throughput(
            metrics,
            f"a step_s figure alone needs the tokens a step (tokens_per_sample={tokens_per_sample} × "
            f"samples_per_step={samples_per_step}); set both, or match a tokens_per_s group",
        )
    out: list[Interval] = []
    for m, step, steps in _numbered(metrics, compiled.finditer(ANSI.sub("", text))):
        if steps == 0:
            out = []
            steps = step
        seconds = _number(metrics, m, "step_s") * steps if "step_s" in compiled.groupindex and m["step_s"] else None
        value = _number(metrics, m, group)
        if group == "step_s":
            rate = tokens_per_sample * samples_per_step / value if value > 0 else 0.0  # type: ignore[operator]
        else:
            scale = {"tokens_per_s": 1, "tokens_per_s_per_gpu": world_size, "samples_per_s": tokens_per_sample}
            rate = value * (scale[group] or 0)
        out.append(Interval(last_step=step, steps=steps, tokens_per_s=rate, seconds=seconds))
    return out


def regex_warmup(metrics: str, pattern: str | re.Pattern[str], intervals: list[Interval], warmup_steps: int) -> int:
    """The warm-up steps a `metrics=regex` reading leaves out of `intervals` (regex_intervals'). A pattern that
    matched once (in the program's last run) matched a summary, the program's own figure for its run: it is that
    rate, its warm-up the program's to leave out, so none. Otherwise the warm-up is counted in steps, which a
    pattern without a `step` group knows only as its matches (a match a step); when they all fall inside it, the
    reason says so, since a line every N steps is the likely cause."""
    if len(intervals) == 1:
        return 0
    compiled = pattern if isinstance(pattern, re.Pattern) else compile_pattern(pattern)
    if intervals and "step" not in compiled.groupindex and intervals[-1].last_step <= warmup_steps:
        raise no_throughput(
            metrics,
            f"job.pattern matched {len(intervals)} lines, each counted as one step as it has no step group, none "
            f"after the {warmup_steps} warm-up steps; capture the step number, (?P<step>\\d+), or run more steps",
        )
    return warmup_steps


def torchtitan_intervals(metrics: str, text: str, *, world_size: int) -> list[Interval]:
    """torchtitan's training lines: tps (per device) × world size over the steps since the line before."""
    return regex_intervals(
        metrics, text, re.compile(TORCHTITAN), world_size=world_size, tokens_per_sample=None, samples_per_step=None
    )


def megatron_intervals(metrics: str, text: str, *, tokens_per_sample: int | None) -> list[Interval]:
    """Megatron-LM's iteration lines: global batch size × tokens_per_sample (the sequence length) tokens an
    iteration, in the mean iteration time of the iterations since the line before."""
    if tokens_per_sample is None:
        reason = "Megatron logs samples (global batch size); set job.tokens_per_sample (its seq length)"
        raise no_throughput(metrics, reason)
    out: list[Interval] = []
    for m, step, steps in _numbered(metrics, MEGATRON.finditer(text)):
        if steps == 0:
            out = []
            steps = step
        step_s = _number(metrics, m, "ms") / 1000
        rate = int(m["gbs"]) * tokens_per_sample / step_s if step_s > 0 else 0.0
        out.append(Interval(last_step=step, steps=steps, tokens_per_s=rate, seconds=step_s * steps))
    return out
